"""bsp's own CPU threads (`threads` > 1) and the process's freed memory kept for its next batch.

Threads: a hop's passes (its Floyd picks, the gathers of its edges' sources, their local ids) are
cut into a few chunks of nodes or edges that the caller's thread takes from the front and a pool of
`threads - 1` from the back, each chunk's compiled loop or torch op releasing the GIL; torch's own
intra-op threads stay at 1. Why not torch's threads: each of its ops ends at an OpenMP
barrier, so one thread descheduled by another process stalls every op of the batch (bsp forced to 2
threads was 6.9x slower than at 1 at load 20). Here the caller waits for a worker inside a pass only
briefly: a chunk a worker has not finished when the caller reaches it, the caller awaits for half
the time one of its own chunks took (WAIT_SHARE) and then does again itself (a gather writes the
same values whoever does it), so on a busy machine a descheduled worker costs at most one and a
half chunks' time. Only before a hop reads the bitmaps its gathers mark (one a thread: `place`), and
before the batch's local ids are reset, does the caller wait for a worker still inside a chunk
(`settle`). The chunks' outputs are those of one thread, bit for bit: the draws are counter-based
(samplers/bsp_compiled.py). Whether a batch's large compiled hops are split at all is decided batch
by batch (`alone`, `worth_splitting`): not while the machine leaves no spare core, and then by the
time the batches of its kind took each way, so that a second thread that does not pay (a sibling of
the same physical core, a host's busy tenants) costs little.

Memory: every batch allocates tens of MB of temporaries and outputs; glibc hands large blocks back
to the OS when freed and maps them again next time, 4-5 thousand page faults a batch (a third of
bsp's CPU time at scale 0.05). `keep_freed_memory` raises glibc's mmap and trim thresholds once per
process so that freed blocks are reused; the process keeps up to TRIM_THRESHOLD of free heap.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import itertools
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from conveyor.core.cores import _idle_ticks, usable_cores

MIN_CHUNK = 1 << 15  # edges: below this a chunk costs more in hand-offs than it saves
CHUNKS_PER_THREAD = 2  # a few chunks a thread: a late worker leaves the caller little to wait for
# How long the caller waits for a chunk a worker is inside, as a share of its own time a chunk, before
# doing it again: redone at once, 61% of the split passes at scale 0.05 did a chunk twice, idle (the
# worker had taken its second chunk just before the caller reached it), and 2 threads were no faster than 1.
WAIT_SHARE = 0.5
CHECK_S = 1.0  # how often the workers' welcome is reconsidered (from /proc/stat: no sleep, no window)
# Whether a batch splits its large hops is also learnt from the batches' times (`worth_splitting`): an
# idle-looking pair of virtual cores may give a second thread nothing (a sibling of the same physical
# core, or a host's other tenants: bsp's 2 threads were 0.89x the time of 1 in one half hour and
# 1.02-1.16x in the next, at load 0.7). A kind of batch's mean seconds an edge each way weighs each
# batch by COST_WEIGHT (TRY_WEIGHT in a trial of the other way, whose estimate is seldom renewed), and
# every TRY_EVERY-th batch of the kind starts a trial of TRY_STREAK batches the other way, so that an
# estimate never goes stale (a batch every 8th: 2 threads 1.04-1.06x the time of 1 at batch 1024,
# where a split took longer). Splitting must be estimated SPLIT_GAIN times alone's: where both take
# about as long, noise alone had a fifth split, and 2 threads at 1.03-1.08x. Whole batches are timed,
# not hops, and a batch that goes another way than the one before it teaches nothing: it pays for the
# change (the worker's writes to fetch from the other core), so hops timed alone, and batches timed
# after a change, made the other way look dearer than it is (2 threads 1.04-1.14x the time of 1).
COST_WEIGHT = 0.1
TRY_WEIGHT = 0.5
TRY_EVERY = 32
TRY_STREAK = 3
SPLIT_GAIN = 0.95
MMAP_THRESHOLD = 256 << 20  # glibc: blocks below this come from the heap, reused when freed
TRIM_THRESHOLD = 256 << 20  # glibc: free heap kept at the top before it is handed back (bounds what is held)
_kept = []  # whether keep_freed_memory has run in this process


def keep_freed_memory() -> bool:
    """Once per process, on glibc: freed blocks below MMAP_THRESHOLD stay in the heap for reuse
    instead of being unmapped and faulted in again. Returns whether glibc took the settings."""
    if not _kept:
        _kept.append(_mallopt())
    return _kept[0]


def _mallopt() -> bool:
    M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # malloc.h
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        return bool(libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(libc.mallopt(M_TRIM_THRESHOLD,
                                                                                         TRIM_THRESHOLD))
    except (OSError, AttributeError, TypeError):  # not glibc (musl, macOS, Windows): nothing to set
        return False


FREE, TAKEN, DONE = 0, 1, 2  # a chunk's state


class Splitter:
    """Runs `fn(lo, hi)` over chunks of range(n) on `threads` threads, the caller's one of them;
    `fn` must write the same values whoever runs it, and as often (module doc)."""

    def __init__(self, threads: int):
        self.threads = threads
        self.pool = None  # started at the first split, so that a sampler stays picklable
        self.running = []  # an event per chunk a worker took, set when it is out of it
        # Splits the caller did alone as the machine was busy (`SpareCores`) and split ones; of these
        # chunks, those the caller ran, the workers finished, and the caller ran again as a worker was late;
        # the batches with a hop large enough to split (`timed`), and those split.
        self.counts = {"alone": 0, "split": 0, "caller": 0, "workers": 0, "twice": 0, "batches": 0,
                       "batches split": 0}
        self.spare = SpareCores(threads)
        self.costs = {}  # a kind of batch -> [s an edge alone, s an edge split, batches, trial left, its way]
        self.deciding = None  # the kind whose batch `worth_splitting` last decided on (not a busy machine)
        self.trying = False  # and whether that batch went the other way
        self.previous = None  # whether the batch before split
        self.places = threading.local()  # each pool thread's place (1, 2, ...; the caller's is 0)
        self.new_places = itertools.count(1)  # (next() on it is atomic under the GIL)

    def __getstate__(self):  # a copy starts afresh: no pool, no counts, no costs, its own places
        return {"threads": self.threads}

    def __setstate__(self, state):
        self.__init__(state["threads"])

    def place(self) -> int:
        """The running thread's place among the splitter's threads: 0 for the caller, 1 to
        threads - 1 for the pool's, so that a chunk can write into its thread's own buffer (bsp's
        bitmap marks: two threads marking one bitmap made the gathers no faster than one thread's,
        its cache lines going back and forth between the cores)."""
        return getattr(self.places, "place", 0)

    def alone(self) -> bool:
        """Whether what comes next runs on the caller's thread alone: one thread, or a machine that
        leaves no spare core (counted as one split done alone). bsp's compiled hop then runs as one
        call (samplers/bsp_hop.py), with no Python between its passes."""
        if self.threads == 1:
            return True
        if self.spare.enough():
            return False
        self.counts["alone"] += 1
        return True

    def worth_splitting(self, kind) -> bool:
        """Whether the next batch of its `kind` splits: not while the machine leaves no spare core
        (`alone`); else the way that kind's batches took less time an edge (`timed`; split only if
        SPLIT_GAIN times alone's), but TRY_STREAK batches the other way from every TRY_EVERY-th on
        (an untried way first: split, then alone)."""
        self.deciding = None
        if self.alone():
            return False
        self.deciding = kind
        costs = self.costs.setdefault(kind, [None, None, 0, 0, False])  # alone, split, batches, trial left, way
        alone, split = costs[0], costs[1]
        best = alone is not None and split is not None and split <= alone * SPLIT_GAIN
        costs[2] += 1
        if costs[3] == 0 and (alone is None or split is None or costs[2] % TRY_EVERY == 0):
            costs[3], costs[4] = TRY_STREAK, split is None or (alone is not None and not best)  # the untried way first
        self.trying = costs[3] > 0
        if not self.trying:
            return best
        costs[3] -= 1
        return costs[4]

    def start_pool(self) -> None:
        """The pool of `threads - 1` workers, if it is not yet started. Nothing is learnt from the
        batch that starts it (`timed`): the start made that batch up to 3.5x slower than the split
        batches after it (scale 0.05, batch 4096), and splitting would not be tried again for long."""
        if self.pool is None:
            self.pool = ThreadPoolExecutor(self.threads - 1, thread_name_prefix="bsp")
            self.deciding = None

    def timed(self, split: bool, seconds: float, edges: int) -> None:
        """The batch `worth_splitting` decided on took `seconds` for `edges`, split or not: its kind's
        cost that way updated (nothing learnt from a batch a busy machine kept alone)."""
        self.counts["batches"] += 1
        self.counts["batches split"] += split
        changed, self.previous = split != self.previous, split
        if self.deciding is None or changed:
            return
        costs = self.costs[self.deciding]
        cost = seconds / max(edges, 1)
        weight = TRY_WEIGHT if self.trying else COST_WEIGHT
        costs[split] = cost if costs[split] is None else costs[split] + (cost - costs[split]) * weight

    def run(self, fn, n: int, per_item: int = 1) -> None:
        """`per_item`: edges an item of range(n) stands for (the chunks are at least MIN_CHUNK edges)."""
        chunks = min(self.threads * CHUNKS_PER_THREAD, n * per_item // MIN_CHUNK, n)
        if self.threads == 1 or chunks < 2 or not self.spare.enough():
            self.counts["alone"] += self.threads > 1 and chunks >= 2
            fn(0, n)
            return
        self.counts["split"] += 1
        self.start_pool()
        bounds = [n * k // chunks for k in range(chunks + 1)]
        state, held, lock = [FREE] * chunks, [None] * chunks, threading.Lock()
        for _ in range(self.threads - 1):
            self.pool.submit(self._work, fn, bounds, state, held, lock)
        began, ran = time.perf_counter(), 0
        for k in range(chunks):  # from the front; a chunk a worker is inside is awaited a little, then done again
            with lock:
                taken = state[k] == TAKEN
                if state[k] == FREE:
                    state[k] = TAKEN
            if taken and self._waited(held[k], state, k, (time.perf_counter() - began) / max(ran, 1) * WAIT_SHARE):
                continue
            if state[k] == DONE:
                continue
            self.counts["twice"] += taken
            fn(bounds[k], bounds[k + 1])
            state[k], ran = DONE, ran + 1
            self.counts["caller"] += 1

    def _waited(self, out: threading.Event, state, k: int, patience: float) -> bool:
        """Whether the worker inside chunk k finished it within `patience` seconds (WAIT_SHARE of
        one of the caller's chunks: a worker that is running ends it sooner than the caller could
        redo it, one that is descheduled costs that much more)."""
        return out.wait(patience) and state[k] == DONE

    def _work(self, fn, bounds, state, held, lock) -> None:
        """A worker: chunks from the back until none is free (one that starts late finds none)."""
        if not hasattr(self.places, "place"):  # a pool thread's first chunk: its place for good
            self.places.place = next(self.new_places)
        while True:
            with lock:
                k = next((k for k in reversed(range(len(state))) if state[k] == FREE), None)
                if k is None:
                    return
                state[k], out = TAKEN, threading.Event()
                held[k] = out
                self.running.append(out)
            try:
                fn(bounds[k], bounds[k + 1])
                state[k] = DONE
                self.counts["workers"] += 1
            except BaseException:  # the caller does the chunk itself, and raises if it fails there too
                pass
            finally:
                out.set()

    def settle(self) -> None:
        """Wait until no worker is inside a chunk (before what the chunks read changes)."""
        for out in self.running:
            out.wait()
        self.running.clear()


class SpareCores:
    """Whether the machine leaves this process the cores for `threads` threads, reconsidered every
    CHECK_S from /proc/stat's idle time plus this process's own CPU time over the last interval (no
    sleep). On a busy machine a second thread only time-shares the first one's core (bsp at 2 threads
    was 1.1-1.2x slower than at 1 at load 10, every chunk handed over): the caller then takes every
    chunk itself, and the counts (`Splitter.counts`) say how many the workers ran."""

    def __init__(self, threads: int):
        self.threads, self.welcome, self.last = threads, True, None

    def enough(self) -> bool:
        now = time.monotonic()
        if self.last is None or now - self.last[0] >= CHECK_S:
            try:
                reading = (now, _idle_ticks(usable_cores()), time.process_time())
            except (OSError, ValueError):  # no /proc/stat: the threads as asked
                return True
            if self.last is not None:
                elapsed = now - self.last[0]
                idle = (reading[1] - self.last[1]) / os.sysconf("SC_CLK_TCK") / elapsed
                own = (reading[2] - self.last[2]) / elapsed
                self.welcome = idle + own >= self.threads - 0.5  # cores nobody else used
            self.last = reading
        return self.welcome
