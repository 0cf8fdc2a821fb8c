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
from conveyor.core.regular import check_regular
from conveyor.core.symlink_safety import own_folder
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
        problems = problems or field_problems(state)
    if problems:
        raise ConveyorError(f"cannot resume from checkpoint {path} ({'; '.join(problems)}). {NOT_OURS}")


def field_problems(state: dict) -> list:
    """What is wrong in the fields' values (their types being right): the epoch a whole number
    >= 0; the history one record per evaluated epoch, epochs rising within 1..epoch; the best
    figures of one metric, at an epoch within 1..epoch or none; the optimizer's state and groups."""
    epoch, history, best, optimizer = state["epoch"], state["history"], state["best"], state["optimizer"]
    if isinstance(epoch, bool) or epoch < 0:
        return [f"epoch is {epoch!r}, not a count of epochs >= 0"]
    epochs = [record.get("epoch") if isinstance(record, dict) else None for record in history]
    problems = []
    if not all(isinstance(e, int) and not isinstance(e, bool) and 1 <= e <= epoch for e in epochs) \
            or epochs != sorted(set(epochs)):
        problems.append(f"history is not one record (a dict) per epoch, epochs rising within 1..{epoch}: "
                        f"it holds {str(epochs)[:80]}")
    figures = sorted(k for k in best if k != "epoch")
    metric = figures[0][len("test_"):] if figures else ""
    best_epoch = best.get("epoch")
    if "epoch" not in best or figures != [f"test_{metric}", f"val_{metric}"] or not (
            best_epoch is None or isinstance(best_epoch, int) and 1 <= best_epoch <= epoch) or not all(
            best[k] is None or isinstance(best[k], (int, float)) and 0.0 <= best[k] <= 1.0 for k in figures):
        problems.append(f"best is {str(best)[:120]}, not the best epoch within 1..{epoch} (or None) with its "
                        f"validation and test figures in [0, 1]")
    if not isinstance(optimizer.get("state"), dict) or not isinstance(optimizer.get("param_groups"), list):
        problems.append("optimizer holds no state and param_groups")
    return problems


def check_optimizer_shapes(model, optimizer) -> None:
    """Each parameter's optimizer state (Adam's moments, SGD's momentum) of the parameter's shape:
    torch's load_state_dict takes any shape, and the first step would fail, or broadcast."""
    for group in optimizer.param_groups:
        for param in group["params"]:
            for name, value in optimizer.state.get(param, {}).items():
                if isinstance(value, torch.Tensor) and value.dim() and value.shape != param.shape:
                    raise ValueError(f"the optimizer's {name} has shape {tuple(value.shape)} for a parameter of "
                                     f"shape {tuple(param.shape)}")


def restore_weights(model, optimizer, state: dict, out_dir) -> None:
    """Load the checkpoint's model and optimizer state (after check_layout, once the model is
    built); weights that do not fit this model end in one paragraph, not a traceback."""
    try:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        check_optimizer_shapes(model, optimizer)
    except (RuntimeError, ValueError, KeyError, TypeError) as error:
        raise ConveyorError(f"cannot resume from checkpoint {checkpoint_path(out_dir)}: its weights "
                            f"do not fit this {type(model).__name__} ({one_line(str(error))[:400]}) "
                            f"{NOT_OURS}") from error
