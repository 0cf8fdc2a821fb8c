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
MIN_READS_PER_THREAD = 16  # fewer reads than this a thread: fewer threads (handing work over costs too)


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
        self.local = threading.local()
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
        self.local.bytes = nbytes  # this thread's last read (HostTier counts its prefetches with it)
        with self._lock:  # the prefetching thread counts too
            c = self.counters
            c["rows"] += ids.numel()
            c["bytes"] += nbytes
            c["reads"] += reads
            c["seconds"] += time.perf_counter() - start
            c["threads_used"] = max(c["threads_used"], used)
        return out

    def _read_file(self, ids: Tensor, out: Tensor, gap_rows: Optional[int]) -> tuple:
        """(reads, bytes, threads) of reading x[ids] into `out` with preadv, runs of rows merged.
        A run without gaps (most are one row) is one preadv into its place in `out`, planned with
        tensor arithmetic so the loop around the system calls stays short; a run with gaps reads
        them into a scratch buffer (`_read_gapped`)."""
        if ids.numel() == 0:
            return 0, 0, 0
        first, end = merged_runs(ids, MERGE_GAP_BYTES // self.row_bytes if gap_rows is None else gap_rows)
        rb, buffer = self.row_bytes, memoryview(out.reshape(-1).view(torch.uint8).numpy())  # any dtype
        whole = (ids[end - 1] - ids[first]) == (end - 1 - first)
        plain = list(zip((self.base + ids[first[whole]] * rb).tolist(), (first[whole] * rb).tolist(),
                         (end[whole] * rb).tolist()))
        gapped = list(zip(first[~whole].tolist(), end[~whole].tolist()))
        parts = split_evenly(plain, min(self.threads, len(plain) // MIN_READS_PER_THREAD))
        jobs = [lambda part=part: self._read_plain(part, buffer) for part in parts]
        if gapped:
            ids_list = ids.tolist()
            jobs.append(lambda: self._read_gapped(gapped, ids_list, buffer))
        results = [jobs[0]()] if len(jobs) == 1 else list(self._executor().map(lambda job: job(), jobs))
        return sum(r for r, _ in results), sum(b for _, b in results), len(jobs)

    def _read_plain(self, runs: List[tuple], buffer: memoryview) -> tuple:
        """(reads, bytes): one pread per (file offset, start, end in `buffer`). pread and a copy
        cost less than preadv's iovec list (5 and 10 us a call here), for rows this small."""
        fd, pread, nbytes = self.fd, os.pread, 0
        for offset, start, end in runs:
            data = pread(fd, end - start, offset)
            if len(data) != end - start:
                self._short(len(data), end - start, offset)
            buffer[start:end] = data
            nbytes += end - start
        return len(runs), nbytes

    def _read_gapped(self, runs: List[tuple], ids: List[int], buffer: memoryview) -> tuple:
        """Read each run (first, end) of positions into `ids` that has gaps: one preadv per run (a
        few where it has more pieces than IOV_MAX), the gaps into a scratch buffer."""
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
                    self._short(got, want, offset)
                offset, reads, nbytes = offset + want, reads + 1, nbytes + want
        return reads, nbytes

    def _short(self, got: int, want: int, offset: int):
        raise OSError(f"short read of {self.path}: {got} of {want} bytes at offset {offset}; is the feature "
                      f"file truncated?")

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


def merged_runs(ids: Tensor, gap_rows: int) -> tuple:
    """(first, end) positions (two tensors) of the runs of sorted `ids` where each next id is at
    most `gap_rows` rows past the previous one's end: each run is one read."""
    breaks = ((ids[1:] - ids[:-1]) > gap_rows + 1).nonzero().flatten() + 1
    first = torch.cat([breaks.new_zeros(1), breaks])
    return first, torch.cat([breaks, breaks.new_full((1,), ids.numel())])


def split_evenly(items: list, parts: int) -> List[list]:
    """`items` in up to `parts` consecutive groups of about the same length."""
    step = -(-len(items) // max(1, min(parts, len(items)))) if items else 1
    return [items[i:i + step] for i in range(0, len(items), step)]
