"""Sizes that cannot fit are refused with the estimate before anything is allocated.

`model.hidden=1e9` or `data.num_classes=1e12` would otherwise end in an allocator error after the
data loaded. The estimate is a lower bound from the config alone: the hidden-to-hidden and
hidden-to-class weight matrices of a model of len(sampler.fanouts) layers, each float32 value held
four times in training (weights, gradients, Adam's two moments); the features' own layer is left
out as the data is not read yet. A bound above the device's memory cannot fit whatever the data.
"""
from __future__ import annotations

import os

import torch

from conveyor.core import ConveyorError

COPIES = 4 * 4  # bytes of float32 x (weights, gradients, two Adam moments)


def device_memory(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def least_model_bytes(hidden: int, num_classes: int, layers: int) -> int:
    if layers < 2:  # features straight to classes: only the unread features' width bounds it
        return 0
    return COPIES * (hidden * hidden * (layers - 2) + hidden * num_classes)


def check_model_size(hidden: int, num_classes: int | None, layers: int, device: torch.device) -> None:
    """Refuse a model whose weights alone cannot fit in `device`'s memory, saying the estimate."""
    need, have = least_model_bytes(hidden, num_classes or 2, layers), device_memory(device)
    classes = num_classes or "at least 2"
    if need > have:
        raise ConveyorError(
            f"model.hidden={hidden} with {classes} classes and {layers} layers "
            f"needs at least {need / 2**30:,.1f} GiB for the model's weights, gradients and optimizer "
            f"state, but this {device.type} device has {have / 2**30:,.1f} GiB; lower model.hidden "
            f"(or data.num_classes, or the layers in sampler.fanouts).")
