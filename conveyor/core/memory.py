"""How much memory an allocation may still take, so that a size a setting or a file asks for is
refused in one paragraph before it is allocated, never by the kernel's OOM killer (which gives no
message, and on a shared host may end someone else's process).

On the host: what the kernel can hand out without killing anything (psutil's `available`, the free
and reclaimable pages, plus free swap), and no more than the memory cgroup (a container's
`--memory`, a job scheduler's limit) has left: its limit less its usage, plus the page cache it
may reclaim: every clean page of a file, active or not. A memory-mapped file (an out-of-core
graph's features and CSC) is mapped, not copied: its pages charged to the cgroup are dropped under
pressure and read again, so they are room, not a need (counting only the inactive ones made a
small cgroup look full once a run had read its files twice). On a GPU: the free device memory.
"""
from __future__ import annotations

from pathlib import Path
from typing import Dict, Optional

import psutil
import torch

from conveyor.core.errors import ConveyorError

CGROUP = Path("/sys/fs/cgroup")
UNLIMITED = 1 << 60  # cgroup v1 writes "no limit" as a page-rounded 2**63 - 1
# A cgroup's file pages less the dirty ones and those being written back: what it can drop at once.
RECLAIMABLE_V1 = {"total_inactive_file": 1, "total_active_file": 1, "total_dirty": -1, "total_writeback": -1}
RECLAIMABLE_V2 = {"inactive_file": 1, "active_file": 1, "file_dirty": -1, "file_writeback": -1}


def host_room() -> int:
    """Bytes this process may still allocate on the host."""
    room = psutil.virtual_memory().available + psutil.swap_memory().free
    limited = cgroup_room()
    return room if limited is None else min(room, limited)


def cgroup_room() -> Optional[int]:
    """The memory cgroup's limit less its usage (plus its reclaimable page cache), or None when
    no limit applies (or none can be read)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    v1 = [line for line in lines if ":memory:" in line]  # a v1 memory controller, else v2's one line
    line = next(iter(v1 or [line for line in lines if line.startswith("0::")]), None)
    if line is None:
        return None
    v2, path = line.startswith("0::"), line.split(":", 2)[2].lstrip("/")
    files = (("memory.max", "memory.current", RECLAIMABLE_V2) if v2 else
             ("memory.limit_in_bytes", "memory.usage_in_bytes", RECLAIMABLE_V1))
    for folder in ((CGROUP / path, CGROUP) if v2 else (CGROUP / "memory" / path, CGROUP / "memory")):
        try:
            limit, usage = ((folder / name).read_text().strip() for name in files[:2])
        except OSError:
            continue
        if limit == "max" or int(limit) >= UNLIMITED:
            return None
        return int(limit) - int(usage) + reclaimable(folder / "memory.stat", files[2])
    return None


def reclaimable(path: Path, keys: Dict[str, int]) -> int:
    """The clean file pages of memory.stat: `keys` (a counter's name, its sign) summed."""
    try:
        stat = dict(line.split()[:2] for line in path.read_text().splitlines())
        return max(sum(sign * int(stat.get(key, 0)) for key, sign in keys.items()), 0)
    except (OSError, ValueError):
        return 0


def memory_room(device) -> tuple[int, str]:
    """Bytes that may still be allocated on `device`, and what that memory is called."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0], f"{device} (free device memory)"
    return host_room(), "this machine (available memory, within its cgroup's limit)"


def check_memory(what: str, need: Dict[str, float], device, fix: str) -> None:
    """Refuse, in one paragraph, sizes that cannot fit: `what` names them, `need` is bytes by what
    takes them (at least), `fix` says what to lower."""
    total = sum(need.values())
    room, where = memory_room(device)
    if total <= room:
        return
    parts = ", ".join(f"{gib(size)} {what_for}" for what_for, size in need.items() if size > total / 1000)
    raise ConveyorError(f"{what} needs at least {gib(total)} ({parts}), but {where} has {gib(room)}: "
                        f"it would end in the kernel's OOM killer, without a word. {fix}")


def gib(size: float) -> str:
    """`size` bytes for a person: GiB, or MiB below one GiB."""
    if size >= 2**30:
        return f"{size / 2**30:,.1f} GiB"
    return f"{size / 2**20:,.1f} MiB"
