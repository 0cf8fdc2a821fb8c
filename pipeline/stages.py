"""The bodies of the two stage processes, the sampler and the feature loader.

    trainer --jobs--> sampler --sampled--> loader --ready--> trainer
            <--free slots--   <--free slots--

A job is one `run()` call of the trainer: its seed batches and sampler seed. The sampler reseeds
and samples the batches in order, as SerialBatches does; the loader gathers each batch's features
(through the cache) and labels. Batches travel in recycled slots (slots.py), counters and switches
are shared (control.py). Every wait polls the stop switch and the parent, so a stage can always
be stopped and never outlives the trainer; an exception goes back to the trainer with its traceback.
"""
from __future__ import annotations

import os
import queue
import sys
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

import torch
from omegaconf import OmegaConf

from cache.configured import cache_from_config
from partition import ConveyorError
from samplers import SampledBatch, build_sampler

from .batch import WARMUP_BATCHES, BatchCost, seed_labels, synchronize
from .control import Control
from .memory import batch_room, largest_batch_ratio
from .options import PipelineOptions
from .sharing import GraphHandle
from .shutdown import die_with_parent, ignore_interrupts, name_process
from .slots import SlotReader, SlotWriter

POLL_S = 0.1  # longest a wait goes without looking at the stop switch and the other processes
PACE_SLEEP_S = 0.001  # a producer at its pace limit sleeps this long before looking again


class Stopped(Exception):
    """The trainer asked the stages to stop, or is gone."""


@dataclass
class BatchMessage:
    """What crosses a queue per batch: where its tensors are, and what it cost so far."""
    job: int
    index: int
    slot: int
    packed: dict  # SlotWriter.pack
    counts: List[int]  # num_nodes_per_hop
    cost: BatchCost


@dataclass
class StageSpec:
    """Everything a stage process gets (picklable: queues, shared tensors, plain options)."""
    name: str  # "sampler" | "loader"
    parent_pid: int
    control: Control
    events: Any  # SimpleQueue to the trainer: ("ready" | "log" | "error", stage, ...)
    inbox: Any  # sampler: jobs; loader: sampled batches
    outbox: Any  # sampler: sampled batches; loader: ready batches
    free_slots: Any  # the slots of this stage's outbox its consumer has released
    inbox_free: Optional[Any]  # loader: where the sampler's slots go back
    graph: GraphHandle
    device: str
    threads: int
    options: Dict[str, Any] = field(default_factory=dict)
    die_with_parent: bool = True


class Stage:
    """A stage process's view of the pipeline: bounded waits, pacing, reports to the trainer."""

    def __init__(self, spec: StageSpec):
        self.spec, self.control, self.name = spec, spec.control, spec.name
        self.device = torch.device(spec.device)

    def check(self) -> None:
        if self.control["stop"] or os.getppid() != self.spec.parent_pid:
            raise Stopped

    def get(self, q):
        """The next item of `q`, looking at the stop switch and the parent while waiting."""
        while True:
            try:
                return q.get(timeout=POLL_S)
            except queue.Empty:
                self.check()

    def acquire(self, out_queue: str) -> int:
        """A free slot for the next batch, once `out_queue` is below its pace limit (the
        TurboGNN throttle: sleep and look again). The wait counts as this stage's pace time."""
        start = time.perf_counter()
        next_check = start + POLL_S
        while not self.control.has_room(out_queue):
            time.sleep(PACE_SLEEP_S)
            if time.perf_counter() > next_check:
                self.check()
                next_check += POLL_S
        slot = self.get(self.spec.free_slots)
        self.control.add(f"{self.name}_pace_ns", (time.perf_counter() - start) * 1e9)
        return slot

    def send(self, kind: str, *payload) -> None:
        self.spec.events.put((kind, self.name, *payload))


def stage_main(spec: StageSpec) -> None:
    """Entry point of a stage process."""
    ignore_interrupts()
    if spec.die_with_parent:
        die_with_parent()
    name_process(f"conveyor:{spec.name}")
    stage = Stage(spec)
    for q in (spec.outbox, spec.inbox_free):  # never wait on unread data when leaving
        if q is not None:
            q.cancel_join_thread()
    code = 0
    try:
        stage.check()  # the trainer may have died before die_with_parent took effect
        torch.set_num_threads(spec.threads)
        if stage.device.type == "cuda":  # Triton launches on the current GPU: make it this stage's
            torch.cuda.set_device(stage.device)
        BODIES[spec.name](stage, spec.graph.open())
    except Stopped:
        pass
    except BaseException as error:  # noqa: BLE001 -- everything goes back to the trainer
        stage.send("error", os.getpid(), type(error).__name__, isinstance(error, ConveyorError),
                    str(error), traceback.format_exc())
        code = 1
    # Leave at once: nothing is left to flush (events are written synchronously), and tearing
    # down an interpreter that has imported torch takes seconds the trainer would wait for.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def run_sampler(stage: Stage, graph) -> None:
    """Samples `superbatch` batches per call (`sample_many`: one fused kernel launch for all of
    them; the same batches as one call each), then hands them on one slot at a time."""
    spec, control, o = stage.spec, stage.control, stage.spec.options
    sampler = build_sampler(o["sampler"], graph, o["fanouts"], device=stage.device, seed=o["seed"],
                            deterministic=o.get("deterministic", True))
    writer, per_call = SlotWriter(stage.device), o.get("superbatch", 1)
    stage.send("ready", os.getpid(), f"{o['sampler']} sampler on {stage.device}")
    while True:
        job, seeds, sizes, sampler_seed = stage.get(spec.inbox)
        sampler.manual_seed(sampler_seed)
        batches = seeds.split(sizes)
        for first in range(0, len(batches), per_call):
            if control["job"] != job:
                break  # the trainer stopped reading this job
            group = batches[first: first + per_call]
            start = time.perf_counter()
            sampled_group = sampler.sample_many(group)
            synchronize(stage.device)
            sample_s = (time.perf_counter() - start) / len(group)
            for index, batch in enumerate(sampled_group, start=first):
                if control["job"] != job:
                    break
                slot = stage.acquire("sampled")
                begin = time.perf_counter()
                packed = writer.pack(slot, batch.to_tensors())
                message = BatchMessage(job, index, slot, packed, batch.num_nodes_per_hop.tolist(),
                                       BatchCost(sample_s=sample_s, ipc_s=time.perf_counter() - begin))
                control.add("sampler_busy_ns", sample_s * 1e9)
                control.add("sampled")
                spec.outbox.put(message)


def run_loader(stage: Stage, graph) -> None:
    spec, control = stage.spec, stage.control
    cache = cache_from_config(OmegaConf.create(spec.options["cfg"]), graph, stage.device)
    fit_pending = cache.auto and stage.device.type == "cuda"  # sized once training has peaked
    reader, writer = SlotReader(), SlotWriter(stage.device)
    stage.send("ready", os.getpid(), repr(cache))
    while True:
        start = time.perf_counter()
        message = stage.get(spec.inbox)
        got = time.perf_counter()
        control.add("loader_wait_ns", (got - start) * 1e9)
        control.add("sampled_taken")
        views = reader.unpack(message.slot, message.packed)
        if message.job != control["job"]:  # a job the trainer stopped reading
            del views
            spec.inbox_free.put(message.slot)
            continue
        if fit_pending and control["trained"] >= WARMUP_BATCHES:
            fit_pending = False
            fit_cache(stage, cache, writer)
        unpacked = time.perf_counter()
        slot = stage.acquire("ready")
        begin = time.perf_counter()
        before = cache.stats()
        batch = SampledBatch.from_tensors(views, message.counts)
        x = cache.gather(batch.n_id)
        y = seed_labels(graph.y, batch, stage.device)
        synchronize(stage.device)
        gathered = time.perf_counter()
        packed = writer.pack(slot, {**views, "x": x, "y": y})
        del views, batch
        spec.inbox_free.put(message.slot)  # the sampler's buffers are copied: give them back
        cost = message.cost.gathered(gathered - begin, before, cache.stats())
        cost = cost.plus_ipc((unpacked - got) + (time.perf_counter() - gathered))
        message = BatchMessage(message.job, message.index, slot, packed, message.counts, cost)
        control.add("loader_busy_ns", cost.gather_s * 1e9)
        control.add("loaded")
        spec.outbox.put(message)


def fit_cache(stage: Stage, cache, writer: SlotWriter) -> None:
    """Size an auto cache, leaving room for the run's largest batch (memory.py): in the trainer
    (its measured batch memory) and in this stage's slots, which all grow with the batches."""
    cfg = stage.spec.options["cfg"]
    slots = PipelineOptions.from_config(cfg["pipeline"]).slots
    batch_bytes = stage.control["batch_bytes"] + slots * writer.largest_slot_bytes
    room = batch_room(batch_bytes, largest_batch_ratio(OmegaConf.create(cfg["trainer"])))
    cache.fit_to_free_memory(batch_room=room)
    stage.send("log", f"cache fitted to the free device memory: {cache!r} ({cache.fit_info})")


BODIES = {"sampler": run_sampler, "loader": run_loader}
