"""What the pipeline asks of a sampler, as types: any class with these methods serves, whatever it
subclasses (docs/design.md §2.6). `sample_many(seed_list)` (a super-batch a call) and
`manual_seed(seed)` (reseeded at each `run()`) are used when a sampler has them."""
from __future__ import annotations

from typing import Protocol, runtime_checkable

from torch import Tensor

from conveyor.partition import Graph
from conveyor.samplers.batch import SampledBatch


@runtime_checkable
class Sampler(Protocol):
    """Seeds in, their L-hop message-flow graph out (the contract of docs/design.md §2.2, §2.3)."""

    def sample(self, seeds: Tensor) -> SampledBatch: ...


@runtime_checkable
class SamplerRecipe(Protocol):
    """A sampler as a small picklable recipe, built inside the sampler's process over its own view
    of the shared graph (`SamplerSpec` is one)."""

    def build(self, graph: Graph, device) -> Sampler: ...
