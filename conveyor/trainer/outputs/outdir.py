"""One run per `run.out_dir`, and default run names that never collide.

A run holds an exclusive `flock` on `<out_dir>/.conveyor.lock` for as long as its process lives;
a second run into the same folder is refused before it writes anything (the `conveyor` command
takes the lock as soon as the config is checked, before it saves the config into `.hydra/`). The kernel drops
the lock when the process ends, however it ends, so a killed run leaves no stale lock.

Default names end with `${run_id:}` (conveyor/compose.py): this process's id, or under torchrun
the launcher's (the same for every rank of one job), so two runs started in the same second get
two folders.
"""
from __future__ import annotations

import fcntl
import os
import shutil
from pathlib import Path

from conveyor.core import ConveyorError
from conveyor.core.symlink_safety import refuse_link

LOCK_FILE = ".conveyor.lock"
_held: dict[Path, int] = {}  # out_dir -> the open lock file: this process's locks, kept open
_made: set[Path] = set()  # the out_dirs this process made (a refused run removes its own: remove_if_refused)


def lock_out_dir(out_dir) -> None:
    """Take `out_dir`'s lock for the rest of this process's life (again: a no-op); raise a
    ConveyorError when another run holds it."""
    try:
        out_dir = Path(out_dir).expanduser().resolve()
        if out_dir in _held:
            return
        path = out_dir / LOCK_FILE
        made = not out_dir.exists()
        out_dir.mkdir(parents=True, exist_ok=True)
        refuse_link(path)  # the run writes its pid into the lock: never through a planted link
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except (OSError, RuntimeError) as error:  # RuntimeError: a symlink loop, before Python 3.13
        reason = getattr(error, "strerror", None) or error
        raise ConveyorError(f"cannot use run.out_dir={out_dir}: {reason}; choose a folder you can "
                            f"write to.") from error
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise ConveyorError(
            f"run.out_dir={out_dir} is in use by another run (process {holder}), which holds "
            f"{path}. Two runs in one folder would overwrite each other's checkpoint, metrics and "
            f"logs. Wait for that run to end, or choose another run.out_dir (the default name is "
            f"new for every run).") from None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    _held[out_dir] = fd
    if made:
        _made.add(out_dir)


def remove_if_refused(out_dir) -> None:
    """After a run was refused before its first checkpoint: the folder this process made for it
    (its lock, its .hydra/ config, its log) removed, so that a refused run leaves nothing behind.
    A folder that was there before, or that holds a checkpoint, stays."""
    out_dir = Path(out_dir).expanduser().resolve()
    if out_dir not in _made or (out_dir / "checkpoints").exists():
        return
    _made.discard(out_dir)
    fd = _held.pop(out_dir, None)
    if fd is not None:
        os.close(fd)  # the lock goes with it
    shutil.rmtree(out_dir, ignore_errors=True)


def owns_out_dir() -> bool:
    """Whether this process owns the run's folder: not a torchrun rank other than 0."""
    return int(os.environ.get("RANK", "0")) == 0
