"""What the pipeline asks of a feature source, as types: any class with these members serves,
whatever it subclasses (docs/design.md §2.6). A `fit_to_free_memory(batch_room=)` is called after
the warm-up batches when a source has one; a `gather_shape(n_id)` says what shape `gather` returns
when it is not [len(n_id), feature_dim] (a typed graph's flat rows: cache/typed.py)."""
from __future__ import annotations

from typing import Optional, Protocol, runtime_checkable

import torch
from torch import Tensor

from conveyor.partition import Graph


@runtime_checkable
class FeatureSource(Protocol):
    """The rows of `n_id` on the training device (`FeatureCache` is one)."""
    feature_dim: int
    dtype: torch.dtype

    def gather(self, n_id: Tensor, out: Optional[Tensor] = None) -> Tensor:
        """`x[n_id]` on the device, written into `out` when it is given."""

    def stats(self) -> dict:
        """Counters since the start: `hits`, `misses`, `bytes_from_host` (or `{}`)."""


@runtime_checkable
class FeatureRecipe(Protocol):
    """A feature source as a small picklable recipe, built inside the loader's process (`CacheSpec`)."""

    def build(self, graph: Graph, device) -> FeatureSource: ...


def feature_shape(features, n_id: Tensor) -> tuple:
    """The shape `features.gather(n_id)` returns: its `gather_shape`, else [len(n_id), feature_dim]."""
    if callable(getattr(features, "gather_shape", None)):
        return tuple(features.gather_shape(n_id))
    return (n_id.numel(), features.feature_dim)
