"""Checkpoints a run can resume from: written atomically, so a kill never leaves half a file."""
from __future__ import annotations

import logging
import os
from pathlib import Path

import torch

from partition import ConveyorError

CHECKPOINT = "checkpoints/last.pt"
log = logging.getLogger("conveyor")


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


def prepare_out_dir(cfg) -> tuple[Path, dict | None]:
    """run.out_dir and the checkpoint to resume from (None: start afresh); a checkpoint there
    without run.resume is refused, so a run is never overwritten."""
    out_dir = Path(cfg.run.out_dir)
    state = load_checkpoint(out_dir)
    if state is not None and not cfg.run.resume:
        raise ConveyorError(f"run.out_dir={out_dir} already holds a run with a checkpoint; pass "
                            f"run.resume=true to continue it, or choose another run.out_dir.")
    if cfg.run.resume and state is None:
        log.info("run.resume=true but %s has no checkpoint: starting from epoch 1", out_dir)
    return out_dir, state
