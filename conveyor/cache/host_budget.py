"""How big the host tier is (`cache.host_capacity`), and whether there is one.

`auto`: a host tier only where it pays. Features that are no file's map are already in memory
(built, or in shared memory): they are read in place, as before. A mapped file that fits easily in
the memory really available (psutil's, within the cgroup's limit: core/memory.py) is held by the
page cache, also read in place (zero copies). Only a mapped matrix larger than `FITS_SHARE` of that
memory gets a host tier, of `HOST_SHARE` of it (the rest stays for the structure's pages, the
training and the batches in flight), less its slot map. A fraction of the nodes or a byte size
asks for a tier of that size whatever the features are (in memory, its "disk" reads are
index_selects of x); 0 turns it off.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from conveyor.cache.host_tier import HostTier
from conveyor.cache.options import capacity_to_nodes, parse_capacity
from conveyor.core.file_maps import file_maps, file_offset
from conveyor.core.memory import host_room

FITS_SHARE = 0.5  # a mapped matrix above this share of the available memory gets a host tier (auto)
HOST_SHARE = 0.4  # ... of this share of it


def host_tier_bytes(x: Tensor, host_capacity, room: Optional[int] = None) -> int:
    """The host tier's budget for its rows in bytes (0: no host tier)."""
    kind, value = parse_capacity(host_capacity, "cache.host_capacity")
    row_bytes = x.size(1) * x.element_size()
    if kind != "auto":
        return capacity_to_nodes(kind, value, x.size(0), row_bytes) * row_bytes
    if file_offset(file_maps(), x) is None:
        return 0
    room = host_room() if room is None else room
    if x.numel() * x.element_size() <= room * FITS_SHARE:
        return 0
    return max(0, int(room * HOST_SHARE) - x.size(0) * 4)  # the int32 slot map comes out of it


def host_tier(x: Tensor, order: Optional[Tensor], device: torch.device, host_capacity, io_threads: int,
              device_rows: int) -> Optional[HostTier]:
    """The host tier over x (None: x is read in place). On CUDA it keeps the rows after the device
    tier's `device_rows` (an auto device tier is sized later: then they overlap)."""
    budget = host_tier_bytes(x, host_capacity)
    if budget <= 0:
        return None
    if order is not None and device.type == "cuda":
        order = order[device_rows:]
    return HostTier(x, order, budget, io_threads)
