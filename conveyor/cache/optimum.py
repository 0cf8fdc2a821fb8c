"""The best hit counts any cache of `capacity` rows could reach on a recorded trace of batches
(offline, for benchmarks): the best static cache and Belady's dynamic optimum.

A trace is a list of batches, each the distinct node ids one batch reads. A row is a hit when the
cache holds it as its batch arrives; every row a batch reads may then stay, as room allows.

- static: the `capacity` rows the trace reads most, fixed for the whole trace.
- Belady (MIN): after each batch, keep the `capacity` rows whose next read comes soonest (rows
  never read again first out). With batches as whole requests the exchange argument still holds,
  so no cache that only admits rows it has read does better. `warm=True` (the default) starts it
  filled with the rows read soonest, as a static cache starts filled: then it is never below the
  static optimum; `warm=False` starts it empty (every row's first read a miss).

Belady needs no simulation of which row is where: a cached row's only relevant property is the
batch that next reads it. So the cache is a histogram over "next read at batch k" (k = B: never);
batch b's hits are exactly the cached rows whose next read is b, and eviction trims the largest
k first. The next reads come from one sort of the flat trace by (row, batch): a reverse scan of
each row's reads, vectorised. Cost O(R log R + B^2) for R reads and B batches.
"""
from __future__ import annotations

import numpy as np


def flat_trace(batches) -> tuple:
    """The rows of every batch in one array, and each entry's batch index."""
    rows = [np.asarray(b, dtype=np.int64).reshape(-1) for b in batches]
    flat = np.concatenate(rows) if rows else np.empty(0, np.int64)
    batch = np.repeat(np.arange(len(rows), dtype=np.int64), [len(r) for r in rows])
    return flat, batch


def next_reads(flat: np.ndarray, batch: np.ndarray, num_batches: int) -> np.ndarray:
    """For each read, the batch of the same row's next read (`num_batches`: never again)."""
    order = np.lexsort((batch, flat))  # by row, then batch
    rows, batches = flat[order], batch[order]
    following = np.full(len(flat), num_batches, dtype=np.int64)
    same_row = rows[1:] == rows[:-1]
    following[:-1][same_row] = batches[1:][same_row]
    out = np.empty_like(following)
    out[order] = following
    return out


def static_optimum_hits(batches, capacity: int) -> int:
    """Hits of the best fixed set of `capacity` rows: the rows read most."""
    flat, _ = flat_trace(batches)
    counts = np.unique(flat, return_counts=True)[1]
    if capacity <= 0 or not len(counts):
        return 0
    return int(np.sort(counts)[::-1][:capacity].sum())


def belady_hits(batches, capacity: int, warm: bool = True) -> np.ndarray:
    """Hits per batch of Belady's MIN with room for `capacity` rows (warm: filled at the start
    with the rows read soonest; else empty)."""
    flat, batch = flat_trace(batches)
    num_batches = len(batches)
    nxt = next_reads(flat, batch, num_batches)
    starts = np.concatenate([[0], np.cumsum(np.bincount(batch, minlength=num_batches))])
    cached = np.zeros(num_batches + 1, dtype=np.int64)  # cached rows by the batch that next reads them
    if warm:
        first = np.unique(flat, return_index=True)[1]
        cached += np.bincount(batch[first], minlength=num_batches + 1)
        evict_furthest(cached, capacity)
    hits = np.zeros(num_batches, dtype=np.int64)
    for b in range(num_batches):
        hits[b] = cached[b]
        cached[b] = 0  # those rows are read now: their next read is re-counted below with the rest
        cached += np.bincount(nxt[starts[b]:starts[b + 1]], minlength=num_batches + 1)
        evict_furthest(cached, capacity)
    return hits


def evict_furthest(cached: np.ndarray, capacity: int) -> None:
    """Trim the histogram to `capacity` rows, taking those read latest (or never) first."""
    excess = int(cached.sum()) - max(capacity, 0)
    k = len(cached) - 1
    while excess > 0:
        taken = min(excess, int(cached[k]))
        cached[k] -= taken
        excess -= taken
        k -= 1
