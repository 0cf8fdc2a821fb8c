"""`pipeline.*` options (conf/pipeline/async.yaml), checked once with a clear error each."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Dict, Optional

from omegaconf import OmegaConf

from partition import ConveyorError

STAGES = ("sampler", "loader")


@dataclass
class PipelineOptions:
    depth: int = 4  # most batches a producer may have waiting in its queue (the memory bound)
    superbatch: int = 4  # batches the sampler draws per call (one fused launch for all of them)
    interval: int = 10
    patience: int = 5
    wait_fraction: float = 0.05
    threads: int = 1
    mps: str = "auto"  # auto | true | false
    mps_warmup: int = 20
    mps_floor: int = 10
    mps_fixed: Optional[Dict[str, int]] = None
    stall_timeout_s: Optional[float] = 600.0

    @classmethod
    def from_config(cls, c) -> "PipelineOptions":
        c = OmegaConf.to_container(c, resolve=True) if not isinstance(c, dict) else c
        pace, mps = c.get("pace") or {}, c.get("mps") or {}
        threads = c.get("threads", "auto")
        options = cls(
            depth=_integer(c.get("depth", 4), "pipeline.depth", 1),
            superbatch=_integer(c.get("superbatch", 4), "pipeline.superbatch", 1, 64),
            interval=_integer(pace.get("interval", 10), "pipeline.pace.interval", 1),
            patience=_integer(pace.get("patience", 5), "pipeline.pace.patience", 2),
            wait_fraction=_fraction(pace.get("wait_fraction", 0.05), "pipeline.pace.wait_fraction"),
            threads=(max(1, (os.cpu_count() or 1) // 4) if threads == "auto"
                     else _integer(threads, "pipeline.threads", 1)),
            mps=str(mps.get("enabled", "auto")).lower(),
            mps_warmup=_integer(mps.get("warmup", 20), "pipeline.mps.warmup", 3),
            mps_floor=_integer(mps.get("floor", 10), "pipeline.mps.floor", 1, 100),
            stall_timeout_s=c.get("stall_timeout_s", 600.0))
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
