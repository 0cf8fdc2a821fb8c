"""Checks shared by every sampler, so each bad input gets the same clear message."""
from __future__ import annotations

import numbers
from typing import Sequence

import torch
from torch import Tensor

from conveyor.core import ConveyorError
from conveyor.core.fields import BEYOND_INT64, INT64_MAX

ALL_NEIGHBOURS = -1  # a fanout of -1 takes every in-neighbour, as in PyG and DGL
REPEATED_SEEDS = ("seeds must be unique node ids, but some appear more than once; deduplicate them (e.g. "
                  "torch.unique) before sampling.")


def check_fanouts(fanouts: Sequence[int], name: str = "sampler.fanouts") -> list[int]:
    """The fanouts as a list of ints, each >= 0 (0: no neighbour at that hop, as in PyG) or -1
    (every neighbour). Nothing is coerced: a string ('15' is not [1, 5]), a float (2.7 is not 2)
    or a bool is refused, so what runs is what was written. `name`: what the caller calls them
    (num_neighbors in Python)."""
    example = f"{name}=[15,10,5]" if "." in name else f"{name}=[15, 10, 5]"
    if isinstance(fanouts, (str, bytes)) or not isinstance(fanouts, Sequence) or not fanouts:
        raise ConveyorError(f"{name} must be a non-empty list of integers >= 0 or -1, one per hop (e.g. "
                            f"{example}), got {fanouts!r}.")
    huge = [f for f in fanouts if _is_integer(f) and f > INT64_MAX]
    if huge:
        raise ConveyorError(f"{name} holds {huge[0]}, {BEYOND_INT64}; write -1 for every "
                            f"neighbour of that hop, or a fanout below that (e.g. [15, 10, 5]).")
    if not all(_is_integer(f) and (0 <= f or f == ALL_NEIGHBOURS) for f in fanouts):
        raise ConveyorError(
            f"{name} must be a non-empty list of integers >= 0 (one per hop, e.g. [15, 10, 5]; 0: no "
            f"neighbour at that hop), or -1 for every neighbour of that hop, got {list(fanouts)}.")
    return [int(f) for f in fanouts]


def cap_fanouts(fanouts: Sequence[int], max_degree: int) -> list[int]:
    """Each fanout at most the largest in-degree, and -1 (every neighbour) exactly that: a node
    never has more neighbours to draw, so the sample is the same, while a sampler's loops and
    buffers sized by the fanout stay small."""
    cap = max(max_degree, 1)
    return [cap if f == ALL_NEIGHBOURS else min(f, cap) for f in fanouts]


def _is_integer(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def check_seeds(seeds, num_nodes: int, unique: bool = True) -> Tensor:
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
    if unique and torch.unique(seeds).numel() != seeds.numel():
        raise ConveyorError(REPEATED_SEEDS)
    return seeds
