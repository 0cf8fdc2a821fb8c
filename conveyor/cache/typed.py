"""`TypedFeatureCache`: the feature cache of a typed graph (partition/hetero.py), one degree-ordered
`FeatureCache` per node type with features, all sized out of one byte budget.

Node types differ in feature width (ogbn-mag's papers have 128 features, its authors none), so a
batch's features cannot be one [n, F] matrix. `gather(n_id)` returns them flat instead: each node
type's rows in turn (types in the schema's order), a type's rows in the order its nodes have in
n_id, so `x[start:start + n_t * F_t].view(n_t, F_t)` is type t's [n_t, F_t] block, a view
(`split_features`). `gather_shape(n_id)` says how long that is, so the pipeline's loader stage
writes it straight into a slot (cache/protocol.py).

One budget. A fraction of the nodes caches that fraction of each type. A byte size, or `auto`
(the free device memory, fitted as FeatureCache fits it), is shared out by the policy: `degree`
fills it with the nodes of highest out-degree per byte of their row, across all types (a row is
read about as often as the node is drawn, i.e. in proportion to its out-degree, and costs its
width), so each type keeps a prefix of its own degree order; `random` gives every type the same
fraction. The slot maps (4 bytes a node of a type with a cached row) come out of it first.
"""
from __future__ import annotations

from typing import Dict, List, Optional

import torch
from torch import Tensor

from conveyor.cache.feature_cache import FeatureCache
from conveyor.cache.memory import cache_budget
from conveyor.cache.options import capacity_to_nodes, parse_bytes, parse_capacity, parse_dtype
from conveyor.cache.policies import random_ranking, rank_descending
from conveyor.core import ConveyorError
from conveyor.core.device import resolve_device
from conveyor.partition.hetero import Schema, TypedGraph

STATS = ("hits", "misses", "bytes_from_host", "bytes_from_cache", "gather_time_s", "batches")


class TypedFeatureCache:
    """One FeatureCache per node type with features (`caches`, by type index), under one budget."""

    feature_dim = 0  # the output is flat (module doc): gather_shape gives its length

    def __init__(self, schema: Schema, caches: Dict[int, FeatureCache], degrees: Dict[int, Tensor], policy: str,
                 device: torch.device, auto: bool = False, reserve: int = 0, prefetch: int = 0):
        self.schema, self.caches, self.degrees, self.policy = schema, caches, degrees, policy
        self.device, self.auto, self.reserve, self.prefetch = device, auto, reserve, prefetch
        self.ends = torch.tensor(schema.offsets[1:], dtype=torch.long, device=device)
        self.offsets = schema.offsets
        self.fit_info: dict = {}
        first = next(iter(caches.values()), None)
        self.dtype = first.dtype if first is not None else torch.float32

    # -- sizing ---------------------------------------------------------------------------------
    def resize_bytes(self, budget: int) -> Dict[int, int]:
        """Fill `budget` bytes (slot maps included) as the policy shares them (module doc)."""
        counts = share_budget(budget, self.caches, self.degrees, self.policy)
        for t, cache in self.caches.items():
            cache.resize(counts[t])
        return counts

    def resize_fraction(self, fraction: float) -> None:
        for cache in self.caches.values():
            cache.resize(capacity_to_nodes("fraction", fraction, cache.num_nodes, cache.row_bytes))

    def fit_to_free_memory(self, peak_bytes: Optional[int] = None, prefetch: Optional[int] = None,
                           batch_room: int = 0) -> int:
        """As FeatureCache's: `total - peak - batch_room - reserve - prefetch` of the device, shared
        out over the types; a no-op unless the capacity is auto."""
        if not self.auto:
            return self.capacity_nodes
        if prefetch is not None:
            self.prefetch = int(prefetch)
        budget, self.fit_info = cache_budget(self.device, self.reserve, self.prefetch, peak_bytes,
                                             held=self.cached_bytes + self.map_bytes, batch_room=int(batch_room))
        counts = self.resize_bytes(budget)
        self.fit_info["capacity_nodes"] = {self.schema.node_types[t]: k for t, k in counts.items()}
        return self.capacity_nodes

    @property
    def capacity_nodes(self) -> int:
        return sum(c.capacity_nodes for c in self.caches.values())

    @property
    def cached_bytes(self) -> int:
        return sum(c.cached_bytes for c in self.caches.values())

    @property
    def map_bytes(self) -> int:
        return sum(c.map_bytes for c in self.caches.values())

    # -- lookup ---------------------------------------------------------------------------------
    def type_counts(self, n_id: Tensor) -> List[int]:
        return torch.bincount(self.types(n_id), minlength=len(self.offsets) - 1).tolist()

    def types(self, n_id: Tensor) -> Tensor:
        return torch.bucketize(n_id.to(self.device), self.ends, right=True)

    def gather_shape(self, n_id: Tensor) -> tuple:
        """The shape of `gather(n_id)`: flat, every cached type's rows (module doc)."""
        counts = self.type_counts(n_id)
        return (sum(counts[t] * c.feature_dim for t, c in self.caches.items()),)

    def gather(self, n_id, out: Optional[Tensor] = None) -> Tensor:
        """The features of `n_id` (global ids), flat, type by type (module doc); into `out` if given."""
        n_id = torch.as_tensor(n_id).to(self.device, torch.long)
        types = self.types(n_id)
        counts = torch.bincount(types, minlength=len(self.offsets) - 1).tolist()
        size = sum(counts[t] * c.feature_dim for t, c in self.caches.items())
        if out is None:
            out = torch.empty(size, dtype=self.dtype, device=self.device)
        elif out.shape != (size,) or out.dtype != self.dtype:
            raise ValueError(f"gather: out must be a flat ({size},) {self.dtype} tensor, got {tuple(out.shape)} "
                             f"{out.dtype}")
        start = 0
        for t, cache in self.caches.items():
            rows = counts[t] * cache.feature_dim
            if counts[t]:
                local = n_id[types == t] - self.offsets[t]
                cache.gather(local, out=out[start:start + rows].view(counts[t], cache.feature_dim))
            start += rows
        return out

    # -- statistics -----------------------------------------------------------------------------
    def reset_stats(self) -> None:
        for cache in self.caches.values():
            cache.reset_stats()

    def stats(self) -> dict:
        """The caches' counters summed, their sizes, and each type's own."""
        per_type = {self.schema.node_types[t]: c.stats() for t, c in self.caches.items()}
        total = {k: sum(s[k] for s in per_type.values()) for k in STATS}
        seen = total["hits"] + total["misses"]
        total.update(hit_ratio=total["hits"] / seen if seen else 0.0, capacity_nodes=self.capacity_nodes,
                     cached_bytes=self.cached_bytes, map_bytes=self.map_bytes, per_type=per_type)
        return total

    def __repr__(self) -> str:
        parts = ", ".join(f"{self.schema.node_types[t]} {c.capacity_nodes:,}/{c.num_nodes:,}"
                          for t, c in self.caches.items())
        return (f"TypedFeatureCache({self.policy}: {parts} nodes, {self.cached_bytes / 2**20:.1f} MiB of "
                f"{self.dtype} on {self.device}{', auto' if self.auto else ''})")


def share_budget(budget: int, caches: Dict[int, FeatureCache], degrees: Dict[int, Tensor],
                 policy: str) -> Dict[int, int]:
    """How many rows of each type `budget` bytes buy (module doc: by out-degree per byte, or the
    same fraction of every type)."""
    counts = {t: 0 for t in caches}
    live = {t: c for t, c in caches.items() if c.ranking is not None and c.num_nodes}
    budget -= sum(c.num_nodes * 4 for c in live.values())  # the slot maps
    if budget <= 0 or not live:
        return counts
    if policy != "degree":
        total = sum(c.num_nodes * c.row_bytes for c in live.values())
        share = min(1.0, budget / max(total, 1))
        return {**counts, **{t: int(c.num_nodes * share) for t, c in live.items()}}
    score = torch.cat([degrees[t][c.ranking].double() / max(c.row_bytes, 1) for t, c in live.items()])
    cost = torch.cat([torch.full((c.num_nodes,), c.row_bytes, dtype=torch.long) for c in live.values()])
    owner = torch.cat([torch.full((c.num_nodes,), t, dtype=torch.long) for t, c in live.items()])
    order = rank_descending(score)  # stable: a type's own ranking stays in order
    taken = order[torch.cumsum(cost[order], 0) <= budget]
    chosen = torch.bincount(owner[taken], minlength=max(caches) + 1).tolist()
    return {**counts, **{t: chosen[t] for t in live}}


def build_typed_cache(policy: str, graph: TypedGraph, capacity="auto", device="cpu", dtype=None,
                      reserve="1GiB", prefetch=0, seed: int = 0) -> TypedFeatureCache:
    """A TypedFeatureCache over the graph's per-type features, as `build_cache` builds one cache."""
    if policy == "optimal":
        raise ConveyorError("cache policy optimal ranks by a recorded trace of one node type; use degree, random "
                            "or none for a typed graph.")
    kind, value = parse_capacity(capacity)
    reserve, prefetch = parse_bytes(reserve, "cache.reserve"), parse_bytes(prefetch, "cache.prefetch")
    device, schema, out_degree = resolve_device(device), graph.schema, graph.out_degree()
    features = sorted(graph.features.items())
    dtype = parse_dtype(dtype, features[0][1].dtype if features else torch.float32)  # one dtype for all types
    caches, degrees = {}, {}
    for t, x in features:
        degrees[t] = out_degree[schema.offsets[t]:schema.offsets[t + 1]]
        caches[t] = FeatureCache(x if x.dtype == dtype else x.to(dtype), type_ranking(policy, degrees[t], seed + t),
                                 device, policy)
    cache = TypedFeatureCache(schema, caches, degrees, policy, device, kind == "auto", reserve, prefetch)
    if kind == "auto" and device.type != "cuda":
        cache.fit_to_free_memory()
    elif kind == "fraction":
        cache.resize_fraction(value)
    elif kind == "bytes":
        cache.resize_bytes(int(value))
    return cache


def type_ranking(policy: str, degree: Tensor, seed: int) -> Optional[Tensor]:
    if policy == "none":
        return None
    if policy == "degree":
        return rank_descending(degree)
    if policy == "random":
        return random_ranking(degree.numel(), seed)
    raise ConveyorError(f"unknown cache policy {policy!r}; choose one of degree, random, none (e.g. cache=degree).")
