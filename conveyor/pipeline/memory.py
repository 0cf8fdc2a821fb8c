"""Room for the largest batch of a run, kept free when an `auto` cache is sized.

An auto cache is sized after `WARMUP_BATCHES` training batches (PaGraph: `total - peak -
reserve`), but the evaluation batches come later and are larger (`trainer.eval_batch_size`, 4x the
training batch by default). A batch's memory (its subgraph, gathered features, activations and
gradients) grows at most linearly with its seeds: the sampled nodes grow more slowly than the
seeds, as neighbourhoods overlap, and evaluation keeps no activations for a backward pass. So the
largest batch needs at most `(ratio - 1) x` a training batch's memory beyond the measured peak,
with `ratio` = largest batch / training batch (`TrainerSettings.largest_batch_ratio`, handed to
the batch source as `batch_ratio`); the cache leaves that much free (`batch_room`).

A training batch's memory is measured on CUDA as this process's peak allocation during the
warm-up minus what it held before the first batch (`BatchPeak`). With `pipeline=async` the
trainer's figure reaches the loader, which sizes the cache, through the control block, and the
loader adds its own slot buffers, which grow with the batches too.
"""
from __future__ import annotations

import torch


def batch_room(batch_bytes: int, ratio: float) -> int:
    """Bytes beyond a training batch's `batch_bytes` that a batch `ratio` times larger needs."""
    return int(batch_bytes * max(float(ratio) - 1.0, 0.0))


class BatchPeak:
    """The device memory this process's training batches take: peak minus the memory held before
    the first one (CUDA; 0 elsewhere, where the cache is sized from host memory at build time)."""

    def __init__(self, device: torch.device):
        self.device = torch.device(device)
        self.baseline = None

    def start(self) -> None:
        """Call before the first batch (later calls do nothing)."""
        if self.baseline is not None or self.device.type != "cuda":
            return
        torch.cuda.reset_peak_memory_stats(self.device)
        self.baseline = torch.cuda.memory_allocated(self.device)

    def bytes(self) -> int:
        if self.baseline is None:
            return 0
        return max(0, torch.cuda.max_memory_allocated(self.device) - self.baseline)
