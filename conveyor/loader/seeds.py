"""The seed nodes of each batch: the order of an epoch, from random streams of (run seed, epoch).

Distinct streams per purpose, so that a resumed, pipelined or distributed run replays exactly the
batches of an uninterrupted serial one: the order of the training nodes, the sampler's draws, the
evaluation subgraphs, the model's dropout.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Protocol, runtime_checkable

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


@runtime_checkable
class SeedPlan(Protocol):
    """An epoch's batches of seed nodes: `nodes` cut into batches, each given as positions into
    `nodes` (PyG's `input_id`), and the stream the sampler draws them with. A loader iterates its
    plan; the trainer only picks which plan (alone: `EpochPlan`; a DDP rank: an `EqualPlan`)."""
    nodes: Tensor

    def positions(self, epoch: int) -> List[Tensor]:
        """Epoch `epoch`'s batches (epochs count from 1), as positions into `nodes`."""

    def sampler_seed(self, epoch: int) -> int:
        """The sampler's seed for epoch `epoch` (reseeded at each epoch, so a resume replays it)."""

    def __len__(self) -> int:
        """Batches per epoch."""


@dataclass(frozen=True)
class EpochPlan:
    """`nodes` in batches of `batch_size`, shuffled per epoch from `seed` (or in order), the last
    batch smaller or (drop_last) dropped: PyG's loader's and the trainer's batches."""
    nodes: Tensor
    batch_size: int
    seed: int
    shuffle: bool = True
    drop_last: bool = False

    def positions(self, epoch: int) -> List[Tensor]:
        if self.nodes.numel() == 0:
            return []  # no seeds, no batch (split() would give one empty one), as PyG's loaders
        everything = torch.arange(self.nodes.numel())
        batches = list((shuffled(everything, self.seed, epoch) if self.shuffle else everything).split(self.batch_size))
        if self.drop_last and batches and batches[-1].numel() < self.batch_size:
            batches.pop()
        return batches

    def sampler_seed(self, epoch: int) -> int:
        return stream_seed(self.seed, epoch, STREAM_SAMPLER)

    def __len__(self) -> int:
        n, b = self.nodes.numel(), self.batch_size
        return n // b if self.drop_last else -(-n // b)


@dataclass(frozen=True)
class EqualPlan:
    """`nodes` shuffled per epoch from `seed` in exactly `num_batches` batches (sizes differ by at
    most one): a DDP rank's share of the training nodes, or of the training links, so that every
    rank steps the optimizer equally often (`seed`: the rank's own, trainer/distributed)."""
    nodes: Tensor
    num_batches: int
    seed: int

    def positions(self, epoch: int) -> List[Tensor]:
        return list(shuffled(torch.arange(self.nodes.numel()), self.seed, epoch).tensor_split(self.num_batches))

    def sampler_seed(self, epoch: int) -> int:
        return stream_seed(self.seed, epoch, STREAM_SAMPLER)

    def __len__(self) -> int:
        return self.num_batches


@dataclass(frozen=True)
class LimitedPlan:
    """The first `max_batches` batches of each epoch of `plan` (trainer.max_batches)."""
    plan: SeedPlan
    max_batches: int

    @property
    def nodes(self) -> Tensor:
        return self.plan.nodes

    def positions(self, epoch: int) -> List[Tensor]:
        return self.plan.positions(epoch)[:self.max_batches]

    def sampler_seed(self, epoch: int) -> int:
        return self.plan.sampler_seed(epoch)

    def __len__(self) -> int:
        return min(len(self.plan), self.max_batches)


def limited(plan: SeedPlan, max_batches: int | None) -> SeedPlan:
    """`plan`, cut to `max_batches` batches an epoch (None: as it is)."""
    return plan if max_batches is None else LimitedPlan(plan, int(max_batches))
