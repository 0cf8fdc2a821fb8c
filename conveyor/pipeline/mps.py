"""CUDA MPS: is a control daemon serving this machine, and what share of the SMs each stage gets.

Without MPS the CUDA contexts of the three processes time-slice the GPU; with it their kernels
run side by side (TurboGNN). `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`, read once when a process creates
its CUDA context, caps the share of the SMs that process may use, so a stage process is started
with its own value in its environment. A client finds the control daemon through the pipe
directory (CUDA_MPS_PIPE_DIRECTORY, default /tmp/nvidia-mps), where the daemon keeps its `control`
socket; the daemon itself (`nvidia-cuda-mps-control -d`) may run outside this container.
"""
from __future__ import annotations

import logging
import os
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Mapping, Optional

from conveyor.core import ConveyorError
from conveyor.pipeline.settings import MPSSettings

log = logging.getLogger("conveyor")

PIPE_ENV, DEFAULT_PIPE_DIR = "CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps"
PERCENT_ENV = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
DAEMON = "nvidia-cuda-mps-control"


@dataclass
class MPSStatus:
    active: bool
    pipe_dir: str
    daemon_pid: Optional[int]

    def describe(self) -> str:
        daemon = f"control daemon pid {self.daemon_pid}" if self.daemon_pid else "daemon not visible here"
        if self.active:
            return f"CUDA MPS is active (pipe directory {self.pipe_dir}, {daemon})"
        return (f"CUDA MPS is not active (no control socket in {self.pipe_dir}): the stage processes "
                f"time-slice the GPU, and the pace controller works from queue depths alone")


def detect_mps(environ: Mapping[str, str] = os.environ) -> MPSStatus:
    pipe_dir = environ.get(PIPE_ENV) or DEFAULT_PIPE_DIR
    control = Path(pipe_dir) / "control"
    active = control.is_socket() or control.is_fifo()
    return MPSStatus(active, pipe_dir, daemon_pid())


def daemon_pid() -> Optional[int]:
    """The pid of a running `nvidia-cuda-mps-control` visible to this process, if any."""
    import psutil
    for proc in psutil.process_iter(["name"]):
        if proc.info["name"] == DAEMON:
            return proc.pid
    return None


def thread_percentages(stage_seconds: Mapping[str, float], floor: int = 10) -> dict:
    """SM share (percent) per stage from the stages' measured time per batch.

    The pipeline runs at the pace of its slowest stage, so that stage gets the whole GPU (100) and
    every other stage the fraction of it that lets it finish its batch in the same time, assuming
    its time scales with the SMs it gets: a stage needing 30% of the slowest one's time gets 30%.
    The floor keeps a fast stage from being starved by a noisy measurement.
    """
    slowest = max(stage_seconds.values())
    if slowest <= 0:
        return {name: 100 for name in stage_seconds}
    return {name: int(min(100, max(floor, round(100 * t / slowest))))
            for name, t in stage_seconds.items()}


class MPSShares:
    """Each stage process's CUDA MPS share, as `pipeline.mps` says: none (no GPU, no daemon, or
    `enabled=false`), fixed (`mps.sampler` and `mps.loader`), or measured: the stages' times per
    batch over `mps.warmup` batches give `thread_percentages`, and the stages restart with them
    (`restart_due`) at the next `run()`."""

    def __init__(self, device, mps: MPSSettings):
        self.mps = mps
        self.percentages: Dict[str, int] = {}
        self.warmup: Optional[Dict[str, List[float]]] = None  # stage -> seconds per batch, while measuring
        self.restart_due = False
        self._setup(device)

    def _setup(self, device) -> None:
        if device.type != "cuda":
            log.info("pipeline: CPU run, no CUDA MPS; the pace controller works from queue depths alone")
            return
        if self.mps.mode == "false":
            log.info("pipeline: CUDA MPS not used (pipeline.mps.enabled=false); pacing by queue depths alone")
            return
        status = detect_mps()
        if not status.active:
            if self.mps.mode == "true":
                raise ConveyorError(f"pipeline.mps.enabled=true but {status.describe()}. Start the daemon with "
                                    f"`nvidia-cuda-mps-control -d` (and the same CUDA_MPS_PIPE_DIRECTORY), or "
                                    f"set pipeline.mps.enabled=auto.")
            log.info("pipeline: %s", status.describe())
        elif self.mps.fixed:
            self.percentages = dict(self.mps.fixed)
            log.info("pipeline: %s; SM shares from the config: %s", status.describe(), self.percentages)
        else:
            self.warmup = {"sampler": [], "loader": [], "trainer": []}
            log.info("pipeline: %s; SM shares will be chosen from %d warm-up iterations", status.describe(),
                     self.mps.warmup)

    def measure(self, sample_s: float, gather_s: float, train_s: float) -> Optional[Dict[str, int]]:
        """One warm-up batch's stage times; after the last, the shares chosen (else None)."""
        w = self.warmup
        if w is None:
            return None
        for stage, seconds in (("sampler", sample_s), ("loader", gather_s), ("trainer", train_s)):
            w[stage].append(seconds)
        if len(w["trainer"]) < self.mps.warmup:
            return None
        times = {s: statistics.median(v[2:]) for s, v in w.items()}  # the first batches warm up
        shares = thread_percentages(times, self.mps.floor)
        self.percentages = {s: shares[s] for s in ("sampler", "loader")}
        self.warmup, self.restart_due = None, True
        log.info("pipeline MPS: warm-up time per batch %s -> SM shares sampler %d%%, loader %d%% (the trainer "
                 "keeps its whole share: its CUDA context exists already); the stage processes restart with "
                 "them at the next epoch or evaluation", ", ".join(f"{s} {1e3 * t:.1f} ms" for s, t in times.items()),
                 shares["sampler"], shares["loader"])
        return shares
