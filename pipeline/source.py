"""`AsyncBatches`: the batch source of `pipeline=async` (TurboGNN, PaGraph).

    trainer (this process) --jobs--> sampler process --sampled--> loader process --ready--> trainer

While the trainer computes batch i, the loader gathers batch i+1 and the sampler samples batch
i+2 (or further ahead, as the pace controller allows). `run(seed_batches, sampler_seed)` yields
exactly the PreparedBatches SerialBatches would, in the same order: one sampler process, reseeded
per run, and FIFO queues. So the same seed gives the same losses in both modes.

A PreparedBatch here is a set of views into two recycled slots of the pipeline (slots.py): n_id
and the edges in the sampler's, x and y in the loader's, each written there once (stages.py).
Both slots go back to their producers once the trainer has dropped every tensor of the batch (on
CUDA with no host sync: `_return_buffers`). A caller that keeps batches must copy them; one that
keeps all of them at once gets an error, not a hang.

Faults: a stage that raises or dies ends the run with a PipelineError holding its traceback (or
how it died) within a poll interval; every wait polls the other processes, and close() stops
everything in bounded time (shutdown.py).
"""
from __future__ import annotations

import gc
import logging
import os
import queue
import statistics
import time
import weakref
from collections import deque
from typing import Dict, Iterator, List, Optional

import torch
import torch.multiprocessing as mp
from torch import Tensor

from conveyor.partition import ConveyorError
from conveyor.samplers import SampledBatch

from .batch import WARMUP_BATCHES, PreparedBatch
from .control import Control
from .memory import BatchPeak
from .mps import PERCENT_ENV, detect_mps, thread_percentages
from .pace import PaceController
from .settings import STAGES, PipelineSettings
from .sharing import share_graph
from .shutdown import (
    describe_exit,
    in_main_thread,
    semaphores_named_after_this_process,
    signals_held,
    spawning,
    stop_processes,
)
from .slots import ReleaseEvents, SlotReader
from .stages import POLL_S, BatchMessage, LoaderWork, SamplerWork, StageSpec, stage_main

log = logging.getLogger("conveyor")

QUEUES = ("sampled", "ready")
STALL_WARN_S = 60.0
DEATH_GRACE_S = 2.0  # how long a stage's death or error report may lag behind its effects


class PipelineError(RuntimeError):
    """A stage process failed or stalled; the message says which, and holds its traceback."""


class AsyncBatches:
    """Sampler and loader processes feeding this (the trainer's) process; see the module doc."""

    def __init__(self, graph, sampler, features, device, settings: PipelineSettings, batch_ratio: float = 1.0,
                 recorder=None):
        self.options = settings
        self.device = torch.device(device)
        self.recorder = recorder
        self.graph = share_graph(graph)
        self.work = {"sampler": SamplerWork(sampler, settings.superbatch),
                     "loader": LoaderWork(features, batch_ratio, settings.slots, settings.sampled_slots)}
        self.percentages: Dict[str, int] = {}
        self._warmup: Optional[Dict[str, List[float]]] = None  # stage -> seconds per batch
        self._restart_due = False
        self._setup_mps()
        self.job = 0
        self.steps = {"train": 0, "eval": 0}  # batches served per phase: the TensorBoard steps
        self.phase = "train"
        self.totals = {"batches": 0, "trainer_wait_s": 0.0, "ipc_s": 0.0, "sample_s": 0.0,
                       "gather_s": 0.0, "train_s": 0.0, "wall_s": 0.0, "slot_bytes": 0, "batch_bytes": 0}
        self.peak = BatchPeak(self.device)
        self._closed = False
        self._start()

    # -- processes ------------------------------------------------------------------------------
    def _start(self) -> None:
        ctx = mp.get_context("spawn")  # CUDA cannot be used in a forked child
        o = self.options
        self.control = Control()
        self.control["limit_sampled"] = self.control["limit_ready"] = o.depth
        self.slots = o.slots  # of the ready queue: the batches the trainer may hold
        with semaphores_named_after_this_process():  # a killed run's are then swept by name
            self.jobs, self.sampled, self.ready = ctx.Queue(), ctx.Queue(), ctx.Queue()
            self.free = {"sampled": ctx.Queue(), "ready": ctx.Queue()}
            self.sampler_buffers = ctx.Queue()  # the sampler's grown buffers, (slot, {name: buffer})
            self.events = ctx.SimpleQueue()
        counts = {"sampled": o.sampled_slots, "ready": o.slots}
        for q, count in counts.items():
            for slot in range(count):
                self.free[q].put(slot)
        self.release_events = {q: ReleaseEvents(self.device, count) for q, count in counts.items()}
        self.readers = {q: SlotReader() for q in QUEUES}
        self._sampler_grown = 0  # grown sampled buffers read from sampler_buffers
        self._released: deque = deque()  # per batch the trainer is done with: its (queue, slot)s
        self._handed = self._returned = 0
        self.pace = PaceController(QUEUES, o.depth, o.pace.interval, o.pace.patience, o.pace.wait_fraction)
        self._window = (time.perf_counter(), self.control.snapshot(), 0.0, 0.0)
        links = {"sampler": (self.jobs, self.sampled, self.free["sampled"], None, self.sampler_buffers,
                             self.release_events["sampled"].handles()),
                 "loader": (self.sampled, self.ready, self.free["ready"], self.free["sampled"], None,
                            self.release_events["ready"].handles())}
        self.processes = {}
        self._ready: Dict[str, float] = {}
        self._started = time.perf_counter()
        for name in STAGES:
            inbox, outbox, free_slots, inbox_free, grown_out, release_events = links[name]
            spec = StageSpec(name, os.getpid(), self.control, self.events, inbox, outbox, free_slots,
                             inbox_free, grown_out, release_events, self.graph, str(self.device),
                             o.stage_threads, self.work[name], die_with_parent=in_main_thread())
            env = {PERCENT_ENV: str(self.percentages[name])} if name in self.percentages else {}
            proc = self.processes[name] = ctx.Process(target=stage_main, args=(spec,),
                                                      name=f"conveyor-{name}", daemon=True)
            with spawning(env):
                proc.start()
        shares = (", SM shares " + ", ".join(f"{s} {p}%" for s, p in self.percentages.items())
                  if self.percentages else "")
        log.debug("pipeline: sampler (pid %d) and loader (pid %d) processes started; up to %d "
                 "batches ahead per queue, %d torch threads per stage%s",
                 self.processes["sampler"].pid, self.processes["loader"].pid, o.depth, o.stage_threads,
                 shares)

    def _stop(self) -> None:
        self.control["stop"] = 1
        stop_processes(self.processes.values())
        for q in (self.jobs, self.sampled, self.ready, *self.free.values(), self.sampler_buffers):
            q.cancel_join_thread()  # what is still buffered has no reader any more
            q.close()
        self.events.close()
        self.readers = {q: SlotReader() for q in QUEUES}

    def close(self) -> None:
        """Stop the stage processes (also after an error or an interrupt); idempotent."""
        with signals_held():
            if self._closed:
                return
            self._closed = True
            self._stop()
        s = self.stats()
        if s["batches"]:
            log.info("pipeline: %d batches, trainer waited %.1f%% of the time, IPC %.2f ms a batch "
                     "(%.2f%% of an iteration)", s["batches"], 100 * s["trainer_wait_fraction"],
                     1e3 * s["ipc_s_per_batch"], 100 * s["ipc_fraction"])

    def __enter__(self) -> "AsyncBatches":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- the batch stream -----------------------------------------------------------------------
    def run(self, seed_batches: List[Tensor], sampler_seed: int, phase: str = "train") -> Iterator[PreparedBatch]:
        """The prepared batches of `seed_batches`, in order (the sampler is reseeded first).
        `phase` ("train" or "eval") picks the TensorBoard series: `pipeline/` for training
        batches, stepped like `batch/loss`, and `pipeline_eval/` with its own step."""
        if self._closed:
            raise RuntimeError("AsyncBatches.run() called after close()")
        if self._restart_due:
            self._restart_due = False
            log.debug("pipeline: restarting the stage processes with their MPS SM shares")
            self._stop()
            self._start()
        self.job += 1
        self.phase = phase
        self.control["job"] = self.job  # the stages drop what is left of an earlier job
        sizes = [int(s.numel()) for s in seed_batches]
        seeds = torch.cat(list(seed_batches)) if sizes else torch.empty(0, dtype=torch.long)
        self.jobs.put((self.job, seeds, sizes, int(sampler_seed)))
        return self._batches(self.job, len(sizes))

    def _batches(self, job: int, count: int) -> Iterator[PreparedBatch]:
        last = time.perf_counter()
        for index in range(count):
            if job != self.job:
                raise RuntimeError("this run() was abandoned: a later run() call replaced it (the "
                                   "pipeline serves one run at a time)")
            depths = {q: self.control.depth(q) for q in QUEUES}  # what waits as the trainer asks
            message, waited = self._receive(job)
            if message.index != index:
                raise PipelineError(f"pipeline: batch {message.index} arrived where batch {index} "
                                    f"was due; the stages lost their order (a bug).")
            start = time.perf_counter()
            views = self._unpack(message)
            batch = PreparedBatch(SampledBatch.from_tensors(views, message.counts), views["x"], views["y"],
                                  message.cost)
            self._lease([(q, slot) for q, (slot, _) in message.slots.items()], list(views.values()))
            held_bytes = sum(v.numel() * v.element_size() for v in views.values())
            del views
            ipc_s = message.cost.ipc_s + time.perf_counter() - start
            given = time.perf_counter()
            self.peak.start()  # before the first batch trains (later calls do nothing)
            yield batch
            del batch
            train_s = time.perf_counter() - given
            self._measure_batch_memory()
            self.control.add("trained")
            self._account(message, depths, waited, ipc_s, train_s, held_bytes)
            now = time.perf_counter()  # wall time per batch: a run left half-way counts right
            self.totals["wall_s"] += now - last
            last = now
        if count >= self.options.pace.interval:
            self._log_run(count)

    def _measure_batch_memory(self) -> None:
        """Before the WARMUP_BATCHES-th batch counts as trained, tell the loader (which sizes an
        auto cache then) how much device memory a training batch took here."""
        if self.control["trained"] + 1 == WARMUP_BATCHES:
            self.control["batch_bytes"] = self.peak.bytes()

    def _receive(self, job: int) -> tuple[BatchMessage, float]:
        """The next ready batch of `job` and how long the trainer waited for it."""
        start = last_warning = time.perf_counter()
        while True:
            self._return_buffers()
            self._check_stages()
            message = self._take(self.ready, "a batch from the loader")
            if message is None:
                self._check_held()
                now = time.perf_counter()
                self._check_stall(start)  # every poll: a timeout below STALL_WARN_S holds too
                if now - last_warning > STALL_WARN_S:
                    last_warning = now
                    self._warn_stall(now - start)
                continue
            self.control.add("ready_taken")
            if message.job == job:
                return message, time.perf_counter() - start
            for q, (slot, packed) in message.slots.items():  # it may bring grown buffers
                self.readers[q].receive(slot, packed["grown"])
            for q, (s, _) in message.slots.items():  # left over from a job the trainer stopped
                self.free[q].put(s)  # reading, and never read here: both its slots go back

    def _take(self, q, what: str):
        """The next item of `q`, or None after a poll interval without one."""
        try:
            return q.get(timeout=POLL_S)
        except queue.Empty:
            return None
        except Exception as error:  # unpickling failed: most likely the sender just died
            deadline = time.perf_counter() + DEATH_GRACE_S
            while time.perf_counter() < deadline:  # the kernel may not have reaped it yet
                self._check_stages()
                time.sleep(0.02)
            raise PipelineError(f"pipeline: receiving {what} failed: {error!r}")

    def _unpack(self, message: BatchMessage) -> Dict[str, Tensor]:
        """Views of the batch's tensors in its two slots, once the sampler's grown buffers it
        needs have arrived (on their own queue: see stages.py). The batch's message can overtake
        them (each queue has its own feeder thread in the sampler), so a sampler that stops after
        sending its message is a stall here too."""
        start = time.perf_counter()
        while self._sampler_grown < message.sampler_grown:
            item = self._take(self.sampler_buffers, "a buffer from the sampler")
            if item is None:
                self._check_stages()
                self._check_stall(start)
                continue
            self.readers["sampled"].receive(*item)
            self._sampler_grown += 1
        views = {}
        for q, (slot, packed) in message.slots.items():
            views.update(self.readers[q].unpack(slot, packed))
        return views

    def _lease(self, slots: List[tuple], views: List[Tensor]) -> None:
        """Give the batch's `slots` ((queue, slot) pairs) back once every view of them is gone."""
        released, pending = self._released, [len(views)]

        def drop():
            pending[0] -= 1
            if pending[0] == 0:
                released.append(slots)

        for view in views:
            weakref.finalize(view, drop).atexit = False
        self._handed += 1

    def _return_buffers(self) -> None:
        """Put the released slots on their producers' free queues. On CUDA the trainer's kernels
        may still be reading them: each slot's release event is recorded on the trainer's stream
        first, after every kernel queued so far (the batch's tensors are gone, so no later kernel
        reads them), and the producer's stream waits on it before rewriting the slot
        (Stage.acquire). Neither side waits on the host. On the CPU the reads are done."""
        while self._released:
            for q, slot in self._released.popleft():
                self.release_events[q].release(slot)
                self.free[q].put(slot)
            self._returned += 1

    def _check_held(self) -> None:
        if self._handed - self._returned < self.slots:
            return
        gc.collect()  # a reference cycle may be all that holds them
        self._return_buffers()
        if self._handed - self._returned >= self.slots:
            raise ConveyorError(
                f"the trainer holds all {self.slots} prepared batches the async pipeline can have "
                f"in flight, so the loader cannot prepare another. The pipeline reuses each "
                f"batch's buffers once its tensors are dropped: copy batches you keep "
                f"(e.g. x.clone()), or raise pipeline.depth, or use pipeline=serial.")

    # -- faults ---------------------------------------------------------------------------------
    def _check_stages(self) -> None:
        """Raise a PipelineError (or a stage's ConveyorError) if a stage failed or died. A stage
        that died without a word (killed) is the cause of whatever the other one then reports."""
        errors = self._read_events()
        dead = [name for name, proc in self.processes.items() if proc.exitcode is not None]
        if not errors and not dead:
            return
        deadline = time.perf_counter() + DEATH_GRACE_S
        while set(dead) - set(errors) and time.perf_counter() < deadline:
            time.sleep(0.02)  # a dying stage's traceback may still be on the way
            errors.update(self._read_events())
        silent = [name for name in dead if name not in errors]
        if silent:
            proc = self.processes[silent[0]]
            raise PipelineError(
                f"pipeline: the {silent[0]} stage (process {proc.pid}) "
                f"{describe_exit(proc.exitcode)} without reporting an error; the run is stopped. "
                f"Its own output above, if any, says more.")
        stage, (pid, type_name, is_conveyor_error, message, trace) = next(iter(errors.items()))
        if is_conveyor_error:  # bad input found by a stage: the user's message, as is
            raise ConveyorError(message)
        raise PipelineError(
            f"pipeline: the {stage} stage (process {pid}) raised {type_name}: {message}\n\n"
            f"Its traceback:\n{trace.rstrip()}\n\nThe run is stopped. pipeline=serial runs the "
            f"same stages in this process, which may make the cause easier to debug.")

    def _read_events(self) -> dict:
        """Log the stages' news; return the errors they reported, by stage."""
        errors = {}
        while not self.events.empty():
            kind, stage, *payload = self.events.get()
            if kind == "ready":
                pid, what = payload
                self._ready[stage] = time.perf_counter() - self._started
                log.debug("pipeline: %s (pid %d) ready after %.1fs: %s", stage, pid,
                         self._ready[stage], what)
            elif kind == "log":
                log.debug("pipeline %s: %s", stage, payload[0])
            elif kind == "error":
                errors[stage] = payload
        return errors

    def _stall_state(self) -> str:
        c = self.control.snapshot()
        return (f"sampled {c['sampled']}, loaded {c['loaded']}, taken {c['ready_taken']}; "
                f"queue depths {c['sampled'] - c['sampled_taken']} and {c['loaded'] - c['ready_taken']}")

    def _check_stall(self, wait_start: float) -> None:
        """Stop the run after stall_timeout_s without a batch, counted from when the trainer began
        to wait or the last stage became ready: a stage still starting is not stalled."""
        limit = self.options.stall_timeout_s
        if limit is None or len(self._ready) < len(STAGES):
            return
        waited = time.perf_counter() - max(wait_start, self._started + max(self._ready.values()))
        if waited > float(limit):
            raise PipelineError(f"pipeline: no batch for {waited:.0f}s although every stage is "
                                f"alive ({self._stall_state()}); the run is stopped "
                                f"(pipeline.stall_timeout_s={limit}).")

    def _warn_stall(self, waited: float) -> None:
        log.warning("pipeline: waiting for a batch for %.0fs (%s)", waited, self._stall_state())

    # -- pacing, MPS, logging -------------------------------------------------------------------
    def _setup_mps(self) -> None:
        o = self.options
        if self.device.type != "cuda":
            log.info("pipeline: CPU run, no CUDA MPS; the pace controller works from queue depths alone")
            return
        if o.mps.mode == "false":
            log.info("pipeline: CUDA MPS not used (pipeline.mps.enabled=false); pacing by queue depths alone")
            return
        status = detect_mps()
        if not status.active:
            if o.mps.mode == "true":
                raise ConveyorError(f"pipeline.mps.enabled=true but {status.describe()}. Start the "
                                    f"daemon with `nvidia-cuda-mps-control -d` (and the same "
                                    f"CUDA_MPS_PIPE_DIRECTORY), or set pipeline.mps.enabled=auto.")
            log.info("pipeline: %s", status.describe())
            return
        if o.mps.fixed:
            self.percentages = dict(o.mps.fixed)
            log.info("pipeline: %s; SM shares from the config: %s", status.describe(), self.percentages)
        else:
            self._warmup = {"sampler": [], "loader": [], "trainer": []}
            log.info("pipeline: %s; SM shares will be chosen from %d warm-up iterations",
                     status.describe(), o.mps.warmup)

    def _account(self, message: BatchMessage, depths: dict, waited: float, ipc_s: float,
                 train_s: float, held_bytes: int) -> None:
        t = self.totals
        t["batches"] += 1
        t["slot_bytes"] += message.cost.slot_bytes
        t["batch_bytes"] += held_bytes
        t["trainer_wait_s"] += waited
        t["ipc_s"] += ipc_s
        t["sample_s"] += message.cost.sample_s
        t["gather_s"] += message.cost.gather_s
        t["train_s"] += train_s
        self._scalar("pipeline/queue/sampled", depths["sampled"])
        self._scalar("pipeline/queue/ready", depths["ready"])
        self._scalar("pipeline/trainer_wait_ms", 1e3 * waited)
        self._scalar("pipeline/ipc_ms", 1e3 * ipc_s)
        start, snap, wait_sum, train_sum = self._window
        self._window = (start, snap, wait_sum + waited, train_sum + train_s)
        if self._warmup is not None:
            self._measure_warmup(message, train_s)
        if self.pace.observe(depths):
            self._decide()
        self.steps[self.phase] += 1

    def _decide(self) -> None:
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
        for stage, seconds in per_batch.items():
            self._scalar(f"pipeline/stage_ms/{stage}", 1e3 * seconds)
            self._scalar(f"pipeline/throughput/{stage}", 1 / seconds if seconds > 0 else 0.0)
        for q in QUEUES:
            self._scalar(f"pipeline/limit/{q}", self.pace.limits[q])
            self._scalar(f"pipeline/wait_fraction/{q}", waited[q])
        for stage in STAGES:
            self._scalar(f"pipeline/paced_fraction/{stage}", delta[f"{stage}_pace_ns"] / 1e9 / wall)
        for stage, percent in self.percentages.items():
            self._scalar(f"pipeline/mps_percent/{stage}", percent)
        self._window = (now, after, 0.0, 0.0)

    def _measure_warmup(self, message: BatchMessage, train_s: float) -> None:
        w = self._warmup
        w["sampler"].append(message.cost.sample_s)
        w["loader"].append(message.cost.gather_s)
        w["trainer"].append(train_s)
        if len(w["trainer"]) < self.options.mps.warmup:
            return
        times = {s: statistics.median(v[2:]) for s, v in w.items()}  # the first batches warm up
        shares = thread_percentages(times, self.options.mps.floor)
        self.percentages = {s: shares[s] for s in STAGES}
        self._warmup = None
        self._restart_due = True
        for stage, percent in shares.items():
            self._scalar(f"pipeline/mps_percent/{stage}", percent)
        log.info("pipeline MPS: warm-up time per batch %s -> SM shares sampler %d%%, loader %d%% "
                 "(the trainer keeps its whole share: its CUDA context exists already); the stage "
                 "processes restart with them at the next epoch or evaluation",
                 ", ".join(f"{s} {1e3 * t:.1f} ms" for s, t in times.items()),
                 shares["sampler"], shares["loader"])

    def _log_run(self, count: int) -> None:
        c = self.control.snapshot()
        log.debug("pipeline: %d batches; queue limits sampled %d, ready %d; stage busy: sampler "
                 "%.1fs, loader %.1fs; loader waited %.1fs, sampler/loader held back %.1fs/%.1fs",
                 count, c["limit_sampled"], c["limit_ready"], c["sampler_busy_ns"] / 1e9,
                 c["loader_busy_ns"] / 1e9, c["loader_wait_ns"] / 1e9, c["sampler_pace_ns"] / 1e9,
                 c["loader_pace_ns"] / 1e9)

    def _scalar(self, tag: str, value: float) -> None:
        if self.recorder is not None:
            prefix = "pipeline/" if self.phase == "train" else "pipeline_eval/"
            self.recorder.scalar(prefix + tag.removeprefix("pipeline/"), value, self.steps[self.phase])

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
