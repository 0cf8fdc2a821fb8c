"""What may change when a run resumes: the checkpoint's config against the one given now.

A resumed run continues the same training, so the model, the data and the sampling (which
batches each epoch draws) must be the checkpoint's; otherwise the weights do not fit, or the run
silently becomes another. So must the lr schedule (`trainer.lr_*`), whose state the checkpoint
carries on: under a schedule other than `none` it owns the lr, so `trainer.lr` is fixed too, and
cosine's length is `trainer.epochs`, fixed with it. Otherwise the optimizer's settings may change
(a lower lr to fine-tune), and the log and metrics.json then state the values the optimizer uses
from here on. Everything else may change: the epochs, how and how often to evaluate
(`trainer.inference`, `trainer.eval_every`), the early-stopping `trainer.patience`, the pipeline.
"""
from __future__ import annotations

import logging
from pathlib import Path

from conveyor.core import ConveyorError

log = logging.getLogger("conveyor")

FIXED = ("model.", "data.", "sampler.", "run.seed", "trainer.batch_size", "trainer.lr_")
MAY_MOVE = ("data.root",)  # where the same data lies
SAID = ("trainer.precision",)  # may change (a 32-bit run resumed under bf16-mixed), said in the log
OPTIMIZER = {"trainer.lr": "lr", "trainer.weight_decay": "weight_decay"}  # config key -> param group
FIXED_BY_SCHEDULE = {"cosine": ("trainer.lr", "trainer.epochs"), "step": ("trainer.lr",),
                     "plateau": ("trainer.lr",)}


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
    """Refuse (ConveyorError) a config whose model, data, sampling or lr schedule keys differ
    from the checkpoint's; name every differing key. Keys only one of them has are not compared."""
    if not saved_config:
        log.warning("the checkpoint in %s records no config: cannot check that it fits", out_dir)
        return
    saved, now = resolved(flatten(saved_config)), resolved(flatten(config))
    fixed_now = FIXED_BY_SCHEDULE.get(saved.get("trainer.lr_schedule"), ())
    differing = [key for key in sorted(saved.keys() & now.keys())
                 if (key.startswith(FIXED) and key not in MAY_MOVE or key in fixed_now)
                 and saved[key] != now[key]]
    say_changes(saved, now)
    if differing:
        changes = "; ".join(f"{key}: {saved[key]!r} in the checkpoint, {now[key]!r} now"
                            for key in differing)
        raise ConveyorError(
            f"run.resume=true, but the checkpoint in {out_dir} was trained with another model, "
            f"data, sampling or lr schedule config ({changes}). Resuming would not continue that "
            f"run: give the checkpoint's values (metrics.json there lists its config), or start a "
            f"new run in another run.out_dir. Only trainer.lr (unless an lr schedule owns it) and "
            f"trainer.weight_decay may change on resume, besides the epochs (unless cosine's), "
            f"the evaluation and the pipeline.")


def say_changes(saved: dict, now: dict) -> None:
    """Keys that may change on resume but change what the run computes: said in the log."""
    for key in SAID:
        if key in saved and key in now and saved[key] != now[key]:
            log.warning("resuming with %s=%s, where the checkpoint's epochs ran under %s", key, now[key], saved[key])


def resolved(flat: dict) -> dict:
    """`flat` with a null that stands for a value written as that value: `model.fast_dropout`'s
    null is true for a built-in model (ModelSettings.uses_fast_dropout), which checkpoints from
    before the null default recorded as true."""
    if "model.fast_dropout" in flat and flat["model.fast_dropout"] is None and "model._target_" not in flat:
        return {**flat, "model.fast_dropout": True}
    return flat


def apply_optimizer_settings(optimizer, saved_config: dict | None, config: dict) -> None:
    """After loading the checkpoint's optimizer state (which brings its own lr, as its schedule
    left it, and weight decay), use the values configured now where they changed, and log them."""
    saved, now = flatten(saved_config or {}), flatten(config)
    for key, group_key in OPTIMIZER.items():
        if key not in now:
            continue
        value = float(now[key])
        old = optimizer.param_groups[0][group_key]
        if float(saved.get(key, old)) == value:
            continue
        for group in optimizer.param_groups:
            group[group_key] = value
        log.info("resuming with %s %s -> %s (the optimizer uses the new value from here on)",
                 key, saved.get(key, old), value)
