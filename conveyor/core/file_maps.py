"""Which file a tensor's memory is mapped from (Linux `/proc/self/maps`).

The stages use it to hand a memory-mapped tensor to another process as (file, offset) instead of
copying it into shared memory, and the feature loader to read rows of an on-disk feature matrix
with its own I/O (pread) rather than page faults.
"""
from __future__ import annotations

import bisect
from pathlib import Path
from typing import List, Optional, Tuple

from torch import Tensor

FileMap = Tuple[int, int, int, str]  # (start address, end address, file offset, path)


def file_maps() -> List[FileMap]:
    """This process's file-backed memory maps, by start address (empty where /proc is missing,
    so every tensor counts as not file-mapped)."""
    try:
        lines = Path("/proc/self/maps").read_text().splitlines()
    except OSError:
        return []
    maps = []
    for line in lines:
        parts = line.split(maxsplit=5)
        if len(parts) == 6 and parts[5].startswith("/") and not parts[5].endswith("(deleted)"):
            start, end = (int(v, 16) for v in parts[0].split("-"))
            maps.append((start, end, int(parts[2], 16), parts[5]))
    maps.sort()
    return maps


def file_offset(maps: List[FileMap], tensor: Optional[Tensor]) -> Optional[Tuple[str, int]]:
    """(file, byte offset) that `tensor`'s first element is mapped from, or None if it is not
    file-mapped (or empty, or on a GPU)."""
    if tensor is None or tensor.is_cuda or tensor.numel() == 0:
        return None
    ptr = tensor.data_ptr()
    i = bisect.bisect_right(maps, (ptr, float("inf"))) - 1
    if i < 0 or not maps[i][0] <= ptr < maps[i][1]:
        return None
    start, _, offset, path = maps[i]
    return path, offset + ptr - start
