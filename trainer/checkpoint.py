"""Checkpoints a run can resume from: written atomically, so a kill never leaves half a file."""
from __future__ import annotations

import os
from pathlib import Path

import torch

from partition import ConveyorError

CHECKPOINT = "checkpoints/last.pt"


def save_checkpoint(out_dir, state: dict) -> Path:
    path = Path(out_dir) / CHECKPOINT
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".pt.tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)  # the previous checkpoint stays intact until this instant
    return path


def load_checkpoint(out_dir, map_location="cpu") -> dict | None:
    path = Path(out_dir) / CHECKPOINT
    if not path.exists():
        return None
    try:
        return torch.load(path, map_location=map_location, weights_only=False)
    except Exception as exc:  # a foreign or damaged file: say which, keep it for inspection
        raise ConveyorError(f"cannot read checkpoint {path} ({exc}); move it away to start afresh "
                            f"or point run.out_dir at another run.") from exc
