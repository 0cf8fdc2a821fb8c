"""Checks shared by every sampler, so each bad input gets the same clear message."""
from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor

from partition import ConveyorError


def check_fanouts(fanouts: Sequence[int]) -> list[int]:
    try:
        fanouts = [int(f) for f in fanouts]
    except (TypeError, ValueError):
        raise ConveyorError(f"sampler.fanouts must be a list of positive integers, got {fanouts!r}.")
    if not fanouts or any(f <= 0 for f in fanouts):
        raise ConveyorError(
            f"sampler.fanouts must be a non-empty list of positive integers (one per hop, e.g. "
            f"[15, 10, 5]), got {fanouts}; to take every neighbour use a fanout above the largest "
            f"degree.")
    return fanouts


def check_seeds(seeds, num_nodes: int) -> Tensor:
    seeds = torch.as_tensor(seeds)
    if seeds.dim() != 1 or seeds.dtype.is_floating_point or seeds.dtype == torch.bool:
        raise ConveyorError(f"seeds must be a 1-D tensor of integer node ids, got shape "
                            f"{tuple(seeds.shape)} and dtype {seeds.dtype}.")
    seeds = seeds.long()
    if seeds.numel() == 0:
        return seeds
    lo, hi = int(seeds.min()), int(seeds.max())
    if lo < 0 or hi >= num_nodes:
        raise ConveyorError(f"seed node ids must lie in 0..{num_nodes - 1}, got ids from {lo} to "
                            f"{hi}; check that the seeds belong to this graph.")
    if torch.unique(seeds).numel() != seeds.numel():
        raise ConveyorError("seeds must be unique node ids, but some appear more than once; "
                            "deduplicate them (e.g. torch.unique) before sampling.")
    return seeds
