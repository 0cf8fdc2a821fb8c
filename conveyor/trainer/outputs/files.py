"""Writing a run's output files whole or not at all, even when the disk fills up."""
from __future__ import annotations

import os
import stat
from pathlib import Path

from conveyor.core import ConveyorError
from conveyor.core.symlink_safety import refuse_link


def write_atomically(path: Path, data: bytes) -> Path:
    """Write `data` to `path` through `<path>.tmp`, renamed into place once complete: a kill
    never leaves half a file, and the previous version stays intact until the rename. A failed
    write (disk full, read-only folder) removes the temporary file, which would otherwise keep
    the disk full, and raises a ConveyorError naming the path and the OS error. A symbolic link
    at either name is refused, never followed nor replaced: someone else put it there."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    refuse_link(path)
    refuse_link(tmp)
    refuse_special(path)
    refuse_special(tmp)  # only a killed write's own leftover, a regular file, is replaced
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.unlink(missing_ok=True)  # a killed write's own leftover (a link was refused above)
        # O_EXCL and O_NOFOLLOW: a link planted between the check and here is refused, not followed.
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with open(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except FileExistsError:
        raise ConveyorError(f"{tmp} appeared while conveyor was writing it: another process writes "
                            f"into this run's folder. Stop it, then continue with run.resume=true.") from None
    except OSError as error:
        tmp.unlink(missing_ok=True)
        raise ConveyorError(
            f"could not write {path}: {error.strerror or error} (errno {error.errno}). The "
            f"previous version of the file, if any, is intact. Free space on that disk or make "
            f"the folder writable, then continue with run.resume=true.") from error
    return path


def open_to_append(path: Path):
    """`path` (run.log) opened to append text, created if missing: never through a symbolic link
    (O_NOFOLLOW), and never a FIFO or device, where opening to write waits for a reader forever
    (O_NONBLOCK, and a regular-file check before and after)."""
    path = Path(path)
    refuse_link(path)
    refuse_special(path)
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as error:
        refuse_link(path)  # planted since the checks: O_NOFOLLOW refused it
        refuse_special(path)
        raise ConveyorError(f"cannot open {path} to write to it: {error.strerror or error} (errno "
                            f"{error.errno}). Make the folder writable, or choose another "
                            f"run.out_dir.") from error
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ConveyorError(not_regular(path))
    os.set_blocking(fd, True)
    return open(fd, "a", encoding="utf-8")


def refuse_special(path: Path) -> None:
    """A ConveyorError when `path` exists and is not a regular file (a FIFO, device, socket or
    folder) where conveyor writes one."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISREG(mode) and not stat.S_ISLNK(mode):
        raise ConveyorError(not_regular(path))


def not_regular(path: Path) -> str:
    return (f"{path} is not a regular file (a FIFO, a device, a socket or a folder), where conveyor "
            f"writes a file of its own; remove it, or choose another run.out_dir.")
