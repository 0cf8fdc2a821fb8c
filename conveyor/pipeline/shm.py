"""Room in /dev/shm for the async pipeline, checked before its processes start and before each run.

CPU shared memory lives in /dev/shm, and Docker gives a container 64 MB there by default: a stage
would die on torch's "unable to allocate shared memory", a queue on `OSError: [Errno 28]`. So
what the pipeline will place there is estimated from what it really places there (room.py), and a
shortfall is refused in one paragraph with the fixes (`pipeline=serial`, `--shm-size`):

- the graph's tensors that are not mapped from its saved file (sharing.py moves them once; every
  attribute, `node_attrs` and `edge_attrs` too);
- a sampler or feature source handed over as an object, not a recipe: pickling it into its stage
  moves its tensors there (a memory-mapped one too);
- the queues' named semaphores and the control block, a page each;
- each run's seeds, which travel to the sampler as one shared tensor;
- the slots of both queues at the most a batch can grow them (room.py); on a GPU they are device
  memory and count nothing here.
An allocation there that fails all the same (another process filled /dev/shm since, or a sampler
of one's own whose batches cannot be bounded ahead) becomes the same paragraph (`shm_shortfall`).
"""
from __future__ import annotations

import errno
import math
import os
import shutil
from typing import Dict, Iterable, List, Optional

from torch import Tensor

from conveyor.core import ConveyorError

SHM = "/dev/shm"
PAGE = os.sysconf("SC_PAGE_SIZE")
SEMAPHORES = 6 * 3 + 2  # processes.py: six Queues (a read lock, a write lock, a counter) and a SimpleQueue
SHM_FAILURE = "unable to allocate shared memory"  # torch's words when /dev/shm is full


def shared_bytes(tensors: Iterable[Tensor]) -> int:
    """Bytes that sharing `tensors` moves into shared memory: the storages of the CPU ones not
    there already, each once (a view shares its whole storage)."""
    storages = {}
    for t in tensors:
        if isinstance(t, Tensor) and t.device.type == "cpu" and not t.is_shared():
            storage = t.untyped_storage()
            storages[storage.data_ptr()] = storage.nbytes()
    return sum(storages.values())


def object_tensors(obj, depth: int = 4) -> List[Tensor]:
    """The tensors pickling `obj` would carry: found through its attributes, dicts, lists and
    tuples (a sampler's graph, a feature cache's rows), `depth` levels down."""
    found, seen, todo = [], set(), [(obj, 0)]
    while todo:
        item, level = todo.pop()
        if id(item) in seen or level > depth:
            continue
        seen.add(id(item))
        if isinstance(item, Tensor):
            found.append(item)
        elif isinstance(item, dict):
            todo += [(v, level + 1) for v in item.values()]
        elif isinstance(item, (list, tuple)):
            todo += [(v, level + 1) for v in item]
        elif hasattr(item, "__dict__") and not isinstance(item, type):
            todo += [(v, level + 1) for v in vars(item).values()]
    return found


def fixed_need() -> Dict[str, int]:
    """What every async pipeline holds there whatever its graph: semaphores and the control block."""
    return {"the queues' semaphores and control block": (SEMAPHORES + 1) * PAGE}


def check_shm_room(need: Dict[str, int], folder: str = SHM, held: int = 0) -> None:
    """Refuse, in one paragraph with the fixes, when `need` (bytes by what takes them) is more
    than `folder` has free plus `held`: what of it the pipeline already placed there."""
    total = sum(need.values())
    try:
        usage = shutil.disk_usage(folder)
    except OSError:  # no /dev/shm at all: torch falls back to its own; nothing to measure
        return
    if total - held <= usage.free:
        return
    parts = ", ".join(f"{what} {_mib(size)}" for what, size in need.items() if size >= 2**16)
    raise ConveyorError(
        f"the async pipeline may place up to {_mib(total)} in shared memory ({parts}), but {folder} has "
        f"{_mib(usage.free + held)} free for it (Docker's default is 64 MiB); its stage processes "
        f"would die on a full {folder}. {_fixes(folder, usage.total - usage.free + total - held)}")


def shm_shortfall(error: BaseException, folder: str = SHM) -> Optional[ConveyorError]:
    """The paragraph for an allocation in shared memory that failed all the same (another process
    filled /dev/shm since the check, or a sampler of one's own drew more than its bound), or None
    when `error` is something else: torch's words for it, or ENOSPC from a semaphore."""
    if not (getattr(error, "errno", None) == errno.ENOSPC or SHM_FAILURE in str(error)):
        return None
    try:
        usage = shutil.disk_usage(folder)
    except OSError:
        return None
    return ConveyorError(
        f"the async pipeline ran out of shared memory: {folder} has {_mib(usage.free)} free of "
        f"{_mib(usage.total)} (Docker's default is 64 MiB), and an allocation there failed "
        f"({str(error).strip().splitlines()[-1][:200]}). "
        f"{_fixes(folder, usage.total + 2**30)}")


def _fixes(folder: str, size: float) -> str:
    return (f"Run with pipeline=serial (NeighborLoader(..., pipeline=\"serial\")), which needs none, or "
            f"give the container more: `docker run --shm-size={math.ceil(size / 2**30 + 0.25)}g ...` (or "
            f"free space in {folder}; smaller batches or a smaller pipeline.depth need less).")


def _mib(size: float) -> str:
    return f"{size / 2**20:,.1f} MiB"
