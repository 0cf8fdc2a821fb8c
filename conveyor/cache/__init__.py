"""Stage 2: a static feature cache on the training device (PaGraph). Imports only `partition`.

    cache = build_cache(policy, graph, capacity=..., device=..., dtype=None, reserve="1GiB")
    x = cache.gather(batch.n_id)      # == graph.x[n_id] (in the cache's dtype), on `device`

Policies (cache/policies.py): `degree` keeps the highest out-degree nodes of `graph` (on a
partition, pass the partition's local graph, or its saved order as `ranking=`); `random` and `none`
are baselines; `optimal` ranks by access count in a recorded trace (`trace=[n_id, ...]`), the
upper bound for a static cache, for benchmarks only.

capacity: a fraction of the nodes in [0, 1]; a byte size of cached feature rows ("512MB",
"2GiB"); or "auto" (the default): fill `total - peak - reserve - prefetch` of the device, where
peak is the memory in use at the training's peak, the slot map (4 bytes a node) included. On
CUDA an auto cache starts empty, because the peak is only known after training has run; on CPU
(where the "device" is host memory) build_cache fits it at once to the available memory. The
cache copies rows only where the device differs from the features': on CPU it reads graph.x where
it lies (no private copy; the graph's own tensor, shared with the stage processes), and its
ranking and slot map only count the rows a device cache of that capacity would hold (`hits`).

What the batch sources do, in the process that owns the cache (the feature-loading stage), with
the run's `CacheSettings` (cache/settings.py: `cache.*`, its defaults and meanings):

    cache = CacheSpec(settings.cache, seed=settings.run.seed).build(graph, device)   # = build_cache(...)
    for epoch in range(epochs):
        cache.reset_stats()                       # per-epoch counters start at zero
        for step, batch in enumerate(batches):
            x = cache.gather(batch.n_id)          # returns with the device idle: safe to share
            log_per_batch(cache.last_batch_stats())   # hits, misses, hit_ratio, bytes_from_host,
                                                      # bytes_from_cache, gather_time_s
            ...forward, backward, step...
            if epoch == 0 and step + 1 == WARMUP_STEPS:   # e.g. 3 (PaGraph: after the first)
                cache.fit_to_free_memory()        # no-op unless capacity == "auto"
        log_per_epoch(cache.stats())              # the same totals + hit_ratio, batches,
                                                  # capacity_nodes, capacity_fraction,
                                                  # cached_bytes, map_bytes

fit_to_free_memory() measures the peak itself: on CUDA, `total - free` (every process on the GPU;
PyTorch's allocator keeps what a process once reserved, so the trainer's and sampler's peaks stay
counted) with this process's own reserved-but-idle memory given back; on CPU psutil's available
memory. If the training runs in another process and you measured its peak there, pass it:
`cache.fit_to_free_memory(peak_bytes=...)` (everything but the cache). `cache.fit_info` then holds
the figures the size came from (log it).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from conveyor.cache.feature_cache import FeatureCache
from conveyor.cache.host_budget import host_tier
from conveyor.cache.options import capacity_to_nodes, parse_bytes, parse_capacity, parse_dtype
from conveyor.cache.policies import POLICIES, policy_ranking
from conveyor.cache.protocol import FeatureRecipe, FeatureSource
from conveyor.cache.settings import CacheSettings
from conveyor.core import ConveyorError
from conveyor.core.device import resolve_device
from conveyor.core.names import require_own_name
from conveyor.partition import Graph
from conveyor.partition.hetero import is_typed

require_own_name(__name__, "conveyor.cache")


def build_cache(policy: str, graph: Graph, capacity="auto", device="cpu", dtype=None,
                reserve="1GiB", prefetch=0, ranking=None, trace=None, seed: int = 0,
                host_capacity=0, io_threads: int = 4, lookahead: int = 0) -> FeatureCache:
    """A FeatureCache over graph.x; see the module docstring for the arguments."""
    x = _check_features(graph)
    kind, value = parse_capacity(capacity)
    reserve, prefetch = parse_bytes(reserve, "cache.reserve"), parse_bytes(prefetch, "cache.prefetch")
    dtype = parse_dtype(dtype, x.dtype)  # x stays as it is: converted per gather, never whole
    device = resolve_device(device)
    order = policy_ranking(policy, graph, ranking=ranking, trace=trace, seed=seed)
    device_rows = 0 if kind == "auto" else capacity_to_nodes(kind, value, graph.num_nodes, x.size(1) * dtype.itemsize)
    host = host_tier(x, order, device, host_capacity, io_threads, device_rows)
    tiered_cpu = host is not None and device.type != "cuda"  # on CPU the host tier is the cache
    cache = FeatureCache(x, None if tiered_cpu else order, device, policy, auto=kind == "auto" and not tiered_cpu,
                         reserve=reserve, prefetch=prefetch, dtype=dtype, host=host)
    cache.lookahead = int(lookahead) if host is not None else 0
    if tiered_cpu:
        return cache
    if kind == "auto":
        if device.type != "cuda":
            cache.fit_to_free_memory()
    else:
        cache.resize(device_rows)
    return cache


def _check_features(graph: Graph) -> torch.Tensor:
    x = getattr(graph, "x", None)
    if x is None:
        raise ConveyorError(f"the graph {getattr(graph, 'name', '')!r} has no node features (x is "
                            f"None), so there is nothing to cache; load a dataset with features "
                            f"or attach them as graph.x ([num_nodes, F]).")
    if x.dim() != 2 or x.size(0) != graph.num_nodes:
        raise ConveyorError(f"graph.x must have shape [num_nodes, F] = [{graph.num_nodes}, F], got "
                            f"{tuple(x.shape)}.")
    if x.is_cuda:
        raise ConveyorError("graph.x must stay in host memory; the cache puts the rows it keeps "
                            "on the device itself and reads misses from the host copy.")
    return x


@dataclass(frozen=True)
class CacheSpec:
    """A feature cache as a recipe: its settings and the seed of the random policy (run.seed).
    Small and picklable, so the pipeline's loader stage builds the cache itself, over its own view
    of the shared graph, on its device."""
    settings: CacheSettings
    seed: int = 0

    def build(self, graph: Graph, device) -> FeatureCache:
        c = self.settings
        if is_typed(graph):  # one cache per node type, under one budget (cache/typed.py)
            from conveyor.cache.typed import build_typed_cache
            return build_typed_cache(c.policy, graph, capacity=c.capacity, device=device, dtype=c.dtype,
                                     reserve=c.reserve, prefetch=c.prefetch, seed=self.seed)
        return build_cache(c.policy, graph, capacity=c.capacity, device=device, dtype=c.dtype,
                           reserve=c.reserve, prefetch=c.prefetch, seed=self.seed, host_capacity=c.host_capacity,
                           io_threads=c.io_threads, lookahead=c.lookahead)


__all__ = ["POLICIES", "CacheSettings", "CacheSpec", "FeatureCache", "FeatureRecipe", "FeatureSource", "build_cache"]
