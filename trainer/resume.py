"""What may change when a run resumes: the checkpoint's config against the one given now.

A resumed run continues the same training, so the model, the data and the sampling (which
batches each epoch draws) must be the checkpoint's; otherwise the weights do not fit, or the run
silently becomes another. The optimizer's settings may change (a lower lr to fine-tune), and the
log and metrics.json then state the values the optimizer uses from here on.
"""
from __future__ import annotations

import logging
from pathlib import Path

from partition import ConveyorError

log = logging.getLogger("conveyor")

FIXED = ("model.", "data.", "sampler.", "run.seed", "trainer.batch_size")
MAY_MOVE = ("data.root",)  # where the same data lies
OPTIMIZER = {"trainer.lr": "lr", "trainer.weight_decay": "weight_decay"}  # config key -> param group


def flatten(tree: dict, prefix: str = "") -> dict:
    """{"a": {"b": 1}} -> {"a.b": 1}; lists stay whole (fanouts compare as one value)."""
    flat = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def check_resumable(saved_config: dict | None, config: dict, out_dir: Path) -> None:
    """Refuse (ConveyorError) a config whose model, data or sampling keys differ from the
    checkpoint's; name every differing key. Keys only one of them has are not compared."""
    if not saved_config:
        log.warning("the checkpoint in %s records no config: cannot check that it fits", out_dir)
        return
    saved, now = flatten(saved_config), flatten(config)
    differing = [key for key in sorted(saved.keys() & now.keys())
                 if key.startswith(FIXED) and key not in MAY_MOVE and saved[key] != now[key]]
    if differing:
        changes = "; ".join(f"{key}: {saved[key]!r} in the checkpoint, {now[key]!r} now"
                            for key in differing)
        raise ConveyorError(
            f"run.resume=true, but the checkpoint in {out_dir} was trained with another model, "
            f"data or sampling config ({changes}). Resuming would not continue that run: give "
            f"the checkpoint's values (metrics.json there lists its config), or start a new run "
            f"in another run.out_dir. Only trainer.lr and trainer.weight_decay may change on "
            f"resume.")


def apply_optimizer_settings(optimizer, saved_config: dict | None, config: dict) -> None:
    """After loading the checkpoint's optimizer state (which brings its own lr and weight decay),
    use the values configured now, and log those that changed."""
    saved, now = flatten(saved_config or {}), flatten(config)
    for key, group_key in OPTIMIZER.items():
        if key not in now:
            continue
        value = float(now[key])
        old = optimizer.param_groups[0][group_key]
        for group in optimizer.param_groups:
            group[group_key] = value
        if float(saved.get(key, old)) != value:
            log.info("resuming with %s %s -> %s (the optimizer uses the new value from here on)",
                     key, saved.get(key, old), value)
