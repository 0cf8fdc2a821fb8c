"""How many bytes a cache may take on its device: PaGraph's `total - peak - reserve`.

PaGraph sizes its cache once, right after the first training iterations, because every
mini-batch needs about the same memory. On CUDA the peak is everything in use on the GPU at
the training's peak: other processes (the sampler, the trainer when it is a separate process),
CUDA contexts, and this process's own peak allocation. PyTorch's caching allocator keeps the
memory a process once reserved, so after warm-up `free` already excludes the others' peaks.
On CPU the "device" is host memory: free = psutil's available memory.
"""
from __future__ import annotations

from typing import Optional

import psutil
import torch


def device_memory(device: torch.device) -> tuple[int, int]:
    """(total bytes, bytes in use at the training's peak, measured) on `device`."""
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        reserved = torch.cuda.memory_reserved(device)
        peak = torch.cuda.max_memory_allocated(device)
        # In use by others = total - free - our reserved; at our peak we hold `peak` on top.
        return total, total - free - reserved + peak
    vm = psutil.virtual_memory()
    return vm.total, vm.total - vm.available


def cache_budget(device: torch.device, reserve: int, prefetch: int,
                 peak_bytes: Optional[int] = None, held: int = 0, batch_room: int = 0) -> tuple[int, dict]:
    """Bytes left for the cache, and the figures it came from (for the log).

    peak_bytes: what the training needs at its peak, if the caller measured it itself (e.g. the
    trainer process's max_memory_reserved plus the sampler's); otherwise it is measured here.
    held: bytes the cache already holds on the device (they are counted as in use but would be
    freed by a refit).
    batch_room: bytes kept free for batches larger than those the peak was measured on (the
    evaluation's), on top of the peak.
    """
    total, measured = device_memory(device)
    in_use = measured - held if peak_bytes is None else int(peak_bytes)
    budget = max(0, total - in_use - batch_room - reserve - prefetch)
    return budget, {"total_bytes": total, "peak_bytes": in_use, "batch_room_bytes": batch_room,
                    "reserve_bytes": reserve, "prefetch_bytes": prefetch, "budget_bytes": budget}
