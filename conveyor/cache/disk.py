"""`DiskRows`: rows of a feature matrix read from the file it is memory-mapped from, with our own I/O.

A page fault reads one page at a time, in the faulting thread, holding nothing else up but that
thread. A batch's missing rows are known all at once, so they are read as a batch instead: sorted
by row (the file's order), neighbouring rows merged into one read (`os.preadv` of the rows and of
the gap between them, when the gap is at most `MERGE_GAP_BYTES`: a disk reads whole pages anyway),
the reads shared out over a few I/O threads (`os.preadv` releases the GIL, so they wait on the
disk together). Where the matrix is no file's map (built in memory, or /proc is missing), the rows
are read with one `index_select` of the tensor itself, and counted the same way.

    disk = DiskRows(x, threads=4)
    rows = disk.read(ids)            # == x[ids], ids sorted ascending, unique, on the host
    disk.counters                    # rows, bytes (gaps included), reads (system calls), seconds
"""
from __future__ import annotations

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import List, Optional

import torch
from torch import Tensor

from conveyor.core.file_maps import file_maps, file_offset

MERGE_GAP_BYTES = 4096  # read across a gap this small rather than issue two reads (one page)
IOV_MAX = 1024  # iovecs one preadv may take (Linux)
MIN_ROWS_PER_THREAD = 64  # fewer rows than this a thread are read in the calling thread alone


class DiskRows:
    """The rows of the host tensor `x` ([N, F], any dtype) read from its file, or from `x` itself."""

    def __init__(self, x: Tensor, threads: int = 4):
        self.x, self.threads = x, max(1, int(threads))
        self.row_bytes = x.size(1) * x.element_size()
        where = file_offset(file_maps(), x) if x.is_contiguous() else None
        self.path, self.base = where if where is not None else (None, 0)
        self.fd: Optional[int] = None if self.path is None else os.open(self.path, os.O_RDONLY)
        self._pool: Optional[ThreadPoolExecutor] = None
        self._lock = threading.Lock()
        self.counters = {"rows": 0, "bytes": 0, "reads": 0, "seconds": 0.0, "threads_used": 0}

    @property
    def from_file(self) -> bool:
        """Whether rows are read from the file with preadv (else index_select of the tensor)."""
        return self.fd is not None

    def read(self, ids: Tensor, out: Optional[Tensor] = None, gap_rows: Optional[int] = None) -> Tensor:
        """x[ids] for `ids` sorted ascending and unique (int64, host), in x's dtype, into `out` if
        given (contiguous, [len(ids), F]); `gap_rows`: the largest gap read across (None: a page's)."""
        start = time.perf_counter()
        out = torch.empty(ids.numel(), self.x.size(1), dtype=self.x.dtype) if out is None else out
        if not self.from_file:
            torch.index_select(self.x, 0, ids, out=out)
            reads, nbytes, used = ids.numel(), ids.numel() * self.row_bytes, 1
        else:
            reads, nbytes, used = self._read_file(ids, out, gap_rows)
        with self._lock:  # the prefetching thread counts too
            c = self.counters
            c["rows"] += ids.numel()
            c["bytes"] += nbytes
            c["reads"] += reads
            c["seconds"] += time.perf_counter() - start
            c["threads_used"] = max(c["threads_used"], used)
        return out

    def _read_file(self, ids: Tensor, out: Tensor, gap_rows: Optional[int]) -> tuple:
        """(reads, bytes, threads) of reading x[ids] into `out` with preadv, runs of rows merged."""
        if ids.numel() == 0:
            return 0, 0, 0
        runs = merged_runs(ids, MERGE_GAP_BYTES // self.row_bytes if gap_rows is None else gap_rows)
        buffer = memoryview(out.reshape(-1).view(torch.uint8).numpy())  # any dtype, bfloat16 too
        ids_list = ids.tolist()
        parts = split_runs(runs, self.threads if ids.numel() >= MIN_ROWS_PER_THREAD * 2 else 1)
        if len(parts) == 1:
            reads, nbytes = self._read_runs(parts[0], ids_list, buffer)
            return reads, nbytes, 1
        pool = self._executor()
        results = list(pool.map(lambda part: self._read_runs(part, ids_list, buffer), parts))
        return sum(r for r, _ in results), sum(b for _, b in results), len(parts)

    def _read_runs(self, runs: List[tuple], ids: List[int], buffer: memoryview) -> tuple:
        """Read each run (first, end) of positions into `ids`: one preadv per run (a few where it
        has more pieces than IOV_MAX), gaps into a scratch buffer."""
        rb, reads, nbytes = self.row_bytes, 0, 0
        scratch = None
        for first, end in runs:
            iovecs, offset = [], self.base + ids[first] * rb
            piece = first
            for i in range(first + 1, end + 1):  # a piece: consecutive rows, written where they go
                if i == end or ids[i] != ids[i - 1] + 1:
                    iovecs.append(buffer[piece * rb: i * rb])
                    if i < end:
                        gap = (ids[i] - ids[i - 1] - 1) * rb
                        if scratch is None or len(scratch) < gap:
                            scratch = memoryview(bytearray(max(gap, MERGE_GAP_BYTES)))  # never read
                        iovecs.append(scratch[:gap])
                    piece = i
            for k in range(0, len(iovecs), IOV_MAX):
                batch = iovecs[k:k + IOV_MAX]
                want = sum(len(v) for v in batch)
                got = os.preadv(self.fd, batch, offset)
                if got != want:
                    raise OSError(f"short read of {self.path}: {got} of {want} bytes at offset {offset}; "
                                  f"is the feature file truncated?")
                offset, reads, nbytes = offset + want, reads + 1, nbytes + want
        return reads, nbytes

    def reset(self) -> None:
        with self._lock:
            self.counters = dict.fromkeys(self.counters, 0)
            self.counters["seconds"] = 0.0

    def _executor(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="conveyor-io")
        return self._pool

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 -- interpreter shutdown
            pass


def merged_runs(ids: Tensor, gap_rows: int) -> List[tuple]:
    """(first, end) positions of runs of sorted `ids` where each next id is at most `gap_rows`
    rows past the previous one's end: each run is one read."""
    if ids.numel() == 0:
        return []
    breaks = ((ids[1:] - ids[:-1]) > gap_rows + 1).nonzero().flatten() + 1
    bounds = [0, *breaks.tolist(), ids.numel()]
    return list(zip(bounds[:-1], bounds[1:]))


def split_runs(runs: List[tuple], parts: int) -> List[List[tuple]]:
    """`runs` in up to `parts` consecutive groups of about the same number of rows."""
    if parts <= 1 or len(runs) <= 1:
        return [runs]
    total = runs[-1][1] - runs[0][0]
    groups, current, target = [], [], total / parts
    for run in runs:
        current.append(run)
        if (run[1] - runs[0][0]) >= target * (len(groups) + 1) and len(groups) < parts - 1:
            groups.append(current)
            current = []
    if current:
        groups.append(current)
    return groups
