"""The async pipeline's processes: the sampler and loader stage processes, the queues that join
them to the trainer's process, and the control block they share; started together, stopped
together (docs/design.md §4, the queues).

    trainer --jobs--> sampler --sampled--> loader --ready--> trainer
            <--free sampled slots-----------------------------
                                 <--free ready slots----------
    sampler --grown sampled buffers--> trainer;  both stages --events--> trainer
"""
from __future__ import annotations

import contextlib
import logging
import os
import time
from typing import Dict

import torch

from conveyor.pipeline import generators  # noqa: F401  (registers how a torch.Generator travels to a stage)
from conveyor.pipeline.control import Control
from conveyor.pipeline.forkserver import stage_context
from conveyor.pipeline.guard import hiding_main, needs_main
from conveyor.pipeline.mps import PERCENT_ENV
from conveyor.pipeline.settings import STAGES, PipelineSettings
from conveyor.pipeline.sharing import GraphHandle
from conveyor.pipeline.shutdown import semaphores_named_after_this_process, stop_processes
from conveyor.pipeline.slots import ReleaseEvents
from conveyor.pipeline.stages import StageSpec, stage_main

log = logging.getLogger("conveyor")

QUEUES = ("sampled", "ready")


class StageProcesses:
    """The stage processes and everything they share with this process. `work` holds each
    stage's SamplerWork / LoaderWork; `percentages` its CUDA MPS share, if any."""

    def __init__(self, graph: GraphHandle, device: torch.device, settings: PipelineSettings, work: dict,
                 percentages: Dict[str, int]):
        ctx = stage_context()  # forks of a server that imported torch once and never touched CUDA
        self.device, self.settings = device, settings
        self.control = Control()
        self.control["limit_sampled"] = self.control["limit_ready"] = settings.depth
        with semaphores_named_after_this_process() as self.semaphores:  # a killed run's are swept by name
            self.jobs, self.sampled, self.ready = ctx.Queue(), ctx.Queue(), ctx.Queue()
            self.free = {"sampled": ctx.Queue(), "ready": ctx.Queue()}
            self.sampler_buffers = ctx.Queue()  # the sampler's grown buffers, (slot, {name: buffer})
            self.events = ctx.SimpleQueue()
        counts = {"sampled": settings.sampled_slots, "ready": settings.slots}
        for q, count in counts.items():
            for slot in range(count):
                self.free[q].put(slot)
        self.release_events = {q: ReleaseEvents(device, count) for q, count in counts.items()}
        self.started = time.perf_counter()
        self.environments: Dict[str, Dict[str, str]] = {}  # handed to each stage, which sets it first
        self.processes = {name: self._spawn(ctx, name, graph, work[name], percentages) for name in STAGES}
        shares = (", SM shares " + ", ".join(f"{s} {p}%" for s, p in percentages.items()) if percentages else "")
        log.debug("pipeline: sampler (pid %d) and loader (pid %d) processes started; up to %d batches ahead per "
                  "queue, torch threads: sampler %d, loader %d%s", self.processes["sampler"].pid,
                  self.processes["loader"].pid, settings.depth, self.threads("sampler"), settings.stage_threads, shares)

    def _spawn(self, ctx, name: str, graph: GraphHandle, work, percentages: Dict[str, int]):
        links = {"sampler": (self.jobs, self.sampled, self.free["sampled"], None, self.sampler_buffers),
                 "loader": (self.sampled, self.ready, self.free["ready"], self.free["sampled"], None)}
        inbox, outbox, free_slots, inbox_free, grown_out = links[name]
        out_queue = "sampled" if name == "sampler" else "ready"
        share = {PERCENT_ENV: str(percentages[name])} if name in percentages else {}
        self.environments[name] = {**os.environ, **share}  # a fork of the server has the server's otherwise
        spec = StageSpec(name, self.control, self.events, inbox, outbox, free_slots, inbox_free,
                         grown_out, self.release_events[out_queue].handles(), graph, str(self.device),
                         self.threads(name), work, env=self.environments[name])
        proc = ctx.Process(target=stage_main, args=(spec,), name=f"conveyor-{name}", daemon=True)
        # The stage runs the user's script again only to unpickle a class of it (pipeline/guard.py).
        with contextlib.nullcontext() if needs_main(*vars(work).values()) else hiding_main():
            proc.start()
        return proc

    def threads(self, stage: str) -> int:
        """torch CPU threads of `stage`'s process: the sampler's chosen for sampling (resolved
        once by batch_source), the loader's pipeline.threads."""
        if stage == "sampler":
            return self.settings.sampling_threads()[0]
        return self.settings.stage_threads

    def submit(self, job: int, seed_batches, sampler_seed: int, phase: str = "train") -> None:
        """Start job `job`: the stages drop what is left of an earlier one, the sampler gets the
        seed batches (one tensor and the sizes, so one message), its seed and phase (phases.py)."""
        self.control["job"] = job
        sizes = [int(s.numel()) for s in seed_batches]
        seeds = torch.cat(list(seed_batches)) if sizes else torch.empty(0, dtype=torch.long)
        self.jobs.put((job, seeds, sizes, int(sampler_seed), phase))

    def give_back(self, q: str, slot: int) -> None:
        """Return `slot` to the producer of queue `q`; on CUDA its stream first waits for every
        kernel this process queued that read the slot (ReleaseEvents: no host sync)."""
        self.release_events[q].release(slot)
        self.free[q].put(slot)

    def dead(self) -> list:
        """The stages whose process has ended."""
        return [name for name, proc in self.processes.items() if proc.exitcode is not None]

    def stop(self) -> None:
        """Ask the stages to leave, then make sure they did (shutdown.py); close every queue."""
        self.control["stop"] = 1
        stop_processes(self.processes.values())
        for q in (self.jobs, self.sampled, self.ready, *self.free.values(), self.sampler_buffers):
            q.cancel_join_thread()  # what is still buffered has no reader any more
            q.close()
        self.events.close()
