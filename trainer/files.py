"""Writing a run's output files whole or not at all, even when the disk fills up."""
from __future__ import annotations

import os
from pathlib import Path

from conveyor.partition import ConveyorError


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


def refuse_link(path: Path) -> None:
    """A ConveyorError when `path` is a symbolic link: writing through it would overwrite whatever
    it points at (any file this user, or root, may write)."""
    if os.path.islink(path):
        raise ConveyorError(f"{path} is a symbolic link (to {os.readlink(path)}), where conveyor writes "
                            f"a file of its own; it would overwrite the link's target. conveyor never "
                            f"follows links it did not make: remove {path}, or choose another "
                            f"run.out_dir.")
