"""`pipeline=async`: the sampler, the feature loader and the trainer in three processes joined by
queues (TurboGNN), paced by queue depths and, under CUDA MPS, by per-process SM shares.

    source.py    AsyncBatches, the batch source the trainer iterates (runs in the trainer)
    stages.py    the sampler and loader process bodies
    slots.py     recycled shared buffers that carry batches between processes
    control.py   the counters and switches the processes share
    pace.py      the pace controller
    mps.py       CUDA MPS detection and SM shares
    sharing.py   opening the trainer's graph in the stage processes without copying it
    shutdown.py  starting and stopping processes so nothing hangs or is left behind
"""
from .source import AsyncBatches, PipelineError

__all__ = ["AsyncBatches", "PipelineError"]
