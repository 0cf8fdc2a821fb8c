"""`FeatureCache`: a static cache of feature rows on the training device (PaGraph).

Layout: `rows` holds the cached nodes' features, one row per slot, on the device; `slot` is a dense
int32 map node id -> slot (-1: not cached) on the device, 4 bytes a node, so a lookup is one index
operation instead of a hash probe. `features` is the full feature matrix in host memory.

Where the device is the host (CPU), a copy of some rows would sit beside the rows it copies, in
the same memory: there the cache copies nothing (`rows` stays empty, `copied_bytes` 0) and every
gather reads the shared features directly, in one `index_select` (the graph's own tensor: memory-
mapped or in shared memory under the async pipeline). The ranking, the slot map and the counters
stay as on a GPU: `hits` are the rows a device cache of this capacity would have served.

gather(n_id, out=None): look every id up in `slot`; one gather from `rows` on the device fills
the output in n_id order (a miss gets slot 0's row as a placeholder); the misses are gathered
from host memory into a reused staging buffer (pinned on CUDA), copied in one transfer and
written over their placeholders. The output is a new tensor, or `out` (the pipeline's loader
passes a view of the slot the batch travels in, so the features are written once). Duplicate ids
are served (and counted) once per occurrence. The function ends with the device idle (one stream
synchronisation), so its time is real and its output can be handed to another process.
"""
from __future__ import annotations

import time
from typing import Optional

import torch
from torch import Tensor

from conveyor.cache.host_tier import HostTier, HostTierReads
from conveyor.cache.memory import cache_budget
from conveyor.core import ConveyorError

FILL_CHUNK_BYTES = 64 << 20  # fill the cache in pieces, so no full-size copy sits in host memory


class FeatureCache(HostTierReads):
    def __init__(self, features: Tensor, ranking: Optional[Tensor], device: torch.device,
                 policy: str, auto: bool = False, reserve: int = 0, prefetch: int = 0,
                 dtype: Optional[torch.dtype] = None, host: Optional[HostTier] = None):
        self.features = features  # host, in its own dtype (float16 on disk, say): converted per gather
        self._dtype = features.dtype if dtype is None else dtype
        self.host = host  # the host tier over on-disk features (host_tier.py); None: read in place
        self.ranking = ranking  # node ids, best first (None: cache nothing)
        self.device = device
        self.policy = policy
        self.auto = auto
        self.reserve = reserve
        self.prefetch = prefetch
        self.fit_info: dict = {}
        self._capacity = 0
        self.rows = torch.empty(0, self.feature_dim, dtype=self.dtype, device=device)
        self.slot: Optional[Tensor] = None  # allocated only when something is cached
        self._staging: Optional[Tensor] = None
        self.counters = GatherCounters()

    # -- shape ----------------------------------------------------------------------------------
    @property
    def num_nodes(self) -> int:
        return self.features.size(0)

    @property
    def feature_dim(self) -> int:
        return self.features.size(1)

    @property
    def dtype(self) -> torch.dtype:  # what gather returns: cache.dtype, else the features'
        return self._dtype

    @property
    def row_bytes(self) -> int:
        return self.feature_dim * self._dtype.itemsize

    @property
    def capacity_nodes(self) -> int:
        return self._capacity

    @property
    def cached_bytes(self) -> int:
        """The bytes of the rows the cache serves as hits (copied or, on the host, shared)."""
        return self.capacity_nodes * self.row_bytes

    @property
    def copied_bytes(self) -> int:
        """The bytes of the cache's own copy of those rows: 0 where it reads the shared features."""
        return self.rows.numel() * self.rows.element_size()

    @property
    def shares_features(self) -> bool:
        """Whether the device is where the features are (the host): then nothing is copied."""
        return self.device == self.features.device

    @property
    def map_bytes(self) -> int:
        return 0 if self.slot is None else self.slot.numel() * self.slot.element_size()

    @property
    def on_cuda(self) -> bool:
        return self.device.type == "cuda"

    # -- filling --------------------------------------------------------------------------------
    def resize(self, num_nodes: int) -> int:
        """Cache the first `num_nodes` nodes of the ranking (fewer if the ranking is shorter)."""
        k = 0 if self.ranking is None else max(0, min(int(num_nodes), self.ranking.numel()))
        if k == self.capacity_nodes:
            return k
        # Free the old cache before allocating the new one: the device may not hold both.
        self.rows, self.slot, self._capacity = self.rows.new_empty(0, self.feature_dim), None, 0  # not a view
        if k == 0:
            return 0
        keep = self.ranking[:k]
        self.slot = torch.full((self.num_nodes,), -1, dtype=torch.int32, device=self.device)
        self.slot[keep.to(self.device)] = torch.arange(k, dtype=torch.int32, device=self.device)
        self._capacity = k
        if self.shares_features:  # the rows are already in this memory: read them where they are
            return k
        rows = torch.empty(k, self.feature_dim, dtype=self.dtype, device=self.device)
        step = max(1, FILL_CHUNK_BYTES // max(self.row_bytes, 1))
        for start in range(0, k, step):
            rows[start:start + step] = self.features.index_select(0, keep[start:start + step])  # converts
        self.rows = rows
        return k

    def fit_to_free_memory(self, peak_bytes: Optional[int] = None,
                           prefetch: Optional[int] = None, batch_room: int = 0) -> int:
        """For capacity 'auto': fill `total - peak - batch_room - reserve - prefetch` bytes of the
        device with the best-ranked rows (see cache/__init__.py for when to call it); `batch_room`
        is kept for batches larger than the peak's. A no-op returning the current size when the
        capacity was given explicitly."""
        if not self.auto:
            return self.capacity_nodes
        if prefetch is not None:
            self.prefetch = int(prefetch)
        budget, self.fit_info = cache_budget(self.device, self.reserve, self.prefetch, peak_bytes,
                                             held=self.copied_bytes + self.map_bytes,
                                             batch_room=int(batch_room))
        map_cost = self.num_nodes * 4  # the int32 slot map comes out of the same budget
        k = (budget - map_cost) // max(self.row_bytes, 1) if budget > map_cost else 0
        k = self.resize(min(k, self.num_nodes))
        self.fit_info["capacity_nodes"] = k
        return k

    # -- lookup ---------------------------------------------------------------------------------
    def gather(self, n_id, out: Optional[Tensor] = None, ticket: Optional[int] = None) -> Tensor:
        """features[n_id] on the device, in the cache's dtype, whatever is cached; written into
        `out` (contiguous, [len(n_id), feature_dim], that dtype, on the device) if given; `ticket`:
        look_ahead(n_id)'s, whose reads it waits for (None: every prefetch's)."""
        start, ids = time.perf_counter(), checked_ids(n_id, self.device)
        n, hits = ids.numel(), 0
        if out is not None and (out.shape != (n, self.feature_dim) or out.dtype != self.dtype
                                or out.device != self.rows.device or not out.is_contiguous()):
            raise ValueError(f"gather: out must be a contiguous {(n, self.feature_dim)} {self.dtype} "
                             f"tensor on {self.rows.device}, got {tuple(out.shape)} {out.dtype} on {out.device}")
        if self.shares_features:
            return self._gather_shared(ids, out, start, ticket)
        if self.slot is not None and n:
            valid = (ids >= 0) & (ids < self.num_nodes)  # invalid ids become misses, which are
            slots = self.slot[ids.clamp(0, self.num_nodes - 1)].masked_fill_(~valid, -1)  # checked
            miss_pos = (slots < 0).nonzero().squeeze(1)
            hits = n - miss_pos.numel()
        if hits == 0:
            out = self._from_host(ids, out, ticket)
        else:
            # One gather on the device for the hits (misses borrow slot 0 for now), then the
            # misses, gathered on the host and copied in one transfer, overwrite their rows.
            out = torch.index_select(self.rows, 0, slots.clamp(min=0), out=out)
            if hits < n:
                rows = self._host_rows(ids[miss_pos], ticket)
                out.index_copy_(0, miss_pos, rows.to(self.device, non_blocking=True))
        if self.on_cuda:
            torch.cuda.current_stream(self.device).synchronize()
        self.counters.record(hits, n - hits, time.perf_counter() - start, self.row_bytes)
        return out

    def _gather_shared(self, ids: Tensor, out: Optional[Tensor], start: float, ticket: Optional[int]) -> Tensor:
        """On the host: every row read from the shared features or the host tier; hits by the slot map."""
        ids = self._host_ids(ids)
        out = self._read_rows(ids, out, ticket)
        hits = 0 if self.slot is None or not ids.numel() else int(
            torch.count_nonzero(self.slot.index_select(0, ids) >= 0))
        self.counters.record(hits, ids.numel() - hits, time.perf_counter() - start, self.row_bytes)
        return out

    def _host_ids(self, ids: Tensor) -> Tensor:
        ids = ids.cpu()
        if ids.numel() and not (0 <= int(ids.min()) and int(ids.max()) < self.num_nodes):
            bad = ids[(ids < 0) | (ids >= self.num_nodes)]
            raise ConveyorError(
                f"n_id holds node ids outside 0..{self.num_nodes - 1} (e.g. {bad[:5].tolist()}); "
                f"the batch and the cached features must come from the same graph or partition.")
        return ids

    def _host_rows(self, ids: Tensor, ticket: Optional[int] = None) -> Tensor:
        """features[ids] in the reused staging buffer (pinned on CUDA, so one DMA moves it)."""
        ids = self._host_ids(ids)
        return self._read_rows(ids, self._staging_rows(ids.numel()), ticket)

    def _from_host(self, ids: Tensor, out: Optional[Tensor], ticket: Optional[int] = None) -> Tensor:
        """features[ids] on the device, in `out` or a new tensor (every id a miss)."""
        if self.on_cuda:
            rows = self._host_rows(ids, ticket)
            return rows.to(self.device, non_blocking=True) if out is None else out.copy_(rows, non_blocking=True)
        return self._read_rows(self._host_ids(ids), out, ticket)  # never the staging buffer

    def _staging_rows(self, k: int) -> Tensor:
        # Reused between batches: pinning is slow, and on CPU fresh pages cost page faults. Safe
        # because its rows are copied out before gather returns (synchronised on CUDA).
        if self._staging is None or self._staging.size(0) < k:
            self._staging = torch.empty(max(k, k * 5 // 4), self.feature_dim, dtype=self.dtype,
                                        pin_memory=self.on_cuda)
        return self._staging[:k]

    # -- statistics -----------------------------------------------------------------------------
    def reset_stats(self) -> None:
        """Start a new epoch's counters."""
        self.counters.reset()
        if self.host is not None:
            self.host.reset_stats()

    def stats(self) -> dict:
        """Counters since the last reset_stats(), the cache's size; a host tier's too (tier_stats)."""
        stats = {**self.counters.totals(), "capacity_nodes": self.capacity_nodes, "cached_bytes": self.cached_bytes,
                 "copied_bytes": self.copied_bytes, "map_bytes": self.map_bytes, "capacity_fraction":
                 self.capacity_nodes / max(self.num_nodes, 1)}
        return stats if self.host is None else {**stats, **tier_stats(stats, self.host.stats())}

    def last_batch_stats(self) -> dict:
        """hits, misses, hit_ratio, bytes_from_host, bytes_from_cache, gather_time_s of the last
        gather (empty before the first)."""
        return dict(self.counters.last)

    def __repr__(self) -> str:
        return (f"FeatureCache({self.policy}: {self.capacity_nodes:,}/{self.num_nodes:,} nodes, "
                f"{self.cached_bytes / 2**20:.1f} MiB of {self.dtype} on {self.device}"
                f"{', read in place' if self.shares_features and self.capacity_nodes else ''}"
                f"{', auto' if self.auto else ''}){'' if self.host is None else '; ' + self.host.describe()}")

def checked_ids(n_id, device: torch.device) -> Tensor:
    """`n_id` as int64 node ids on `device`, or the error naming what it is instead."""
    n_id = torch.as_tensor(n_id)
    if n_id.dim() != 1 or n_id.dtype.is_floating_point or n_id.dtype.is_complex or n_id.dtype == torch.bool:
        raise ConveyorError(f"n_id must be a 1-D tensor of integer node ids, got shape "
                            f"{tuple(n_id.shape)} and dtype {n_id.dtype}.")
    return n_id.to(device, torch.long)


class GatherCounters:
    """What the gathers served since the last reset (`totals`) and in the last one (`last`)."""

    def __init__(self):
        self.last: dict = {}
        self.reset()

    def reset(self) -> None:
        self._total = {"hits": 0, "misses": 0, "bytes_from_host": 0, "bytes_from_cache": 0,
                       "gather_time_s": 0.0, "batches": 0}

    def record(self, hits: int, misses: int, seconds: float, row_bytes: int) -> None:
        self.last = {"hits": hits, "misses": misses, "hit_ratio": _ratio(hits, misses),
                     "bytes_from_host": misses * row_bytes, "bytes_from_cache": hits * row_bytes,
                     "gather_time_s": seconds}
        for key in ("hits", "misses", "bytes_from_host", "bytes_from_cache", "gather_time_s"):
            self._total[key] += self.last[key]
        self._total["batches"] += 1

    def totals(self) -> dict:
        return {**self._total, "hit_ratio": _ratio(self._total["hits"], self._total["misses"])}


def tier_stats(device: dict, host: dict) -> dict:
    """The share of the rows each tier served: device (hits), host (its static rows), window
    (prefetched from disk ahead), disk (read when gathered); with the host tier's counters."""
    seen = device["hits"] + device["misses"]
    return {**host, "device_hit_ratio": _ratio(device["hits"], seen - device["hits"]),
            "host_hit_ratio": host["host_hits"] / seen if seen else 0.0,
            "window_hit_ratio": host["window_hits"] / seen if seen else 0.0,
            "disk_ratio": host["disk_rows"] / seen if seen else 0.0}


def _ratio(hits: int, misses: int) -> float:
    return hits / (hits + misses) if hits + misses else 0.0
