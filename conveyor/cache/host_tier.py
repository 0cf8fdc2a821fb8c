"""`HostTier`: the feature cache's level in host memory, over features that live on disk.

The static cache is one level of a hierarchy (docs/design.md §2.4): device memory over host memory
over disk. Where `graph.x` is a memory-mapped file larger than memory, the host tier keeps a real
copy of the hottest rows in RAM: the next `host_nodes` of the same degree ranking the device tier
fills from (on CPU, the first ones), stored in id order, so filling it reads the file front to back.
Every other row comes from disk (`DiskRows`: sorted, merged, a few I/O threads).

Look-ahead (Ginex): the loader stage sees the next batches the sampler already produced, and
`prefetch(n_id)` starts reading the rows of such a batch that no tier holds into a window of rows
(a quarter of the tier's bytes, `WINDOW_SHARE`), in a background thread, while the current batch
is gathered and trained on. It returns a ticket; `rows(ids, ticket)` waits only for the reads of
that ticket and the ones before it. A window row is kept while any batch prefetched but not yet
released needs it (a count per row), so rows shared by consecutive batches are read once and
evicted exactly when the known future no longer needs them; `release(ticket)` drops the batch's
counts. When the window is full, a batch's remaining rows are simply read when it is gathered.

One slot map (int32, 4 bytes a node) says where each row is: [0, static) the static rows, from
`static` on the window's, -1 disk.
"""
from __future__ import annotations

from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from typing import Optional

import torch
from torch import Tensor

from conveyor.cache.disk import DiskRows

WINDOW_SHARE = 0.25  # of the host tier's bytes, for the rows of the batches prefetched ahead
FILL_ROWS = 1 << 16  # rows per read when the static rows are filled
FILL_GAP_ROWS = 1 << 12  # ... and a larger gap merged: filling reads most of the file anyway


class HostTier:
    def __init__(self, x: Tensor, order: Optional[Tensor], capacity_bytes: int, io_threads: int = 4):
        """`order`: the node ids this tier may keep, best first (the ranking after the device
        tier's rows); `capacity_bytes`: its rows' budget, window included (the slot map apart)."""
        self.x, self.disk = x, DiskRows(x, io_threads)
        self.row_bytes = self.disk.row_bytes
        rows = max(0, int(capacity_bytes) // max(self.row_bytes, 1))
        self.window_capacity = int(rows * WINDOW_SHARE)
        keep = torch.empty(0, dtype=torch.long) if order is None else order[:rows - self.window_capacity]
        self.static = keep.numel()
        self.slot = torch.full((x.size(0),), -1, dtype=torch.int32)
        self.static_rows = self._fill(torch.sort(keep).values)
        self.window: Optional[Tensor] = None  # allocated at the first prefetch
        self.owner = torch.full((self.window_capacity,), -1, dtype=torch.long)  # window slot -> node
        self.refs = torch.zeros(self.window_capacity, dtype=torch.int32)
        self.free = torch.arange(self.window_capacity - 1, -1, -1)  # a stack; top: the lowest slot
        self.free_count = self.window_capacity
        self.tickets: "OrderedDict[int, tuple]" = OrderedDict()  # ticket -> (read, window slots held)
        self.next_ticket = 0
        self._prefetcher: Optional[ThreadPoolExecutor] = None
        self.settled: set = set()  # tickets whose bytes are counted
        self.counters = {"host_hits": 0, "window_hits": 0, "disk_rows": 0, "prefetched_rows": 0, "disk_bytes": 0}

    def _fill(self, keep: Tensor) -> Tensor:
        """The static rows, read from disk in id order (sequential reads) into slots 0.."""
        rows = torch.empty(keep.numel(), self.x.size(1), dtype=self.x.dtype)
        self.slot[keep] = torch.arange(keep.numel(), dtype=torch.int32)
        for start in range(0, keep.numel(), FILL_ROWS):
            chunk = keep[start:start + FILL_ROWS]
            self.disk.read(chunk, out=rows[start:start + chunk.numel()], gap_rows=FILL_GAP_ROWS)
        self.disk.reset()  # the fill is no training's reads
        return rows

    @property
    def num_nodes(self) -> int:
        return self.x.size(0)

    @property
    def copied_bytes(self) -> int:
        window = 0 if self.window is None else self.window.numel() * self.window.element_size()
        return self.static_rows.numel() * self.static_rows.element_size() + window

    @property
    def map_bytes(self) -> int:
        return self.slot.numel() * self.slot.element_size()

    # -- look-ahead -----------------------------------------------------------------------------
    def prefetch(self, ids: Tensor) -> int:
        """Start reading the rows of `ids` (one batch's, unique, host) no tier holds; a ticket for
        rows() and release()."""
        slots = self.slot[ids]
        new = torch.sort(ids[slots < 0]).values[:self.free_count]  # a full window reads the rest later
        future = None
        if new.numel():
            if self.window is None:
                self.window = torch.empty(self.window_capacity, self.x.size(1), dtype=self.x.dtype)
            taken = self.free[self.free_count - new.numel():self.free_count].clone()
            self.free_count -= new.numel()
            self.owner[taken] = new
            self.slot[new] = (taken + self.static).to(torch.int32)
            future = self._pool().submit(self._read_window, new, taken)
            self.counters["prefetched_rows"] += new.numel()
        held = self.slot[ids].long()
        held = held[held >= self.static] - self.static
        self.refs.index_add_(0, held, torch.ones_like(held, dtype=torch.int32))
        ticket, self.next_ticket = self.next_ticket, self.next_ticket + 1
        self.tickets[ticket] = (future, held)
        return ticket

    def _read_window(self, ids: Tensor, taken: Tensor) -> int:
        """(In the prefetching thread) the rows into their window slots; the bytes read."""
        self.window.index_copy_(0, taken, self.disk.read(ids))
        return self.disk.local.bytes

    def _settle(self, ticket: int, future) -> None:
        """Count a prefetch's bytes once its batch waits for it, so that each batch's counters
        (BatchCost, taken around its gather) hold every byte read for it."""
        if future is not None and ticket not in self.settled:
            self.settled.add(ticket)
            self.counters["disk_bytes"] += future.result()  # raises the read's error here

    def _pool(self) -> ThreadPoolExecutor:
        if self._prefetcher is None:
            self._prefetcher = ThreadPoolExecutor(1, thread_name_prefix="conveyor-prefetch")
        return self._prefetcher

    def wait(self, ticket: Optional[int] = None) -> None:
        """Until the reads of `ticket` and every earlier one are done (None: all of them)."""
        for t, (future, _) in self.tickets.items():
            if ticket is not None and t > ticket:
                break
            self._settle(t, future)

    def release(self, ticket: int) -> None:
        """The batch of `ticket` is gathered (or dropped): its window rows no other batch waiting
        needs go back to the free slots."""
        self._settle(ticket, self.tickets[ticket][0])
        _, held = self.tickets.pop(ticket)
        self.settled.discard(ticket)
        self.refs.index_add_(0, held, torch.full_like(held, -1, dtype=torch.int32))
        done = held[self.refs[held] == 0]
        self.slot[self.owner[done]] = -1
        self.owner[done] = -1
        self.free[self.free_count:self.free_count + done.numel()] = done
        self.free_count += done.numel()

    # -- lookup ---------------------------------------------------------------------------------
    def rows(self, ids: Tensor, ticket: Optional[int] = None) -> Tensor:
        """x[ids] (host int64 ids, in range), in x's dtype: static rows, window rows (after the
        reads up to `ticket`), the rest read from disk now."""
        out = torch.empty(ids.numel(), self.x.size(1), dtype=self.x.dtype)
        slots = self.slot[ids].long()
        static = (slots >= 0) & (slots < self.static)
        window = slots >= self.static
        disk = slots < 0
        if bool(static.any()):
            pos = static.nonzero().flatten()
            out[pos] = self.static_rows.index_select(0, slots[pos])
        n_window = int(window.sum())
        if n_window:
            self.wait(ticket)
            pos = window.nonzero().flatten()
            out[pos] = self.window.index_select(0, slots[pos] - self.static)
        pos = disk.nonzero().flatten()
        if pos.numel():
            wanted, order = torch.sort(ids[pos])
            out[pos[order]] = self.disk.read(wanted)
            self.counters["disk_bytes"] += self.disk.local.bytes
        c = self.counters
        c["host_hits"] += ids.numel() - n_window - pos.numel()
        c["window_hits"] += n_window
        c["disk_rows"] += pos.numel()
        return out

    def stats(self) -> dict:
        d = self.disk.counters
        return {**self.counters, "disk_reads": d["reads"], "disk_read_s": d["seconds"],
                "io_threads_used": d["threads_used"], "host_nodes": self.static,
                "host_bytes": self.static * self.row_bytes, "window_nodes": self.window_capacity,
                "disk_from_file": self.disk.from_file}

    def describe(self) -> str:
        h = self.stats()
        return (f"host tier {h['host_nodes']:,} nodes ({h['host_bytes'] / 2**20:,.1f} MiB of {self.x.dtype}) + a "
                f"window of {h['window_nodes']:,} prefetched rows, the rest "
                f"{'read from ' + str(self.disk.path) if h['disk_from_file'] else 'read in place'} by "
                f"{self.disk.threads} I/O threads")

    def reset_stats(self) -> None:
        self.counters = dict.fromkeys(self.counters, 0)
        self.disk.reset()

    def close(self) -> None:
        for ticket in list(self.tickets):
            self.release(ticket)
        if self._prefetcher is not None:
            self._prefetcher.shutdown(wait=True)
            self._prefetcher = None
        self.disk.close()


class HostTierReads:
    """The part of a FeatureCache (feature_cache.py) that reads through its host tier, `self.host`
    (None: the features are read in place), and passes the look-ahead on to it."""
    host: Optional[HostTier]

    def _read_rows(self, ids: Tensor, out: Optional[Tensor], ticket: Optional[int] = None) -> Tensor:
        """features[ids] (host ids) in the cache's dtype, converted here, per gather: from the
        host tier where there is one, else read in place."""
        if self.host is not None:
            rows = self.host.rows(ids, ticket)
        elif self.features.dtype == self.dtype:
            return torch.index_select(self.features, 0, ids, out=out)
        else:
            rows = self.features.index_select(0, ids)
        return rows.to(self.dtype) if out is None else out.copy_(rows)

    def look_ahead(self, n_id) -> Optional[int]:
        """Start reading, in the background, the rows of a coming batch that neither the device
        tier nor the host tier holds (host_tier.py); the ticket to pass to gather and release
        (None: nothing to do, no host tier)."""
        if self.host is None:
            return None
        ids = self._host_ids(torch.as_tensor(n_id).reshape(-1).long())
        if self.slot is not None and not self.shares_features:
            ids = ids[self.slot.index_select(0, ids.to(self.device)).cpu() < 0]
        return self.host.prefetch(ids)

    def release(self, ticket: Optional[int]) -> None:
        """The batch of `ticket` is gathered or dropped: the window rows it held may go."""
        if ticket is not None and self.host is not None:
            self.host.release(ticket)

    def close(self) -> None:
        if self.host is not None:
            self.host.close()
