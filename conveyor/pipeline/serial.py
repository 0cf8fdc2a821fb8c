"""`pipeline=serial`: sample, then gather, batch after batch, in the calling process.

A batch source turns a list of seed tensors into `PreparedBatch`es (sampled subgraph + gathered
features + labels, on the training device). AsyncBatches (source.py) does the same in separate
processes and must yield the same batches in the same order. Both take the same arguments
(`conveyor.pipeline.batch_source`; docs/design.md §2.6).
"""
from __future__ import annotations

import time
from collections import deque
from typing import Iterator, List, Optional

import torch
from torch import Tensor

from conveyor.core.cores import torch_threads
from conveyor.partition import Graph
from conveyor.pipeline.batch import (
    WARMUP_BATCHES,
    BatchCost,
    PreparedBatch,
    built,
    device_labels,
    feature_stats,
    gather_attributes,
    reseed,
    seed_labels,
    synchronize,
)
from conveyor.pipeline.memory import BatchPeak, batch_room
from conveyor.pipeline.phases import PhaseSamplers, check_phase, gathers_features
from conveyor.pipeline.room import PipelineRoom


class SerialBatches:
    def __init__(self, graph: Graph, sampler, features, device, batch_ratio: float = 1.0,
                 sampling_threads: Optional[int] = None, attributes=None):
        """`sampler`: a sampler (`sample(seeds)`) or a spec of one (`build(graph, device)`, e.g.
        samplers.SamplerSpec); `features`: a feature source (`gather(n_id)`, e.g. a FeatureCache)
        or a spec of one (cache.CacheSpec); `batch_ratio`: the run's largest batch over its
        training batch (memory.py), so an auto cache leaves room for it; `sampling_threads`:
        torch's CPU threads while sampling (the trainer's own are kept for training), or None:
        the trainer's; `attributes`: the other attributes each batch carries (an AttributeStore or
        its spec), or None."""
        self.device = torch.device(device)
        self.samplers = PhaseSamplers(sampler, graph, self.device, sampling_threads)
        self.cache = built(features, graph, self.device)
        self.attributes = built(attributes, graph, self.device)
        self.labels = device_labels(graph.y, self.device)  # once: each batch's labels are gathered there
        self.batches_done = 0
        self.batch_ratio, self.peak = batch_ratio, BatchPeak(self.device)
        self.sampling_threads = sampling_threads
        takes_tickets = callable(getattr(self.cache, "look_ahead", None))  # a host tier's (cache/host_tier.py)
        self.lookahead = int(getattr(self.cache, "lookahead", 0)) if takes_tickets else 0
        self.room = PipelineRoom.of(graph, sampler, features, self.device, batch_ratio=batch_ratio,
                                    attributes=attributes)

    def run(self, seed_batches: List[Tensor], sampler_seed: int, phase: str = "train") -> Iterator[PreparedBatch]:
        """As AsyncBatches.run (`phase`: pipeline/phases.py; no TensorBoard series here). With a
        host tier's look-ahead (cache.lookahead), the next batches are sampled that many ahead and
        their rows read in the background while this one trains: the same batches, in order."""
        sampler, features = self.samplers.for_phase(check_phase(phase)), gathers_features(phase)
        self.room.check_run(seed_batches, phase)  # its largest batch fits in memory (room.py)
        reseed(sampler, sampler_seed)
        lookahead = self.lookahead if features else 0
        ahead: deque = deque()  # (batch, its sampling seconds, its ticket), sampled before their turn
        coming = iter(seed_batches)
        try:
            for _ in seed_batches:
                self.peak.start()
                if self.batches_done == WARMUP_BATCHES and callable(getattr(self.cache, "fit_to_free_memory", None)):
                    self.cache.fit_to_free_memory(batch_room=batch_room(self.peak.bytes(), self.batch_ratio))
                self.batches_done += 1
                while len(ahead) <= lookahead and (seeds := next(coming, None)) is not None:
                    ahead.append(self.sample(sampler, seeds, lookahead))
                batch, sample_s, ticket = ahead.popleft()
                t1 = time.perf_counter()
                before = feature_stats(self.cache)
                x = self.gather_features(batch, features, ticket)
                y = None if self.labels is None else seed_labels(self.labels, batch)
                attrs = self.gather_attributes(batch)
                synchronize(self.device)
                gather_s = time.perf_counter() - t1
                cost = BatchCost(sample_s=sample_s).gathered(gather_s, before, feature_stats(self.cache))
                yield PreparedBatch.of(batch, x, y, cost, attrs)
        finally:
            for _, _, ticket in ahead:  # a pass left early: the rows read ahead go
                if ticket is not None:
                    self.cache.release(ticket)

    def sample(self, sampler, seeds: Tensor, lookahead: int) -> tuple:
        """One batch on the device, its sampling time, and its look-ahead ticket (or None)."""
        t0 = time.perf_counter()
        with torch_threads(self.sampling_threads or torch.get_num_threads()):
            batch = sampler.sample(seeds)
        batch = batch.to(self.device)
        synchronize(self.device)
        ticket = self.cache.look_ahead(batch.n_id) if lookahead else None
        return batch, time.perf_counter() - t0, ticket

    def gather_features(self, batch, features: bool, ticket: Optional[int] = None):
        if self.cache is None:
            return None
        if not features:
            return no_features(self.cache, self.device)
        if ticket is None:
            return self.cache.gather(batch.n_id)
        x = self.cache.gather(batch.n_id, ticket=ticket)
        self.cache.release(ticket)
        return x

    def gather_attributes(self, batch) -> dict:
        if self.attributes is None:
            return {}
        new = lambda name, shape, dtype: torch.empty(shape, dtype=dtype, device=self.device)
        return gather_attributes(self.attributes, batch, new)

    def close(self) -> None:
        pass

    def __enter__(self) -> "SerialBatches":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def no_features(cache, device) -> torch.Tensor:
    """A batch's x when its phase gathers none: no rows, the cache's width and dtype."""
    return torch.empty(0, cache.feature_dim, dtype=cache.dtype, device=device)

