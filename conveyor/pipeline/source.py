"""`AsyncBatches`: the batch source of `pipeline=async` (TurboGNN, PaGraph).

    trainer (this process) --jobs--> sampler process --sampled--> loader process --ready--> trainer

While the trainer computes batch i, the loader gathers batch i+1 and the sampler samples batch i+2
(or further ahead, as the pace controller allows). `run(seed_batches, sampler_seed)` yields
exactly the PreparedBatches SerialBatches would, in the same order: one sampler process, reseeded
per run, and FIFO queues. So the same seed gives the same losses in both modes.

A PreparedBatch here is a set of views into two recycled slots of the pipeline (slots.py): n_id
and the edges in the sampler's, x and y in the loader's, each written there once (stages.py).
Both slots go back to their producers once the trainer has dropped every tensor of the batch
(transport.py). A caller that keeps batches must copy them; one that keeps all of them at once
gets an error, not a hang.

The class ties the pipeline's parts together, one job each: the processes and queues
(processes.py), faults and stalls (watch.py), the batch transport (transport.py), statistics,
TensorBoard and pacing (monitor.py), CUDA MPS shares (mps.py).
"""
from __future__ import annotations

import logging
import os
import time
import warnings
from multiprocessing import resource_tracker
from pathlib import Path
from typing import Iterator, List, Optional

import torch
from torch import Tensor

from conveyor.pipeline.batch import WARMUP_BATCHES, PreparedBatch
from conveyor.pipeline.guard import check_main_guard
from conveyor.pipeline.memory import BatchPeak
from conveyor.pipeline.monitor import PipelineMonitor, Scalars
from conveyor.pipeline.mps import MPSShares
from conveyor.pipeline.phases import check_phase, series
from conveyor.pipeline.processes import QUEUES, StageProcesses
from conveyor.pipeline.room import PipelineRoom
from conveyor.pipeline.settings import PipelineSettings
from conveyor.pipeline.sharing import share_graph
from conveyor.pipeline.shm import object_tensors, shm_shortfall
from conveyor.pipeline.shutdown import SEMAPHORE_PREFIX, signals_held
from conveyor.pipeline.stages import BatchMessage, LoaderWork, SamplerWork
from conveyor.pipeline.transport import BatchReceiver
from conveyor.pipeline.watch import PipelineError, StageWatch

log = logging.getLogger("conveyor")

__all__ = ["AsyncBatches", "PipelineError"]


class AsyncBatches:
    """Sampler and loader processes feeding this (the trainer's) process; see the module doc and
    `conveyor.pipeline.batch_source` for the arguments."""

    def __init__(self, graph, sampler, features, device, settings: PipelineSettings, batch_ratio: float = 1.0,
                 recorder=None, attributes=None, batch_size: Optional[int] = None):
        check_main_guard(parts=(sampler, features, attributes))  # before anything is spawned (guard.py)
        self.settings = settings
        self.device = torch.device(device)
        # /dev/shm's room for all the pipeline places there, before anything is (shm.py); the
        # slots again before each run, once its batch sizes are known (`batch_size`: now)
        self.room = PipelineRoom.of(graph, sampler, features, self.device, settings, batch_ratio, attributes)
        self.graph = share_graph(graph, self.room.start_need(batch_size),
                                 carried=[t for part in (sampler, features, attributes) for t in object_tensors(part)])
        positions = attributes is not None and getattr(attributes, "needs_edges", True)
        self.work = {"sampler": SamplerWork(sampler, settings.superbatch, positions),
                     "loader": LoaderWork(features, batch_ratio, settings.slots, settings.sampled_slots, attributes)}
        self.mps = MPSShares(self.device, settings.mps)
        self.scalars = Scalars(recorder)
        self.monitor = PipelineMonitor(settings, self.scalars)
        self.peak = BatchPeak(self.device)
        self.job = 0
        self._closed = False
        self._start()

    def _start(self) -> None:
        try:
            self.stages = StageProcesses(self.graph, self.device, self.settings, self.work, self.mps.percentages)
        except OSError as error:  # a queue's semaphore in a /dev/shm filled since the check
            paragraph = shm_shortfall(error)
            if paragraph is None:
                raise
            raise paragraph from None
        self.watch = StageWatch(self.stages, self.settings.stall_timeout_s)
        self.receiver = BatchReceiver(self.stages, self.watch, self.settings.slots)
        self.monitor.watch(self.stages.control)
        self.monitor.percentages = self.mps.percentages

    @property
    def semaphores(self) -> list:
        """The names of the named semaphores of the stage processes' queues (shutdown.py)."""
        return self.stages.semaphores

    @property
    def processes(self) -> dict:
        """The stage processes by name (sampler, loader)."""
        return self.stages.processes

    def close(self) -> None:
        """Stop the stage processes (also after an error or an interrupt); idempotent."""
        with signals_held():
            if self._closed:
                return
            self._closed = True
            self.stages.stop()
            relaunch_dead_resource_tracker()
        s = self.stats()
        if s["batches"]:
            log.info("pipeline: %d batches, trainer waited %.1f%% of the time, IPC %.2f ms a batch "
                     "(%.2f%% of an iteration)", s["batches"], 100 * s["trainer_wait_fraction"],
                     1e3 * s["ipc_s_per_batch"], 100 * s["ipc_fraction"])

    def __enter__(self) -> "AsyncBatches":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def stats(self) -> dict:
        """Totals over every run so far (the benchmark reads them)."""
        return self.monitor.stats()

    def run(self, seed_batches: List[Tensor], sampler_seed: int, phase: str = "train") -> Iterator[PreparedBatch]:
        """The prepared batches of `seed_batches`, in order (the sampler is reseeded first).
        `phase` (pipeline/phases.py: "train", "eval", "layerwise", "layerwise-hidden") picks the
        sampler and whether features are gathered, and the TensorBoard series: `pipeline/` for
        training batches, stepped like `batch/loss`, and `pipeline_eval/` with its own step."""
        if self._closed:
            raise RuntimeError("AsyncBatches.run() called after close()")
        if self.mps.restart_due:
            self.mps.restart_due = False
            log.debug("pipeline: restarting the stage processes with their MPS SM shares")
            self.stages.stop()
            self._start()
        self.room.check_run(seed_batches, check_phase(phase), held=slot_bytes_held(self.receiver))
        self.job += 1
        self.scalars.phase = series(phase)
        self.stages.submit(self.job, seed_batches, sampler_seed, phase)
        return self._batches(self.job, len(seed_batches))

    def _batches(self, job: int, count: int) -> Iterator[PreparedBatch]:
        last = time.perf_counter()
        for index in range(count):
            if job != self.job:
                raise RuntimeError("this run() was abandoned: a later run() call replaced it (the "
                                   "pipeline serves one run at a time)")
            depths = {q: self.stages.control.depth(q) for q in QUEUES}  # what waits as the trainer asks
            message, waited = self._receive(job)
            if message.index != index:
                raise PipelineError(f"pipeline: batch {message.index} arrived where batch {index} "
                                    f"was due; the stages lost their order (a bug).")
            start = time.perf_counter()
            batch, held_bytes = self._prepared(message)
            ipc_s = message.cost.ipc_s + time.perf_counter() - start
            given = time.perf_counter()
            self.peak.start()  # before the first batch trains (later calls do nothing)
            yield batch
            del batch
            self._trained(message, depths, waited, ipc_s, time.perf_counter() - given, held_bytes)
            now = time.perf_counter()  # wall time per batch: a run left half-way counts right
            self.monitor.totals["wall_s"] += now - last
            last = now
        if count >= self.settings.pace.interval:
            self.monitor.log_run(count)

    def _receive(self, job: int) -> tuple[BatchMessage, float]:
        try:
            return self.receiver.receive(job)
        except PipelineError as error:  # a stage's slot found /dev/shm full all the same
            paragraph = shm_shortfall(error)
            if paragraph is None:
                raise
            raise paragraph from None

    def _prepared(self, message: BatchMessage) -> tuple[PreparedBatch, int]:
        """The batch of `message` as views of its slots, leased until its tensors are gone."""
        views = self.receiver.unpack(message)
        batch = PreparedBatch.from_views(views, message.counts, message.cost)
        self.receiver.lease([(q, slot) for q, (slot, _) in message.slots.items()], list(views.values()))
        return batch, sum(v.numel() * v.element_size() for v in views.values())

    def _trained(self, message: BatchMessage, depths: dict, waited: float, ipc_s: float, train_s: float,
                 held_bytes: int) -> None:
        """The trainer is done with a batch: tell the loader the memory a training batch took
        (before the WARMUP_BATCHES-th counts as trained: an auto cache is sized then), count it,
        measure it."""
        control = self.stages.control
        if control["trained"] + 1 == WARMUP_BATCHES:
            control["batch_bytes"] = self.peak.bytes()
        control.add("trained")
        shares = self.mps.measure(message.cost.sample_s, message.cost.gather_s, train_s)
        if shares:
            self.monitor.percentages = self.mps.percentages
            for stage, percent in shares.items():
                self.scalars.add(f"mps_percent/{stage}", percent)
        self.monitor.account(message, depths, waited, ipc_s, train_s, held_bytes)


def slot_bytes_held(receiver: BatchReceiver) -> int:
    """What the slots of both queues hold now: on the CPU every buffer reaches the trainer."""
    return sum(b.numel() * b.element_size() for r in receiver.readers.values() for b in r.buffers.values())


def relaunch_dead_resource_tracker() -> None:
    """multiprocessing's resource tracker (a process of its own) unlinks this process's named
    semaphores should it die. Killed (by a user, an OOM killer), it is relaunched empty at the
    next unregister, and every semaphore this process then unlinks (the queues', as they are
    dropped) is a KeyError traceback in it. So once the queues are closed, a dead tracker is
    relaunched here, quietly, and told again of the semaphores this process still has
    (/dev/shm/sem.mp-conveyor-<pid>-*, shutdown.py)."""
    tracker = resource_tracker._resource_tracker
    pid = getattr(tracker, "_pid", None)
    if pid is None:
        return
    try:
        if os.waitpid(pid, os.WNOHANG) == (0, 0):
            return  # alive
    except ChildProcessError:
        pass  # reaped already: dead
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "process died unexpectedly, relaunching": it is known here
        tracker.ensure_running()
    for path in Path("/dev/shm").glob(f"sem.{SEMAPHORE_PREFIX}{os.getpid()}-*"):
        resource_tracker.register("/" + path.name[len("sem."):], "semaphore")
