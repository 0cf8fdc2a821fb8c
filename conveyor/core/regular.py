"""Every file conveyor reads is checked to be a regular file before it is opened.

Opening a named pipe (FIFO) blocks until someone writes to it, and a device such as /dev/zero
never ends: either would hang a run with no word, or be misread as a damaged file. `os.stat`
follows links and never blocks, so the check names what the path really is before any read.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path

from conveyor.core.errors import ConveyorError

KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a named pipe (FIFO), whose read would block"),
         (stat.S_ISCHR, "a character device, whose read never ends"),
         (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def kind_of(mode: int) -> str:
    return next((name for test, name in KINDS if test(mode)), "not a regular file")


def check_regular(path: str | Path, what: str = "file") -> Path:
    """`path` itself when it is missing or a regular file (after following links); a
    ConveyorError naming it and what it is otherwise. Callers say what a missing file means."""
    path = Path(path)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return path
    if stat.S_ISREG(mode):
        return path
    target = os.path.realpath(path)
    shown = path if str(target) == str(path.absolute()) else f"{path} (a link to {target})"
    raise ConveyorError(f"the {what} {shown} is {kind_of(mode)}, not a regular file; conveyor reads "
                        f"only regular files. Replace it with the file itself.")
