"""Recycled buffers that carry batches between two processes without pickling their data.

A queue between a producer and a consumer owns `size` slots. The producer takes a free slot,
copies the batch's tensors into that slot's buffers (shared memory on the CPU, device memory on a
GPU) and sends only the slot number and the tensors' shapes; the consumer reads views of the same
buffers and hands the slot back when it is done with them. A buffer is reused for every batch that
fits and grows (by a quarter more than asked) when one does not: the grown buffer crosses the
process boundary once, with that batch's message (a file descriptor on the CPU, a CUDA IPC handle
on a GPU), and the producer keeps it alive for as long as the slot exists. Since a slot is only
refilled after its consumer released it, nobody ever reads a buffer while it is rewritten, and the
number of slots bounds the memory the batches in flight can take.
"""
from __future__ import annotations

import math
from typing import Dict, Tuple

import torch
from torch import Tensor

MIN_ELEMENTS = 1024


class SlotWriter:
    """The producer's side: the buffers it fills."""

    def __init__(self, device):
        self.device = torch.device(device)
        self.buffers: Dict[Tuple[int, str], Tensor] = {}

    def pack(self, slot: int, tensors: Dict[str, Tensor]) -> dict:
        """Copy `tensors` into `slot`'s buffers; return the message part a SlotReader unpacks."""
        shapes, grown = {}, {}
        for name, tensor in tensors.items():
            n = tensor.numel()
            buffer = self.buffers.get((slot, name))
            if buffer is None or buffer.numel() < n or buffer.dtype != tensor.dtype:
                buffer = self._allocate(max(n + n // 4, MIN_ELEMENTS), tensor.dtype)
                self.buffers[(slot, name)] = grown[name] = buffer
            buffer[:n].view(tensor.shape).copy_(tensor)
            shapes[name] = tuple(tensor.shape)
        if self.device.type == "cuda":  # the copies must be complete before the consumer looks
            torch.cuda.current_stream(self.device).synchronize()
        return {"shapes": shapes, "grown": grown}

    def _allocate(self, numel: int, dtype: torch.dtype) -> Tensor:
        buffer = torch.empty(numel, dtype=dtype, device=self.device)
        return buffer.share_memory_() if self.device.type == "cpu" else buffer

    @property
    def nbytes(self) -> int:
        return sum(b.numel() * b.element_size() for b in self.buffers.values())

    @property
    def largest_slot_bytes(self) -> int:
        """The bytes of the slot with the largest buffers (0 before the first pack)."""
        per_slot: Dict[int, int] = {}
        for (slot, _), b in self.buffers.items():
            per_slot[slot] = per_slot.get(slot, 0) + b.numel() * b.element_size()
        return max(per_slot.values(), default=0)


class SlotReader:
    """The consumer's side: the buffers it was sent, and views of them."""

    def __init__(self):
        self.buffers: Dict[Tuple[int, str], Tensor] = {}

    def unpack(self, slot: int, packed: dict) -> Dict[str, Tensor]:
        """Views of `slot`'s buffers holding the tensors of `packed` (valid until the slot is
        released). Call it for every message, even one that is dropped: it may bring a grown buffer."""
        for name, buffer in packed["grown"].items():
            self.buffers[(slot, name)] = buffer
        return {name: self.buffers[(slot, name)][:math.prod(shape)].view(shape)
                for name, shape in packed["shapes"].items()}
