"""Checkpoints a run can resume from: written atomically, read without running any code.

A checkpoint holds only tensors, plain containers, numbers and strings (the config as a plain
dict), so it loads with `weights_only=True`: a pickle planted as `last.pt` cannot run code.
`last.pt` is the run after its latest epoch (model, optimizer, lr scheduler, history, best), to
resume from; `best.pt` the model at the best validation accuracy so far, to use.
"""
from __future__ import annotations

import io
import pickle
from pathlib import Path

import torch

from conveyor.core import ConveyorError
from conveyor.core.errors import one_line
from conveyor.core.links import own_folder
from conveyor.core.regular import check_regular
from conveyor.trainer.outputs.files import write_atomically
from conveyor.trainer.outputs.resume import check_resumable

CHECKPOINT = "checkpoints/last.pt"
BEST = "checkpoints/best.pt"
# What a run restores from last.pt (trainer/run.py, start_run), and the type each must have.
RESUMED = {"epoch": int, "model": dict, "optimizer": dict, "history": list, "best": dict}
NOT_OURS = ("It was written by another version of conveyor or for another model, or is damaged. "
            "Move it away to start afresh, or point run.out_dir at another run.")


def checkpoint_path(out_dir) -> Path:
    return Path(out_dir) / CHECKPOINT


def save_checkpoint(out_dir, state: dict, name: str = CHECKPOINT) -> Path:
    buffer = io.BytesIO()  # serialised first, so a failing disk write raises a plain OSError
    torch.save(state, buffer)
    path = Path(out_dir) / name
    own_folder(path.parent)  # checkpoints/ planted as a link would take both files elsewhere
    return write_atomically(path, buffer.getbuffer())


def load_checkpoint(out_dir, map_location="cpu", name: str = CHECKPOINT) -> dict | None:
    """`last.pt` (or `name`, e.g. BEST) of the run in `out_dir`; None if there is none."""
    path = check_regular(Path(out_dir) / name, "checkpoint")
    if not path.exists():
        return None
    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    except Exception as exc:  # a foreign or damaged file: say which, keep it for inspection
        lines = str(exc).strip().splitlines()  # none for an empty file's EOFError
        reason = ("it holds Python objects besides tensors and plain values" if isinstance(exc, pickle.UnpicklingError)
                  else lines[0] if lines else "it is empty" if path.stat().st_size == 0 else type(exc).__name__)
        raise ConveyorError(f"cannot read checkpoint {path} ({reason}); it is damaged or was not "
                            f"written by conveyor, and nothing in it was run. Move it away to "
                            f"start afresh, or point run.out_dir at another run.") from exc


def prepare_out_dir(settings) -> tuple[Path, dict | None]:
    """run.out_dir and, when resuming, its checkpoint, checked against the run's `settings`.
    Without run.resume the checkpoint is only looked for, never read; a run is never overwritten."""
    out_dir = Path(settings.run.out_dir)
    has_checkpoint = checkpoint_path(out_dir).exists()
    if has_checkpoint and not settings.run.resume:
        raise ConveyorError(f"run.out_dir={out_dir} already holds a run with a checkpoint; pass "
                            f"run.resume=true to continue it, or choose another run.out_dir.")
    if not has_checkpoint:  # with run.resume, start_run says so once the run's log is open
        return out_dir, None
    state = load_checkpoint(out_dir)
    check_layout(state, checkpoint_path(out_dir))
    check_resumable(state.get("config"), settings.to_dict(), out_dir)
    return out_dir, state


def check_layout(state, path: Path) -> None:
    """Refuse, before any data is read, a checkpoint that lacks what a resumed run restores (one
    from another program or version of conveyor), instead of a KeyError after the data loaded."""
    if not isinstance(state, dict):
        problems = [f"it holds a {type(state).__name__}, not a dict"]
    else:
        problems = [f"{key} is missing" if key not in state else
                    f"{key} is a {type(state[key]).__name__}, not a {kind.__name__}"
                    for key, kind in RESUMED.items() if not isinstance(state.get(key), kind)]
        if not isinstance(state.get("config", {}), dict):
            problems.append(f"config is a {type(state['config']).__name__}, not a dict")
    if problems:
        raise ConveyorError(f"cannot resume from checkpoint {path} ({'; '.join(problems)}). {NOT_OURS}")


def restore_weights(model, optimizer, state: dict, out_dir) -> None:
    """Load the checkpoint's model and optimizer state (after check_layout, once the model is
    built); weights that do not fit this model end in one paragraph, not a traceback."""
    try:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
    except (RuntimeError, ValueError, KeyError) as error:
        raise ConveyorError(f"cannot resume from checkpoint {checkpoint_path(out_dir)}: its weights "
                            f"do not fit this {type(model).__name__} ({one_line(str(error))[:400]}) "
                            f"{NOT_OURS}") from error
