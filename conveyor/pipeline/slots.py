"""Recycled buffers that carry batches between processes without pickling their data.

A queue between a producer and a consumer owns a fixed number of slots. The producer takes a free
slot and writes the batch's tensors into that slot's buffers (shared memory on the CPU, device
memory on a GPU): `pack` copies tensors it already has, `buffer` hands out a view to compute a
tensor straight into (the loader gathers features into it). Only the slot number and the tensors'
shapes travel in the message; a reader gets views of the same buffers. A buffer is reused for every
batch that fits and grows (by a quarter more than asked) when one does not: the grown buffer
crosses the process boundary once, with that batch's message (a file descriptor on the CPU, a CUDA
IPC handle on a GPU), and the producer keeps it alive for as long as the slot exists.

Ownership: a slot belongs to its producer until it is sent, then to whoever holds the batch, and
goes back to the producer (its free queue) only when the last reader is done with it. So a slot is
never rewritten while read, and the number of slots bounds the memory of the batches in flight.
In the pipeline a sampler slot (n_id, edges) is read by the loader and then by the trainer, which
releases it together with the loader's slot (x, y) once it has dropped the batch (stages.py).

On CUDA a release needs no host sync: the consumer records a per-slot interprocess event on its
stream when it releases the slot (after every kernel that read it was queued), and the producer's
stream waits on that event before it rewrites the slot (`ReleaseEvents`). The producer's own
writes are complete when it sends the message (`pack` synchronizes its stream; the loader's
gather ends with the device idle), so a reader may use a slot's views at once.
"""
from __future__ import annotations

import math
from typing import Dict, List, Optional, Tuple

import torch
from torch import Tensor

MIN_ELEMENTS = 1024


def new_message() -> dict:
    """The message part of one slot: the tensors' shapes, and the buffers grown for them."""
    return {"shapes": {}, "grown": {}}


def _largest_slot(buffers: Dict[Tuple[int, str], Tensor]) -> int:
    per_slot: Dict[int, int] = {}
    for (slot, _), b in buffers.items():
        per_slot[slot] = per_slot.get(slot, 0) + b.numel() * b.element_size()
    return max(per_slot.values(), default=0)


class SlotWriter:
    """The producer's side: the buffers it fills, and every byte it wrote into them."""

    def __init__(self, device):
        self.device = torch.device(device)
        self.buffers: Dict[Tuple[int, str], Tensor] = {}
        self.bytes_written = 0  # what pack() copied plus what was handed out by buffer()

    def buffer(self, slot: int, name: str, shape, dtype: torch.dtype, message: dict) -> Tensor:
        """A view of `slot`'s buffer `name` with `shape`, for the caller to write the tensor into
        (once: its bytes are counted as written); `message` (new_message()) records the shape and
        a grown buffer."""
        shape = tuple(shape)
        n = math.prod(shape)
        buffer = self.buffers.get((slot, name))
        if buffer is None or buffer.numel() < n or buffer.dtype != dtype:
            buffer = self._allocate(max(n + n // 4, MIN_ELEMENTS), dtype)
            self.buffers[(slot, name)] = message["grown"][name] = buffer
        message["shapes"][name] = shape
        self.bytes_written += n * buffer.element_size()
        return buffer[:n].view(shape)

    def pack(self, slot: int, tensors: Dict[str, Tensor]) -> dict:
        """Copy `tensors` into `slot`'s buffers; return the message part a SlotReader unpacks."""
        message = new_message()
        for name, tensor in tensors.items():
            self.buffer(slot, name, tensor.shape, tensor.dtype, message).copy_(tensor)
        # The copies must be complete before the consumer looks. An event the consumer waits on
        # instead would save only the copy's own time on the device (the sampler has just
        # synchronized to time its sampling), and the loader syncs on n_id at once anyway (the
        # cache's hit/miss split reads a count on the host).
        if self.device.type == "cuda":
            torch.cuda.current_stream(self.device).synchronize()
        return message

    def _allocate(self, numel: int, dtype: torch.dtype) -> Tensor:
        buffer = torch.empty(numel, dtype=dtype, device=self.device)
        return buffer.share_memory_() if self.device.type == "cpu" else buffer

    @property
    def nbytes(self) -> int:
        return sum(b.numel() * b.element_size() for b in self.buffers.values())

    @property
    def largest_slot_bytes(self) -> int:
        """The bytes of the slot with the largest buffers (0 before the first pack)."""
        return _largest_slot(self.buffers)


class SlotReader:
    """A consumer's side: the buffers it was sent, and views of them."""

    def __init__(self):
        self.buffers: Dict[Tuple[int, str], Tensor] = {}

    def receive(self, slot: int, grown: Dict[str, Tensor]) -> None:
        """Take the buffers a producer grew for `slot` (they replace the slot's old ones)."""
        for name, buffer in grown.items():
            self.buffers[(slot, name)] = buffer

    def views(self, slot: int, shapes: Dict[str, tuple]) -> Dict[str, Tensor]:
        """Views of `slot`'s buffers with `shapes` (valid until the slot is released)."""
        return {name: self.buffers[(slot, name)][:math.prod(shape)].view(shape)
                for name, shape in shapes.items()}

    def unpack(self, slot: int, message: dict) -> Dict[str, Tensor]:
        """receive() then views() of one message part. Call it for every message, even one that is
        dropped: it may bring a grown buffer."""
        self.receive(slot, message["grown"])
        return self.views(slot, message["shapes"])

    @property
    def largest_slot_bytes(self) -> int:
        return _largest_slot(self.buffers)


class ReleaseEvents:
    """One CUDA interprocess event per slot of a queue, created by the consumer (the trainer):
    `release(slot)` records it on the consumer's stream as the slot goes back, `wait(slot)` makes
    the producer's stream wait for it before the slot is rewritten. Both return at once: the GPU
    orders the rewrite after the consumer's last read. On the CPU there is nothing to order (the
    consumer's reads are done when it releases the slot): every call is a no-op."""

    def __init__(self, device, count: int = 0, handles: Optional[List[bytes]] = None):
        """The consumer's: `count` new events on `device`; a producer's: `handles` (of the
        consumer's `handles()`) opened in its process."""
        self.device = torch.device(device)
        self.events: List[torch.cuda.Event] = []
        if self.device.type != "cuda":
            return
        if self.device.index is None:  # an IPC event is opened on a numbered device
            self.device = torch.device("cuda", torch.cuda.current_device())
        if handles is None:
            self.events = [torch.cuda.Event(interprocess=True) for _ in range(count)]
        else:
            self.events = [torch.cuda.Event.from_ipc_handle(self.device, h) for h in handles]

    def handles(self) -> List[bytes]:
        """What a producer opens the events with (empty on the CPU)."""
        if not self.events:
            return []
        with torch.cuda.device(self.device):  # the first handle creates the event, on this device
            return [event.ipc_handle() for event in self.events]

    def release(self, slot: int) -> None:
        if self.events:
            self.events[slot].record(torch.cuda.current_stream(self.device))

    def wait(self, slot: int) -> None:
        if self.events:
            torch.cuda.current_stream(self.device).wait_event(self.events[slot])

