"""Checks of a composed config that Hydra cannot do itself, each failing with the fix in words."""
from __future__ import annotations

from omegaconf import DictConfig

from partition import ConveyorError
from samplers import SAMPLERS
from samplers.validation import check_fanouts

from .models import MODELS

PIPELINES = ("serial", "async")
MODES = ("train", "compare")


def _positive_int(value, key: str) -> int:
    try:
        value = int(value)
    except (TypeError, ValueError):
        raise ConveyorError(f"{key} must be a positive integer, got {value!r}.")
    if value <= 0:
        raise ConveyorError(f"{key} must be a positive integer, got {value}.")
    return value


def check_config(cfg: DictConfig) -> None:
    if cfg.mode not in MODES:
        raise ConveyorError(f"unknown mode {cfg.mode!r}; choose one of {', '.join(MODES)} (e.g. mode=train).")
    if cfg.model.name not in MODELS:
        raise ConveyorError(f"unknown model {cfg.model.name!r}; choose one of {', '.join(MODELS)} "
                            f"(e.g. model=sage).")
    if cfg.sampler.name not in SAMPLERS + ("auto",):
        raise ConveyorError(f"unknown sampler {cfg.sampler.name!r}; choose one of "
                            f"{', '.join(SAMPLERS)} or auto (e.g. sampler=bsp).")
    if cfg.pipeline.name not in PIPELINES:
        raise ConveyorError(f"unknown pipeline {cfg.pipeline.name!r}; choose serial or async.")
    check_fanouts(cfg.sampler.fanouts)
    _positive_int(cfg.trainer.batch_size, "trainer.batch_size")
    _positive_int(cfg.trainer.eval_batch_size, "trainer.eval_batch_size")
    _positive_int(cfg.trainer.epochs, "trainer.epochs")
    _positive_int(cfg.model.hidden, "model.hidden")
    _positive_int(cfg.run.world_size, "run.world_size")
    if not float(cfg.trainer.lr) > 0:
        raise ConveyorError(f"trainer.lr must be > 0, got {cfg.trainer.lr}.")
    if not 0 <= float(cfg.model.dropout) < 1:
        raise ConveyorError(f"model.dropout must lie in [0, 1), got {cfg.model.dropout}.")
