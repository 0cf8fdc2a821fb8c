"""Room in /dev/shm for the async pipeline, checked before it starts.

The async pipeline shares the graph's tensors (those not mapped from a saved file) and its batch
slots through shared memory, which lives in /dev/shm. Docker gives a container 64 MB there by
default: the stage processes would die on a bus error or an opaque "unable to write to file".
So the need is estimated (the graph's bytes, plus a quarter for the slots) against what /dev/shm
has free, and a shortfall refused in one paragraph with the two fixes.
"""
from __future__ import annotations

import shutil

from conveyor.core import ConveyorError

SHM = "/dev/shm"
SLOTS_MARGIN = 1.25  # the batch slots, beside the graph: a rough quarter more


def check_shm_room(graph_bytes: int, folder: str = SHM) -> None:
    need = int(graph_bytes * SLOTS_MARGIN)
    try:
        free = shutil.disk_usage(folder).free
    except OSError:  # no /dev/shm at all: torch falls back to its own; nothing to measure
        return
    if need > free:
        raise ConveyorError(
            f"the async pipeline needs about {need / 2**20:,.0f} MiB of shared memory for the graph "
            f"and its batches, but {folder} has {free / 2**20:,.0f} MiB free (Docker's default is "
            f"64 MiB). Run with pipeline=serial, which needs none, or give the container more: "
            f"`docker run --shm-size=2g ...` (or free space in {folder}).")
