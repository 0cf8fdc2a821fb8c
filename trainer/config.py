"""Checks of a composed config that Hydra cannot do itself, each failing with the fix in words."""
from __future__ import annotations

import torch
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


def resolve_device(name: str) -> torch.device:
    name = str(name)
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ConveyorError(f"run.device={name} but no CUDA device is visible; use run.device=cpu "
                            f"(or auto), or check CUDA_VISIBLE_DEVICES and the driver.")
    try:
        return torch.device(name)
    except RuntimeError:
        raise ConveyorError(f"run.device must be auto, cpu, cuda or cuda:N, got {name!r}.")


def use_device(device: torch.device) -> torch.device:
    """Make `device` this process's current GPU (Triton launches on the current device, and a
    process that never sets it opens a context on GPU 0 as well); returns it with its index, so
    the stage processes it is handed to use the same GPU."""
    if device.type != "cuda":
        return device
    if device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    torch.cuda.set_device(device)
    return device
