"""Numpy work spread over threads (numpy releases the GIL in its array loops and sorts), with the
same result as the single-threaded computation: the synthetic generator's helpers."""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterable

import numpy as np

SMALL = 1 << 20  # below this many elements, threads cost more than they save


def num_threads() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def thread_map(fn: Callable, items: Iterable) -> list:
    """[fn(item) for item in items], in order, on num_threads() threads. `items` is consumed as
    the threads take work, at most two items per thread ahead, so a generator that draws random
    numbers keeps its serial order while bounding the memory held by waiting items."""
    threads = num_threads()
    if threads == 1:
        return [fn(item) for item in items]
    with ThreadPoolExecutor(threads) as pool:
        pending, results = [], []
        for item in items:
            pending.append(pool.submit(fn, item))
            if len(pending) >= 2 * threads:
                results.append(pending.pop(0).result())
        return results + [f.result() for f in pending]


def merge_sorted(runs: list[np.ndarray], unique: bool = False) -> np.ndarray:
    """np.sort(np.concatenate(runs)) of sorted integer runs (with repeats dropped if `unique`),
    in parallel: the value range is cut at quantiles of the longest run, and each cut's pieces of
    every run are sorted on their own; as the values are integers, the result is the same array
    whatever the cuts."""
    runs = [r for r in runs if len(r)]
    total = sum(len(r) for r in runs)
    if not runs:
        return np.empty(0, dtype=np.int64)
    longest = max(runs, key=len)
    parts = num_threads() if total >= SMALL else 1
    cuts = longest[np.linspace(0, len(longest), parts + 1).astype(np.int64)[1:-1]]
    bounds = [np.concatenate([[0], np.searchsorted(r, cuts), [len(r)]]) for r in runs]

    def piece(j: int) -> np.ndarray:
        out = np.concatenate([r[b[j]: b[j + 1]] for r, b in zip(runs, bounds)])
        out.sort()
        return out[np.concatenate([[True], out[1:] != out[:-1]])] if unique and len(out) else out

    return np.concatenate(thread_map(piece, range(parts)))
