"""Sweeping what killed processes left behind, without touching what a live process uses.

Temporary folders and files carry the id of the process that made them in their name
(`<prefix><pid>.<anything>` or `<prefix><pid>-<anything>`); at the next start, those whose process
is gone are deleted. A process id the system has handed to another process since keeps its
leftover: safe, and rare.
"""
from __future__ import annotations

import logging
import os
import re
import shutil
from pathlib import Path

log = logging.getLogger("conveyor")
PID_MAX_LIMIT = 1 << 22  # Linux's ceiling on process ids (kernel/pid_max can be at most this)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def owner_pid(name: str, prefix: str) -> int | None:
    """The process id in `<prefix><pid>.<rest>`, `<prefix><pid>-<rest>` or `<prefix><pid>`, or
    None for another name, a number no process can have included (a stray file named
    `conveyor-ranks-99999999999999999999.x` is not ours and stops nothing)."""
    match = re.fullmatch(r"(\d{1,8})([.-].*)?", name[len(prefix):], re.DOTALL)
    pid = int(match.group(1)) if name.startswith(prefix) and match else None
    return pid if pid is not None and 0 < pid <= PID_MAX_LIMIT else None


def sweep_dead(parent: Path, prefix: str) -> list[Path]:
    """Delete the entries of `parent` named `<prefix><pid>...` whose process is gone."""
    swept = []
    try:
        entries = list(Path(parent).iterdir())
    except OSError:  # no such folder (yet), or not ours to read
        return swept
    for entry in entries:
        pid = owner_pid(entry.name, prefix)
        if pid is None or pid == os.getpid() or pid_alive(pid):
            continue
        try:
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)
        except OSError:  # another user's file in a shared folder: not ours to remove
            continue
        log.info("removed %s, left behind by process %d, which is gone", entry, pid)
        swept.append(entry)
    return swept
