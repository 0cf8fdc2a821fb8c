"""`pipeline.*` options (conf/pipeline/async.yaml), checked once with a clear error each."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Dict, Optional

from omegaconf import OmegaConf

from conveyor.partition import ConveyorError

STAGES = ("sampler", "loader")


@dataclass
class PipelineOptions:
    """The typed, checked form of conf/pipeline/async.yaml, where the defaults and their meaning
    are stated (once: every key is read from the config, none has a default here)."""
    depth: int  # most batches a producer may have waiting in its queue (the memory bound)
    superbatch: int  # batches the sampler draws per call (one fused launch for all of them)
    interval: int  # pace decisions every `interval` iterations
    patience: int
    wait_fraction: float
    threads: int  # torch CPU threads per stage process
    mps: str  # auto | true | false
    mps_warmup: int
    mps_floor: int
    mps_fixed: Optional[Dict[str, int]]  # fixed SM percentages per stage, or None: measured
    stall_timeout_s: Optional[float]

    @property
    def slots(self) -> int:
        """Slots of the ready queue: one per batch it may hold, one the loader fills, one the
        trainer reads."""
        return self.depth + 2

    @property
    def sampled_slots(self) -> int:
        """Slots of the sampled queue: a sampled slot travels on with its batch until the trainer
        is done with it (stages.py), so as many as the two queues' batches: the ready queue's
        slots, plus one per batch the sampled queue may hold, one the sampler fills and one the
        loader reads."""
        return 2 * (self.depth + 2)

    @classmethod
    def from_config(cls, c) -> "PipelineOptions":
        c = OmegaConf.to_container(c, resolve=True) if not isinstance(c, dict) else c
        pace, mps = c["pace"], c["mps"]
        options = cls(
            depth=_integer(c["depth"], "pipeline.depth", 1),
            superbatch=_integer(c["superbatch"], "pipeline.superbatch", 1, 64),
            interval=_integer(pace["interval"], "pipeline.pace.interval", 1),
            patience=_integer(pace["patience"], "pipeline.pace.patience", 2),
            wait_fraction=_fraction(pace["wait_fraction"], "pipeline.pace.wait_fraction"),
            threads=(max(1, (os.cpu_count() or 1) // 4) if c["threads"] == "auto"
                     else _integer(c["threads"], "pipeline.threads", 1)),
            mps=str(mps["enabled"]).lower(),
            mps_warmup=_integer(mps["warmup"], "pipeline.mps.warmup", 3),
            mps_floor=_integer(mps["floor"], "pipeline.mps.floor", 1, 100),
            mps_fixed=None,
            stall_timeout_s=c["stall_timeout_s"])
        if options.mps not in ("auto", "true", "false"):
            raise ConveyorError(f"pipeline.mps.enabled must be auto, true or false, got {mps.get('enabled')!r}.")
        fixed = {s: mps.get(s) for s in STAGES if mps.get(s) is not None}
        if fixed:
            if set(fixed) != set(STAGES):
                raise ConveyorError("pipeline.mps.sampler and pipeline.mps.loader must be given "
                                    "together (fixed SM percentages), or both left null (measured).")
            options.mps_fixed = {s: _integer(v, f"pipeline.mps.{s}", 1, 100) for s, v in fixed.items()}
        stall = options.stall_timeout_s
        if stall is not None and (isinstance(stall, bool) or not isinstance(stall, (int, float))
                                  or stall <= 0):
            raise ConveyorError(f"pipeline.stall_timeout_s must be > 0 seconds or null (never), "
                                f"got {stall!r}.")
        return options


def _integer(value, key: str, low: int, high: Optional[int] = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low or (high and value > high):
        bound = f"an integer >= {low}" if high is None else f"an integer in [{low}, {high}]"
        raise ConveyorError(f"{key} must be {bound}, got {value!r}.")
    return value


def _fraction(value, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise ConveyorError(f"{key} must be a fraction in [0, 1], got {value!r}.")
    return float(value)
