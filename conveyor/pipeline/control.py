"""The numbers the pipeline's processes share: one small int64 tensor in shared memory.

Every field has a single writer (named below), so plain stores are enough; a reader always sees a
whole value (aligned 64-bit words). Counters only grow, so a queue's depth is produced - taken.
"""
from __future__ import annotations

import torch

FIELDS = (
    "job",               # main: the run() call the stages work for; batches of older ones are dropped
    "stop",              # main: 1 asks every stage to leave
    "limit_sampled",     # main (pace controller): batches the sampler may have waiting for the loader
    "limit_ready",       # main (pace controller): batches the loader may have waiting for the trainer
    "sampled",           # sampler: batches put on the sampled queue
    "sampled_taken",     # loader: batches taken from it
    "loaded",            # loader: batches put on the ready queue
    "ready_taken",       # main: batches taken from it
    "sampler_busy_ns",   # sampler: time spent sampling
    "sampler_pace_ns",   # sampler: time held back by its limit or waiting for a free buffer
    "loader_busy_ns",    # loader: time spent gathering features
    "loader_wait_ns",    # loader: time waiting for a sampled batch
    "loader_pace_ns",    # loader: time held back by its limit or waiting for a free buffer
    "trained",           # main: batches the trainer has finished with
    "batch_bytes",       # main: device memory a training batch took in the trainer (memory.py), set
                         # before `trained` reaches WARMUP_BATCHES
)
INDEX = {name: i for i, name in enumerate(FIELDS)}
# queue -> (its producer's counter, its consumer's counter, the pace limit on its depth)
QUEUES = {"sampled": ("sampled", "sampled_taken", "limit_sampled"),
          "ready": ("loaded", "ready_taken", "limit_ready")}


class Control:
    def __init__(self, tensor: torch.Tensor | None = None):
        self.tensor = (torch.zeros(len(FIELDS), dtype=torch.int64).share_memory_()
                       if tensor is None else tensor)

    def __getitem__(self, name: str) -> int:
        return int(self.tensor[INDEX[name]])

    def __setitem__(self, name: str, value: int) -> None:
        self.tensor[INDEX[name]] = int(value)

    def add(self, name: str, value: int = 1) -> None:
        self.tensor[INDEX[name]] += int(value)

    def depth(self, queue: str) -> int:
        """Batches produced into `queue` and not yet taken out."""
        produced, taken, _ = QUEUES[queue]
        return self[produced] - self[taken]

    def has_room(self, queue: str) -> bool:
        """Whether the producer of `queue` may start another batch under its pace limit."""
        return self.depth(queue) < self[QUEUES[queue][2]]

    def snapshot(self) -> dict:
        return dict(zip(FIELDS, self.tensor.tolist()))
