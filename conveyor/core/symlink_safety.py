"""Nothing conveyor writes goes through a symbolic link it did not make.

A link planted where conveyor writes a file of its own (a checkpoint, the lock, the log, a
partition's side folder) would make the write land on the link's target: any file this user, or
root, may write. So every such name is checked to be no link before it is written, and opened
with O_NOFOLLOW (or made by mkdtemp, or renamed over, which moves links rather than following
them) so that a link planted after the check is refused too.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path

from conveyor.core.errors import ConveyorError


def refuse_link(path: Path, instead: str = "choose another run.out_dir") -> None:
    """A ConveyorError when `path` is a symbolic link; `instead`: the fix besides removing it."""
    if os.path.islink(path):
        raise ConveyorError(f"{path} is a symbolic link (to {os.readlink(path)}), where conveyor writes "
                            f"a file of its own; it would overwrite the link's target. conveyor never "
                            f"follows links it did not make: remove {path}, or {instead}.")


def path_kind(path: Path) -> str:
    """"missing", "folder" or "other" for `path` (links followed, as exists() and is_dir() do),
    from one stat: two separate tests can straddle another process making and removing the folder
    (a second rank probing the same fresh out_dir) and report a folder that exists yet is none."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "missing"
    except NotADirectoryError:  # a file where one of its parents should be a folder
        return "other"
    return "folder" if stat.S_ISDIR(mode) else "other"


MKDIR_TRIES = 20  # another process may make and remove the folder in between, each time


def own_folder(path: Path, instead: str = "choose another run.out_dir") -> Path:
    """The folder `path` (inside a folder conveyor writes to: checkpoints/, .hydra/, a TensorBoard
    folder), made if missing, and never a link to somewhere else."""
    path = Path(path)
    refuse_link(path, instead)
    make_folder(path, instead)
    refuse_link(path, instead)  # planted between the check and mkdir (which then found it "existing")
    return path


def make_folder(path: Path, instead: str) -> None:
    """mkdir -p `path`. pathlib's mkdir(exist_ok=True) tests is_dir() after its FileExistsError,
    so a folder another rank's probe made and removed in between reads as a file: here the make
    and the test are one step, tried again whenever the folder vanished meanwhile."""
    for _ in range(MKDIR_TRIES):
        try:
            os.mkdir(path)
            return
        except FileNotFoundError:  # a parent is missing (or was just removed): make it, then retry
            make_folder(path.parent, instead)
        except FileExistsError:
            kind = path_kind(path)
            if kind == "folder":
                return
            if kind == "other":
                break
        except NotADirectoryError:  # a parent is a file
            break
    if path_kind(path) != "folder":
        raise ConveyorError(f"{path} is not a folder, where conveyor keeps a folder of its own (a file, "
                            f"FIFO or device is there, or in one of its parents); remove it, or {instead}.")
