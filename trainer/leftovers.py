"""Sweeping, as a run starts, what killed runs left outside the data root.

- `/dev/shm/sem.mp-*`: the named semaphores behind multiprocessing's queues and locks (an async
  run makes 17). The resource tracker unlinks them when their process ends, unless it was killed
  as well, as an out-of-memory or cgroup kill does. Every process that uses a semaphore keeps it
  mapped, so one that no live process maps belongs to no live run.
- `<tmp>/conveyor-ranks-<pid>.*`: the notes folder of a DDP launcher, named by its process id.
"""
from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path

from partition.leftovers import sweep_dead

log = logging.getLogger("conveyor")

SHM = Path("/dev/shm")
RANK_NOTES_PREFIX = "conveyor-ranks-"


def sweep_leftovers() -> None:
    sweep_semaphores()
    sweep_dead(Path(tempfile.gettempdir()), RANK_NOTES_PREFIX)


def sweep_semaphores(shm: Path = SHM) -> list[Path]:
    """Delete this user's multiprocessing semaphores that no live process has mapped."""
    candidates = dict(_my_files(shm, "sem.mp-*"))
    if not candidates:
        return []
    in_use = mapped_inodes(shm)
    swept = [p for p, inode in candidates.items() if inode not in in_use]
    for path in swept:
        path.unlink(missing_ok=True)
    if swept:
        log.info("removed %d semaphore(s) from %s left behind by killed runs", len(swept), shm)
    return swept


def mapped_inodes(folder: Path) -> set[int]:
    """The inodes of the files in `folder` that some process we can inspect has mapped. By
    inode, not name: a semaphore is mapped under the temporary name glibc created it with."""
    inodes = set()
    for maps in Path("/proc").glob("[0-9]*/maps"):
        try:
            lines = maps.read_text().splitlines()
        except OSError:  # gone meanwhile, or another user's
            continue
        for line in lines:
            fields = line.split(maxsplit=5)  # address, perms, offset, device, inode, path
            if len(fields) == 6 and fields[5].startswith(f"{folder}/"):
                inodes.add(int(fields[4]))
    return inodes


def _my_files(folder: Path, pattern: str):
    """(path, inode) of this user's files in `folder` matching `pattern`."""
    for path in folder.glob(pattern):
        try:
            stat = path.stat()
        except OSError:  # gone meanwhile
            continue
        if stat.st_uid == os.getuid():
            yield path, stat.st_ino
