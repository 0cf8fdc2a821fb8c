"""The cache a run's config asks for: what both batch sources (serial, and the async pipeline's
loader stage) build, so the two gather from the same cache."""
from __future__ import annotations

import torch

from conveyor.partition import Graph

from . import build_cache
from .feature_cache import FeatureCache


def cache_from_config(cfg, graph: Graph, device: torch.device) -> FeatureCache:
    """`cfg.cache` (policy, capacity, dtype, reserve, prefetch: defaults in conf/cache/*.yaml)
    over `graph.x` on `device`; `run.seed` orders the random policy."""
    c = cfg.cache  # every key is declared in each conf/cache/*.yaml: the defaults live there only
    return build_cache(str(c.policy), graph, capacity=c.capacity, device=device, dtype=c.dtype,
                       reserve=c.reserve, prefetch=c.prefetch, seed=int(cfg.run.seed))
