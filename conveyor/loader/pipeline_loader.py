"""`PipelineLoader`: one batch source of the pipeline (`pipeline.batch_source`: the sampler and
feature-loader processes, the cache, the pace controller, the recycled slots), started at first use
and kept across epochs, iterated epoch by epoch along its `SeedPlan`. The trainer's loader, and the
base of `conveyor.NeighborLoader`, which turns each batch into PyG's `Data`.
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any, Iterator, List

import torch
from torch import Tensor

from conveyor.cache import FeatureRecipe, FeatureSource
from conveyor.core import ConveyorError
from conveyor.loader.seeds import SeedPlan
from conveyor.partition import Graph
from conveyor.partition.attributes import AttributeSpec, AttributeStore
from conveyor.pipeline import PipelineSettings, PreparedBatch, batch_source
from conveyor.pipeline.forkserver import start_early
from conveyor.pipeline.shutdown import collect_if_left
from conveyor.samplers import Sampler, SamplerRecipe


@dataclass(frozen=True)
class LoaderParts:
    """What the pipeline is built from: `pipeline.batch_source`'s arguments but the graph."""
    sampler: Sampler | SamplerRecipe  # an object, or a recipe the sampler process builds
    features: FeatureSource | FeatureRecipe  # likewise, in the feature-loader process
    device: torch.device  # where batches arrive
    settings: PipelineSettings
    batch_ratio: float = 1.0  # the largest batch run() will be given over a training batch, in seeds
    recorder: Any = None  # anything with scalar(tag, value, step): the async pipeline's TensorBoard series
    attributes: AttributeStore | AttributeSpec | None = None  # the graph's other attributes a batch carries


class PipelineLoader:
    """Batches of `plan`'s seeds through the pipeline `parts` describe, over `graph`.

    `epoch(e)` yields epoch e's `PreparedBatch`es (per-hop blocks, the trainer's fast path) and
    `run(seed_batches, sampler_seed, phase)` any other pass over the same pipeline (evaluation).
    Close it with `close()` or a `with` block; garbage collection and interpreter exit close it too."""

    def __init__(self, graph: Graph, parts: LoaderParts, plan: SeedPlan):
        self.graph, self.parts, self.plan, self.device = graph, parts, plan, parts.device
        self._state = {"source": None, "closed": False}  # shared with the finalizer, which must not hold self
        self._finalizer = weakref.finalize(self, _close, self._state)
        if self.asynchronous:
            start_early()  # the stage processes' fork server imports while this process goes on

    @property
    def source(self):
        """The pipeline's batch source, started on first use and kept until `close()`."""
        if self._state["closed"]:
            raise ConveyorError(f"this {type(self).__name__} was closed; make a new one to iterate again.")
        if self._state["source"] is None:
            p = self.parts
            largest = max((int(batch.numel()) for batch in self.plan.positions(1)), default=0)  # its slots' room
            self._state["source"] = batch_source(self.graph, p.sampler, p.features, p.device, p.settings,
                                                 p.batch_ratio, p.recorder, p.attributes, batch_size=largest or None)
        return self._state["source"]

    @property
    def asynchronous(self) -> bool:
        """Whether the pipeline runs in stage processes (async, or auto's choice for this graph)."""
        return self.parts.settings.choose(self.graph)[0] == "async"

    def start(self) -> PipelineLoader:
        """Start the pipeline now, so that its start-up is no epoch's time."""
        self.source  # noqa: B018
        return self

    def epoch(self, epoch: int) -> Iterator[PreparedBatch]:
        """Epoch `epoch`'s batches of the plan's seeds, in order (epochs count from 1)."""
        return self.run(self.seed_batches(epoch), self.plan.sampler_seed(epoch))

    def seed_batches(self, epoch: int) -> List[Tensor]:
        return [self.plan.nodes[p] for p in self.plan.positions(epoch)]

    def run(self, seed_batches: List[Tensor], sampler_seed: int, phase: str = "train") -> Iterator[PreparedBatch]:
        """The pipeline's `PreparedBatch`es of `seed_batches`, drawn with `sampler_seed`; `phase` as
        `pipeline.batch_source`'s run() takes it (train, eval, layerwise, layerwise-hidden)."""
        return self.source.run(seed_batches, sampler_seed, phase)

    def __len__(self) -> int:
        return len(self.plan)

    def close(self) -> None:
        """Stop the pipeline's processes and release its memory (idempotent)."""
        self._finalizer()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _close(state: dict) -> None:
    state["closed"] = True
    source, state["source"] = state["source"], None
    if source is not None:
        source.close()
        names = list(getattr(source, "semaphores", ()))
        del source
        collect_if_left(names)  # the queues' named semaphores go with their last reference
