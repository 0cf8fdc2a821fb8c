"""The bodies of the two stage processes, the sampler and the feature loader.

    trainer --jobs--> sampler --sampled--> loader --ready--> trainer
            <--free sampled slots-----------------------------
                                 <--free ready slots----------
    sampler --grown sampled buffers--> trainer

A job is one `run()` call of the trainer: its seed batches and sampler seed. The sampler reseeds
and samples the batches in order, as SerialBatches does; the loader gathers each batch's features
(through the cache) and labels. Batches travel in recycled slots (slots.py), counters and switches
are shared (control.py). Every wait polls the stop switch and the parent, so a stage can always
be stopped and never outlives the trainer; an exception goes back to the trainer with its traceback.

Each tensor of a batch is written once, into the slot it reaches the trainer in: the sampler
copies n_id and the edges into a sampled slot; the loader reads them there, gathers the features
and labels straight into a ready slot (`cache.gather(out=)`), and passes the sampled slot on
instead of copying it. So the trainer holds two slots per batch and releases both once it has
dropped the batch; the loader releases a sampled slot itself only for a batch it drops (a job the
trainer stopped reading). A sampled slot is thus in use from sampling to the end of training, so
the sampled queue has as many slots as both queues together (PipelineSettings.sampled_slots): the
sampler is never held back by slots more than by its pace limit, and the slot counts still bound
the memory in flight. A grown sampled buffer reaches the loader with its message and the trainer
on a GPU on a queue of its own (a CUDA tensor received by IPC cannot be sent on); each message
counts the buffers the sampler had sent, so the trainer knows how many to read before it looks at
the batch. On the CPU the loader forwards them with the batch (see run_loader).
"""
from __future__ import annotations

import os
import queue
import sys
import time
import traceback
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import torch

from conveyor.cache.protocol import feature_shape
from conveyor.core import ConveyorError
from conveyor.pipeline.batch import (
    WARMUP_BATCHES,
    BatchCost,
    built,
    device_labels,
    feature_stats,
    gather_attributes,
    reseed,
    sample_many,
    seed_labels,
    synchronize,
)
from conveyor.pipeline.control import Control
from conveyor.pipeline.memory import batch_room
from conveyor.pipeline.phases import PhaseSamplers, gathers_features
from conveyor.pipeline.sharing import GraphHandle
from conveyor.pipeline.shutdown import die_with_parent, ignore_interrupts, name_process, set_environment, trainer_alive
from conveyor.pipeline.slots import ReleaseEvents, SlotReader, SlotWriter, new_message
from conveyor.samplers import SampledBatch

POLL_S = 0.1  # longest a wait goes without looking at the stop switch and the other processes
PACE_SLEEP_S = 0.001  # a producer at its pace limit sleeps this long before looking again


class Stopped(Exception):
    """The trainer asked the stages to stop, or is gone."""


@dataclass
class BatchMessage:
    """What crosses a queue per batch: where its tensors are, and what it cost so far."""
    job: int
    index: int
    slots: Dict[str, Tuple[int, dict]]  # queue -> (its slot holding tensors of the batch, that
    # slot's part of the message: SlotWriter.pack); "sampled" only, then "sampled" and "ready"
    counts: List[int]  # num_nodes_per_hop
    cost: BatchCost
    sampler_grown: int  # grown sampled buffers the sampler had sent the trainer by this batch
    features: bool = True  # gather the nodes' features (phases.py: not for layerwise-hidden)


@dataclass
class SamplerWork:
    """What the sampler stage draws with: a sampler, or a spec it builds one from
    (`build(graph, device)`, e.g. samplers.SamplerSpec), and the batches per call; `positions`:
    whether the batches' edge positions travel on (only for edge attributes and e_id)."""
    sampler: Any
    superbatch: int = 1
    positions: bool = False


@dataclass
class LoaderWork:
    """What the loader stage gathers with: a feature source (`gather(n_id, out=)`, `stats()`,
    `feature_dim`, `dtype`), or a spec it builds one from (`build(graph, device)`, e.g.
    cache.CacheSpec); and what sizing an auto cache needs: the run's largest batch over its
    training batch, and the slot counts of both queues."""
    features: Any
    batch_ratio: float = 1.0
    ready_slots: int = 0
    sampled_slots: int = 0
    attributes: Any = None  # the other attributes a batch carries: an AttributeStore, its spec, or None


@dataclass
class StageSpec:
    """Everything a stage process gets (picklable: queues, shared tensors, its work)."""
    name: str  # "sampler" | "loader"
    control: Control
    events: Any  # SimpleQueue to the trainer: ("ready" | "log" | "error", stage, ...)
    inbox: Any  # sampler: jobs; loader: sampled batches
    outbox: Any  # sampler: sampled batches; loader: ready batches
    free_slots: Any  # the slots of this stage's outbox its consumers have released
    inbox_free: Optional[Any]  # loader: where the sampler's slots go back (of a dropped batch)
    grown_out: Optional[Any]  # sampler: its grown buffers, to the trainer
    release_events: List[bytes]  # CUDA: the IPC handles of the trainer's ReleaseEvents of the outbox
    graph: GraphHandle
    device: str
    threads: int
    work: Any = None  # SamplerWork | LoaderWork
    env: Dict[str, str] = field(default_factory=dict)  # the trainer's, and the MPS share: set before CUDA


class Stage:
    """A stage process's view of the pipeline: bounded waits, pacing, reports to the trainer."""

    def __init__(self, spec: StageSpec):
        self.spec, self.control, self.name = spec, spec.control, spec.name
        self.device = torch.device(spec.device)
        self.released: Optional[ReleaseEvents] = None  # opened by stage_main, on the stage's device
        self.free: set = set()  # free slots of the outbox taken off free_slots, not yet used

    def check(self) -> None:
        if self.control["stop"] or not trainer_alive():
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
        slot = self.take_slot()
        self.released.wait(slot)  # CUDA: what is written next waits for the trainer's last read
        self.control.add(f"{self.name}_pace_ns", (time.perf_counter() - start) * 1e9)
        return slot

    def take_slot(self) -> int:
        """The lowest-numbered free slot. Taken in the queue's order, the slots would all be used
        in turn, each new buffer's pages faulted in on its first write and all the memory
        touched; lowest first keeps reusing the same few, warm ones, and a higher slot comes
        into use only when the pipeline has that many batches in flight."""
        if not self.free:
            self.free.add(self.get(self.spec.free_slots))
        while True:
            try:
                self.free.add(self.spec.free_slots.get_nowait())
            except queue.Empty:
                break
        slot = min(self.free)
        self.free.remove(slot)
        return slot

    def send(self, kind: str, *payload) -> None:
        self.spec.events.put((kind, self.name, *payload))


def stage_main(spec: StageSpec) -> None:
    """Entry point of a stage process."""
    ignore_interrupts()
    die_with_parent()
    set_environment(spec.env)
    name_process(f"conveyor:{spec.name}")
    stage = Stage(spec)
    for q in (spec.outbox, spec.inbox_free, spec.grown_out):  # never wait on unread data when leaving
        if q is not None:
            q.cancel_join_thread()
    code = 0
    try:
        stage.check()  # the trainer may have died before die_with_parent took effect
        torch.set_num_threads(spec.threads)
        if stage.device.type == "cuda":  # Triton launches on the current GPU: make it this stage's
            torch.cuda.set_device(stage.device)
        stage.released = ReleaseEvents(stage.device, handles=spec.release_events)
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
    spec, control = stage.spec, stage.control
    samplers = PhaseSamplers(spec.work.sampler, graph, stage.device, spec.threads)
    writer, per_call, grown_sent = SlotWriter(stage.device), spec.work.superbatch, 0
    name = getattr(samplers.run_sampler, "name", type(samplers.run_sampler).__name__)
    stage.send("ready", os.getpid(), f"{name} sampler on {stage.device}")
    while True:
        job, seeds, sizes, sampler_seed, phase = stage.get(spec.inbox)
        sampler = samplers.for_phase(phase)
        reseed(sampler, sampler_seed)
        batches = seeds.split(sizes)
        for first in range(0, len(batches), per_call):
            if control["job"] != job:
                break  # the trainer stopped reading this job
            group = batches[first: first + per_call]
            start = time.perf_counter()
            sampled_group = sample_many(sampler, group)
            synchronize(stage.device)
            sample_s = (time.perf_counter() - start) / len(group)
            for index, batch in enumerate(sampled_group, start=first):
                if control["job"] != job:
                    break
                slot = stage.acquire("sampled")
                begin, written = time.perf_counter(), writer.bytes_written
                packed = writer.pack(slot, stage_tensors(batch, spec.work.positions))
                if packed["grown"] and stage.device.type == "cuda":  # the trainer reads this slot
                    # too: it needs the new buffers (on the CPU the loader forwards them)
                    spec.grown_out.put((slot, packed["grown"]))
                    grown_sent += 1
                cost = BatchCost(sample_s=sample_s).plus_ipc(time.perf_counter() - begin,
                                                             writer.bytes_written - written)
                message = BatchMessage(job, index, {"sampled": (slot, packed)},
                                       batch.num_nodes_per_hop.tolist(), cost, grown_sent, gathers_features(phase))
                control.add("sampler_busy_ns", sample_s * 1e9)
                control.add("sampled")
                spec.outbox.put(message)


def stage_tensors(batch: SampledBatch, positions: bool) -> dict:
    """What of a sampled batch travels on: its edges' positions only where attributes need them."""
    tensors = batch.to_tensors()
    return tensors if positions else {k: v for k, v in tensors.items() if not k.startswith("p")}


def run_loader(stage: Stage, graph) -> None:
    """Gathers each sampled batch's features (through the feature source) and labels straight into
    a ready slot, and passes the batch on to the trainer."""
    loader = Loader(stage, graph)
    stage.send("ready", os.getpid(), "no features" if loader.cache is None else repr(loader.cache))
    while True:
        start = time.perf_counter()
        message = loader.next_message()
        got = time.perf_counter()
        stage.control.add("loader_wait_ns", (got - start) * 1e9)
        stage.control.add("sampled_taken")
        loader.load(message, got)


class Loader:
    """The loader stage's state: its feature source, the labels on its device, its slot reader
    and writer, and the sampler's grown buffers it still has to forward (CPU)."""

    def __init__(self, stage: Stage, graph):
        self.stage = stage
        self.cache = built(stage.spec.work.features, graph, stage.device)
        self.attributes = built(stage.spec.work.attributes, graph, stage.device)
        self.fit_pending = getattr(self.cache, "auto", False) and stage.device.type == "cuda"  # once trained a bit
        self.labels = device_labels(graph.y, stage.device)  # once: each batch's labels are gathered there
        self.reader, self.writer = SlotReader(), SlotWriter(stage.device)
        self.unforwarded: dict = {}  # CPU: sampled slot -> grown buffers the trainer has not been sent yet
        # Look-ahead (cache/host_tier.py): the sampled batches taken off the queue before their
        # turn, whose rows the feature source reads meanwhile, and their tickets.
        takes_tickets = callable(getattr(self.cache, "look_ahead", None))
        self.lookahead = int(getattr(self.cache, "lookahead", 0)) if takes_tickets else 0
        self.waiting: deque = deque()
        self.tickets: dict = {}  # (job, index) -> the feature source's ticket

    def next_message(self) -> BatchMessage:
        """The next sampled batch: the oldest one looked at ahead, or the queue's next (waiting
        for it); then the batches behind it, up to `lookahead`, are looked at."""
        if not self.waiting:
            self.waiting.append(self.look_at(self.stage.get(self.stage.spec.inbox)))
        message = self.waiting.popleft()
        while len(self.waiting) < self.lookahead:
            try:
                self.waiting.append(self.look_at(self.stage.spec.inbox.get_nowait()))
            except queue.Empty:
                break
        return message

    def look_at(self, message: BatchMessage) -> BatchMessage:
        """Start reading the rows of a batch taken off the queue (with look-ahead on)."""
        if self.lookahead and message.features and message.job == self.stage.control["job"]:
            slot, sampled = message.slots["sampled"]
            n_id = self.reader.unpack(slot, sampled)["n_id"]  # the slot is ours until load()
            self.tickets[(message.job, message.index)] = self.cache.look_ahead(n_id)
        return message

    def load(self, message: BatchMessage, got: float) -> None:
        """One sampled batch, taken off the queue at `got`: dropped if its job is over, else
        gathered into a ready slot and sent on."""
        stage, control = self.stage, self.stage.control
        sampled_slot, sampled = message.slots["sampled"]
        views = self.reader.unpack(sampled_slot, sampled)
        if stage.device.type == "cpu":
            self.unforwarded.setdefault(sampled_slot, {}).update(sampled["grown"])
        ticket = self.tickets.pop((message.job, message.index), None)
        if message.job != control["job"]:  # a job the trainer stopped reading
            del views
            if ticket is not None:
                self.cache.release(ticket)
            stage.spec.inbox_free.put(sampled_slot)
            return
        if self.fit_pending and control["trained"] >= WARMUP_BATCHES:
            self.fit_pending = False
            fit_cache(stage, self.cache, self.reader, self.writer)
        unpacked = time.perf_counter()
        slot = stage.acquire("ready")
        begin, written, before = time.perf_counter(), self.writer.bytes_written, feature_stats(self.cache)
        packed = gather_into_slot(self, SampledBatch.from_tensors(views, message.counts), slot, message.features,
                                  ticket)
        synchronize(stage.device)
        del views  # the sampled slot now belongs to the trainer, which releases it
        cost = message.cost.gathered(time.perf_counter() - begin, before, feature_stats(self.cache))
        cost = cost.plus_ipc(unpacked - got, self.writer.bytes_written - written)
        self.send(message, sampled, slot, packed, cost)

    def send(self, message: BatchMessage, sampled: dict, slot: int, packed: dict, cost: BatchCost) -> None:
        """The batch on to the trainer, in both its slots. On a GPU the trainer gets the grown
        buffers from the sampler (a CUDA tensor received by IPC cannot be sent on). On the CPU they
        go on from here: unpickling a shared CPU buffer asks its sender for the file descriptor,
        and a sender that is stopped (a stall) would then hang the trainer inside the unpickling,
        where no stall timeout can reach it."""
        sampled_slot = message.slots["sampled"][0]
        forwarded = {"shapes": sampled["shapes"], "grown": self.unforwarded.pop(sampled_slot, {})}
        message = BatchMessage(message.job, message.index,
                               {"sampled": (sampled_slot, forwarded), "ready": (slot, packed)},
                               message.counts, cost, message.sampler_grown, message.features)
        self.stage.control.add("loader_busy_ns", cost.gather_s * 1e9)
        self.stage.control.add("loaded")
        self.stage.spec.outbox.put(message)


def gather_into_slot(loader: "Loader", batch: SampledBatch, slot: int, features: bool = True,
                     ticket: Optional[int] = None) -> dict:
    """The batch's features (none: an x without rows), labels and other attributes (those the
    loader has), gathered straight into `slot`'s buffers; the message part. `ticket`: the feature
    source's for this batch's look-ahead, released once gathered."""
    message, cache, labels, writer = new_message(), loader.cache, loader.labels, loader.writer
    new = lambda name, shape, dtype: writer.buffer(slot, name, shape, dtype, message)
    if cache is not None:
        x = new("x", feature_shape(cache, batch.n_id) if features else (0, cache.feature_dim), cache.dtype)
        if features and ticket is not None:
            cache.gather(batch.n_id, out=x, ticket=ticket)
            cache.release(ticket)
        elif features:
            cache.gather(batch.n_id, out=x)
    if labels is not None:
        seed_labels(labels, batch, out=new("y", (batch.seeds.numel(), *labels.shape[1:]), labels.dtype))
    if loader.attributes is not None:
        gather_attributes(loader.attributes, batch, new)
    return message


def fit_cache(stage: Stage, cache, reader: SlotReader, writer: SlotWriter) -> None:
    """Size an auto cache, leaving room for the run's largest batch (memory.py): in the trainer
    (its measured batch memory) and in the slots of both queues, which all grow with the batches."""
    work = stage.spec.work
    batch_bytes = (stage.control["batch_bytes"] + work.ready_slots * writer.largest_slot_bytes
                   + work.sampled_slots * reader.largest_slot_bytes)
    room = batch_room(batch_bytes, work.batch_ratio)
    cache.fit_to_free_memory(batch_room=room)
    stage.send("log", f"cache fitted to the free device memory: {cache!r} ({cache.fit_info})")


BODIES = {"sampler": run_sampler, "loader": run_loader}
