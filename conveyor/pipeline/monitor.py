"""What the trainer's process measures of the async pipeline, batch by batch: the totals that
`AsyncBatches.stats()` reports, the TensorBoard scalars under `pipeline/` (`pipeline_eval/` for
evaluation batches), and every `pace.interval` batches the pace controller's decisions (pace.py),
which it writes into the control block the stages read their limits from.
"""
from __future__ import annotations

import logging
import time
from typing import Dict

from conveyor.pipeline.control import Control
from conveyor.pipeline.pace import PaceController
from conveyor.pipeline.processes import QUEUES
from conveyor.pipeline.settings import STAGES, PipelineSettings
from conveyor.pipeline.stages import BatchMessage

log = logging.getLogger("conveyor")

TOTALS = ("batches", "trainer_wait_s", "ipc_s", "sample_s", "gather_s", "train_s", "wall_s", "slot_bytes",
          "batch_bytes")


class Scalars:
    """The pipeline's TensorBoard series: `pipeline/` for training batches, stepped like
    `batch/loss`, and `pipeline_eval/` for evaluation batches, with their own step."""

    def __init__(self, recorder=None):
        self.recorder, self.phase = recorder, "train"
        self.steps = {"train": 0, "eval": 0}  # batches served per phase

    def add(self, tag: str, value: float) -> None:
        if self.recorder is not None:
            prefix = "pipeline/" if self.phase == "train" else "pipeline_eval/"
            self.recorder.scalar(prefix + tag, value, self.steps[self.phase])


class PipelineMonitor:
    def __init__(self, settings: PipelineSettings, scalars: Scalars):
        self.settings, self.scalars = settings, scalars
        self.totals: Dict[str, float] = dict.fromkeys(TOTALS, 0)
        self.pace = None
        self.percentages: Dict[str, int] = {}  # the stages' MPS shares, to plot beside the pace
        self.control = None
        self._window = (time.perf_counter(), {}, 0.0, 0.0)

    def watch(self, control: Control) -> None:
        """Measure the stages through `control`, and pace them from their limits, `depth` (a
        fresh control block, and so a fresh controller, each time the stages start)."""
        self.control = control
        self.pace = PaceController(QUEUES, self.settings.depth, self.settings.pace)
        self._window = (time.perf_counter(), control.snapshot(), 0.0, 0.0)

    def account(self, message: BatchMessage, depths: dict, waited: float, ipc_s: float, train_s: float,
                held_bytes: int) -> None:
        """One batch the trainer finished with: its costs, the queue depths when it was asked for,
        how long the trainer waited; a pace decision when one is due."""
        t, cost = self.totals, message.cost
        for key, value in (("batches", 1), ("slot_bytes", cost.slot_bytes), ("batch_bytes", held_bytes),
                           ("trainer_wait_s", waited), ("ipc_s", ipc_s), ("sample_s", cost.sample_s),
                           ("gather_s", cost.gather_s), ("train_s", train_s)):
            t[key] += value
        for tag, value in (("queue/sampled", depths["sampled"]), ("queue/ready", depths["ready"]),
                           ("trainer_wait_ms", 1e3 * waited), ("ipc_ms", 1e3 * ipc_s)):
            self.scalars.add(tag, value)
        start, snap, wait_sum, train_sum = self._window
        self._window = (start, snap, wait_sum + waited, train_sum + train_s)
        if self.pace.observe(depths):
            self.decide()
        self.scalars.steps[self.scalars.phase] += 1

    def decide(self) -> None:
        """The pace controller's decisions over the window since the last: each queue's consumer
        wait and producer pace fractions; the stage times per batch go to TensorBoard."""
        start, before, trainer_wait, train_s = self._window
        now, after = time.perf_counter(), self.control.snapshot()
        wall = max(now - start, 1e-9)
        delta = {k: after[k] - before[k] for k in after}
        waited = {"ready": trainer_wait / wall, "sampled": delta["loader_wait_ns"] / 1e9 / wall}
        paced = {"ready": delta["loader_pace_ns"] / 1e9 / wall, "sampled": delta["sampler_pace_ns"] / 1e9 / wall}
        for d in self.pace.decide(waited, paced):
            self.control[f"limit_{d.queue}"] = d.new
            log.debug("pipeline pace: %s queue limit %d -> %d (%s)", d.queue, d.old, d.new, d.reason)
        per_batch = {"sampler": delta["sampler_busy_ns"] / 1e9 / max(delta["sampled"], 1),
                     "loader": delta["loader_busy_ns"] / 1e9 / max(delta["loaded"], 1),
                     "trainer": train_s / max(delta["ready_taken"], 1)}
        self.plot(per_batch, waited, {s: delta[f"{s}_pace_ns"] / 1e9 / wall for s in STAGES})
        self._window = (now, after, 0.0, 0.0)

    def plot(self, per_batch: dict, waited: dict, paced: dict) -> None:
        for stage, seconds in per_batch.items():
            self.scalars.add(f"stage_ms/{stage}", 1e3 * seconds)
            self.scalars.add(f"throughput/{stage}", 1 / seconds if seconds > 0 else 0.0)
        for q in QUEUES:
            self.scalars.add(f"limit/{q}", self.pace.limits[q])
            self.scalars.add(f"wait_fraction/{q}", waited[q])
        for stage in STAGES:
            self.scalars.add(f"paced_fraction/{stage}", paced[stage])
        for stage, percent in self.percentages.items():
            self.scalars.add(f"mps_percent/{stage}", percent)

    def log_run(self, count: int) -> None:
        c = self.control.snapshot()
        log.debug("pipeline: %d batches; queue limits sampled %d, ready %d; stage busy: sampler "
                  "%.1fs, loader %.1fs; loader waited %.1fs, sampler/loader held back %.1fs/%.1fs",
                  count, c["limit_sampled"], c["limit_ready"], c["sampler_busy_ns"] / 1e9,
                  c["loader_busy_ns"] / 1e9, c["loader_wait_ns"] / 1e9, c["sampler_pace_ns"] / 1e9,
                  c["loader_pace_ns"] / 1e9)

    def stats(self) -> dict:
        """Totals over every run so far (the benchmark reads them)."""
        t = self.totals
        n = max(t["batches"], 1)
        iteration = t["wall_s"] / n
        return {"batches": t["batches"], "trainer_wait_s": t["trainer_wait_s"],
                "trainer_wait_fraction": t["trainer_wait_s"] / max(t["wall_s"], 1e-9),
                "ipc_s_per_batch": t["ipc_s"] / n, "ipc_fraction": t["ipc_s"] / n / max(iteration, 1e-9),
                "sample_s_per_batch": t["sample_s"] / n, "gather_s_per_batch": t["gather_s"] / n,
                "train_s_per_batch": t["train_s"] / n, "iteration_s": iteration,
                "slot_bytes_per_batch": t["slot_bytes"] / n, "batch_bytes_per_batch": t["batch_bytes"] / n,
                "bytes_written_ratio": t["slot_bytes"] / max(t["batch_bytes"], 1),
                "limits": dict(self.pace.limits), "mps_percent": dict(self.percentages)}
