"""The seed nodes of each batch: the order of an epoch, from random streams of (run seed, epoch).

Distinct streams per purpose, so that a resumed, pipelined or distributed run replays exactly the
batches of an uninterrupted serial one: the order of the training nodes, the sampler's draws, the
evaluation subgraphs, the model's dropout.
"""
from __future__ import annotations

from typing import List

import torch
from torch import Tensor

STREAM_ORDER, STREAM_SAMPLER, STREAM_EVAL, STREAM_MODEL = range(4)


def stream_seed(run_seed: int, epoch: int, stream: int) -> int:
    return (int(run_seed) * 1_000_003 + int(epoch) * 4_099 + stream * 97) % (2**62)


def shuffled(idx: Tensor, run_seed: int, epoch: int) -> Tensor:
    """`idx` in this epoch's random order (the one shuffler of training nodes)."""
    g = torch.Generator().manual_seed(stream_seed(run_seed, epoch, STREAM_ORDER))
    return idx[torch.randperm(idx.numel(), generator=g)]


def epoch_seed_batches(train_idx: Tensor, batch_size: int, run_seed: int, epoch: int) -> List[Tensor]:
    """This epoch's shuffled training nodes, cut into mini-batches (the last may be smaller)."""
    return list(shuffled(train_idx, run_seed, epoch).split(batch_size))


def eval_seed_batches(idx: Tensor, batch_size: int) -> List[Tensor]:
    return list(idx.split(batch_size))
