"""Where training batches come from: the seed order of an epoch, and the serial batch source.

A batch source turns a list of seed tensors into `PreparedBatch`es (sampled subgraph + gathered
features + labels, on the training device). `SerialBatches` does it in the trainer's own process;
the pipeline does the same in separate processes and must yield the same batches in the same order.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Iterator, List

import torch
from torch import Tensor

from samplers import SampledBatch

# Distinct random streams derived from (run seed, epoch), so that a resumed or pipelined run
# replays exactly the batches of an uninterrupted serial one.
STREAM_ORDER, STREAM_SAMPLER, STREAM_EVAL, STREAM_MODEL = range(4)


def stream_seed(run_seed: int, epoch: int, stream: int) -> int:
    return (int(run_seed) * 1_000_003 + int(epoch) * 4_099 + stream * 97) % (2**62)


def epoch_seed_batches(train_idx: Tensor, batch_size: int, run_seed: int, epoch: int) -> List[Tensor]:
    """This epoch's shuffled training nodes, cut into mini-batches (the last may be smaller)."""
    g = torch.Generator().manual_seed(stream_seed(run_seed, epoch, STREAM_ORDER))
    order = train_idx[torch.randperm(train_idx.numel(), generator=g)]
    return list(order.split(batch_size))


def eval_seed_batches(idx: Tensor, batch_size: int) -> List[Tensor]:
    return list(idx.split(batch_size))


@dataclass
class PreparedBatch:
    batch: SampledBatch  # on the training device
    x: Tensor  # features of batch.n_id, in the cache's dtype
    y: Tensor  # labels of the seeds
    sample_s: float = 0.0
    gather_s: float = 0.0
    cache_hits: int = 0
    cache_misses: int = 0
    bytes_from_host: int = 0


def cache_delta(before: dict, after: dict) -> tuple[int, int, int]:
    """(hits, misses, bytes from host) of the gathers between two `cache.stats()` readings."""
    return tuple(int(after[k]) - int(before[k]) for k in ("hits", "misses", "bytes_from_host"))


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# Batches trained before an `auto` cache is sized: by then the training's peak memory is known.
WARMUP_BATCHES = 3


class SerialBatches:
    """Sample, then gather, batch after batch, in the calling process (`pipeline=serial`)."""

    def __init__(self, sampler, cache, labels: Tensor, device):
        self.sampler, self.cache, self.labels = sampler, cache, labels
        self.device = torch.device(device)
        self.batches_done = 0

    def run(self, seed_batches: List[Tensor], sampler_seed: int) -> Iterator[PreparedBatch]:
        self.sampler.manual_seed(sampler_seed)
        for seeds in seed_batches:
            if self.batches_done == WARMUP_BATCHES:
                self.cache.fit_to_free_memory()  # a no-op unless cache.capacity=auto
            self.batches_done += 1
            t0 = time.perf_counter()
            batch = self.sampler.sample(seeds).to(self.device)
            synchronize(self.device)
            t1 = time.perf_counter()
            before = self.cache.stats()
            x = self.cache.gather(batch.n_id)
            y = self.labels[seeds].to(self.device)
            synchronize(self.device)
            gather_s = time.perf_counter() - t1
            yield PreparedBatch(batch, x, y, t1 - t0, gather_s, *cache_delta(before, self.cache.stats()))

    def close(self) -> None:
        pass
