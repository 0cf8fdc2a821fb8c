"""The trainer's end of the batch transport: the next batch message of a job off the ready queue,
views of the batch's tensors in its two slots, and the slots given back to their producers once
every view of the batch is gone (docs/design.md §4, recycled shared slots).

A batch is views into recycled buffers: a caller that keeps one must copy it; one that holds every
slot gets a ConveyorError, not a hang.
"""
from __future__ import annotations

import gc
import queue
import time
import weakref
from collections import deque
from typing import Dict, List

from torch import Tensor

from conveyor.core import ConveyorError
from conveyor.pipeline.processes import QUEUES, StageProcesses
from conveyor.pipeline.slots import SlotReader
from conveyor.pipeline.stages import POLL_S, BatchMessage
from conveyor.pipeline.watch import STALL_WARN_S, PipelineError, StageWatch


class BatchReceiver:
    """Receives batches from the loader and returns their slots: `slots` ready-queue slots (the
    batches the trainer may hold at once)."""

    def __init__(self, stages: StageProcesses, watch: StageWatch, slots: int):
        self.stages, self.watch, self.slots = stages, watch, slots
        self.readers = {q: SlotReader() for q in QUEUES}
        self.sampler_grown = 0  # grown sampled buffers read from the sampler's queue
        self.released: deque = deque()  # per batch the trainer is done with: its (queue, slot)s
        self.handed = self.returned = 0

    def receive(self, job: int) -> tuple[BatchMessage, float]:
        """The next ready batch of `job` and how long the trainer waited for it."""
        start = last_warning = time.perf_counter()
        while True:
            self.return_buffers()
            self.watch.check()
            message = self.take(self.stages.ready, "a batch from the loader")
            if message is None:
                self.check_held()
                now = time.perf_counter()
                self.watch.check_stall(start)  # every poll: a timeout below STALL_WARN_S holds too
                if now - last_warning > STALL_WARN_S:
                    last_warning = now
                    self.watch.warn_stall(now - start)
                continue
            self.stages.control.add("ready_taken")
            if message.job == job:
                return message, time.perf_counter() - start
            self.drop(message)

    def drop(self, message: BatchMessage) -> None:
        """A batch of a job the trainer stopped reading, never read here: both its slots go back
        (after taking the grown buffers it may bring)."""
        for q, (slot, packed) in message.slots.items():
            self.readers[q].receive(slot, packed["grown"])
            self.stages.free[q].put(slot)

    def take(self, q, what: str):
        """The next item of `q`, or None after a poll interval without one."""
        try:
            return q.get(timeout=POLL_S)
        except queue.Empty:
            return None
        except Exception as error:  # unpickling failed: most likely the sender just died
            self.watch.check_after_failure()
            raise PipelineError(f"pipeline: receiving {what} failed: {error!r}")

    def unpack(self, message: BatchMessage) -> Dict[str, Tensor]:
        """Views of the batch's tensors in its two slots, once the sampler's grown buffers it
        needs have arrived (on their own queue: see stages.py). The batch's message can overtake
        them (each queue has its own feeder thread in the sampler), so a sampler that stops after
        sending its message is a stall here too."""
        start = time.perf_counter()
        while self.sampler_grown < message.sampler_grown:
            item = self.take(self.stages.sampler_buffers, "a buffer from the sampler")
            if item is None:
                self.watch.check()
                self.watch.check_stall(start)
                continue
            self.readers["sampled"].receive(*item)
            self.sampler_grown += 1
        views = {}
        for q, (slot, packed) in message.slots.items():
            views.update(self.readers[q].unpack(slot, packed))
        return views

    def lease(self, slots: List[tuple], views: List[Tensor]) -> None:
        """Give the batch's `slots` ((queue, slot) pairs) back once every view of them is gone."""
        released, pending = self.released, [len(views)]

        def drop():
            pending[0] -= 1
            if pending[0] == 0:
                released.append(slots)

        for view in views:
            weakref.finalize(view, drop).atexit = False
        self.handed += 1

    def return_buffers(self) -> None:
        """Put the released slots on their producers' free queues. On CUDA the trainer's kernels
        may still be reading them: each slot's release event is recorded on the trainer's stream
        first, after every kernel queued so far (the batch's tensors are gone, so no later kernel
        reads them), and the producer's stream waits on it before rewriting the slot
        (Stage.acquire). Neither side waits on the host. On the CPU the reads are done."""
        while self.released:
            for q, slot in self.released.popleft():
                self.stages.give_back(q, slot)
            self.returned += 1

    def check_held(self) -> None:
        if self.handed - self.returned < self.slots:
            return
        gc.collect()  # a reference cycle may be all that holds them
        self.return_buffers()
        if self.handed - self.returned >= self.slots:
            raise ConveyorError(
                f"the trainer holds all {self.slots} prepared batches the async pipeline can have "
                f"in flight, so the loader cannot prepare another. The pipeline reuses each "
                f"batch's buffers once its tensors are dropped: copy batches you keep "
                f"(e.g. x.clone()), or raise pipeline.depth, or use pipeline=serial.")
