"""Nothing conveyor writes goes through a symbolic link it did not make.

A link planted where conveyor writes a file of its own (a checkpoint, the lock, the log, a
partition's side folder) would make the write land on the link's target: any file this user, or
root, may write. So every such name is checked to be no link before it is written, and opened
with O_NOFOLLOW (or made by mkdtemp, or renamed over, which moves links rather than following
them) so that a link planted after the check is refused too.
"""
from __future__ import annotations

import os
from pathlib import Path

from conveyor.core.errors import ConveyorError


def refuse_link(path: Path, instead: str = "choose another run.out_dir") -> None:
    """A ConveyorError when `path` is a symbolic link; `instead`: the fix besides removing it."""
    if os.path.islink(path):
        raise ConveyorError(f"{path} is a symbolic link (to {os.readlink(path)}), where conveyor writes "
                            f"a file of its own; it would overwrite the link's target. conveyor never "
                            f"follows links it did not make: remove {path}, or {instead}.")


def own_folder(path: Path, instead: str = "choose another run.out_dir") -> Path:
    """The folder `path` (inside a folder conveyor writes to: checkpoints/, .hydra/, a TensorBoard
    folder), made if missing, and never a link to somewhere else."""
    path = Path(path)
    refuse_link(path, instead)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:  # a file, FIFO or device of that name
        raise ConveyorError(f"{path} is not a folder, where conveyor keeps a folder of its own; "
                            f"remove it, or {instead}.") from None
    refuse_link(path, instead)  # planted between the check and mkdir (which then found it "existing")
    return path
