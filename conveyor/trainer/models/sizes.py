"""Sizes that cannot fit are refused with the estimate before anything is allocated.

`model.hidden=1e9` or `data.num_classes=1e12` would otherwise end in an allocator error after the
data loaded, or in the kernel's OOM killer. The estimate is a lower bound: the weight matrices of a
model of len(sampler.fanouts) layers (features to hidden, hidden to hidden, hidden to classes; the
features' layer once their width is known: synthetic's data.num_features, the graph fit() is
given), each float32 value held four times in training (weights, gradients, Adam's two moments),
once per rank on one machine. It is checked against what the device may still allocate
(core/memory.py: on the host psutil's available memory within the cgroup's limit).
"""
from __future__ import annotations

import torch

from conveyor.core.memory import check_memory

COPIES = 4 * 4  # bytes of float32 x (weights, gradients, two Adam moments)
FIX = "Lower model.hidden (or {what}the layers in sampler.fanouts)."


def least_model_bytes(hidden: int, num_classes: int, layers: int, features: int = 0) -> int:
    """The bytes training a model of these sizes takes at least (its weight matrices, four times)."""
    if layers < 2:  # features straight to classes
        return COPIES * features * num_classes
    return COPIES * (features * hidden + hidden * hidden * (layers - 2) + hidden * num_classes)


def check_model_size(hidden: int, num_classes: int | None, layers: int, device: torch.device,
                     features: int | None = None, copies: int = 1) -> None:
    """Refuse a model whose weights alone cannot fit in what `device` may still allocate (`copies`:
    the ranks on this machine, each with its own), saying the estimate."""
    need = copies * least_model_bytes(hidden, num_classes or 2, layers, features or 0)
    sizes = (f"model.hidden={hidden} with {num_classes or 'at least 2'} classes"
             f"{f', {features} features' if features else ''} and {layers} layer{'s' * (layers != 1)}"
             f"{f' on {copies} ranks' if copies > 1 else ''}")
    fix = FIX.format(what="data.num_features, " * bool(features) + "data.num_classes, or ")
    check_memory(sizes, {"for the model's weights, gradients and optimizer state": need}, device, fix)
