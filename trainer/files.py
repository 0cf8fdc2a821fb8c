"""Writing a run's output files whole or not at all, even when the disk fills up."""
from __future__ import annotations

import os
from pathlib import Path

from conveyor.partition import ConveyorError


def write_atomically(path: Path, data: bytes) -> Path:
    """Write `data` to `path` through `<path>.tmp`, renamed into place once complete: a kill
    never leaves half a file, and the previous version stays intact until the rename. A failed
    write (disk full, read-only folder) removes the temporary file, which would otherwise keep
    the disk full, and raises a ConveyorError naming the path and the OS error."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError as error:
        tmp.unlink(missing_ok=True)
        raise ConveyorError(
            f"could not write {path}: {error.strerror or error} (errno {error.errno}). The "
            f"previous version of the file, if any, is intact. Free space on that disk or make "
            f"the folder writable, then continue with run.resume=true.") from error
    return path
