"""The batch sources: seeds in, `PreparedBatch`es (sampled subgraph, features, labels, on the
training device) out. Imports partition, samplers and cache; never the trainer, so a stage
process starts without the models (PyG) it never uses.

    seeds.py     the seed nodes of each batch: random streams per (run seed, epoch)
    batch.py     PreparedBatch and BatchCost, what both sources yield
    serial.py    SerialBatches: sample then gather, in the caller's process (`pipeline=serial`)
    source.py    AsyncBatches: the sampler and the loader in two processes joined by queues
                 (TurboGNN), paced by queue depths and, under CUDA MPS, by per-process SM shares
    stages.py    the sampler and loader process bodies
    slots.py     recycled shared buffers that carry batches between processes
    control.py   the counters and switches the processes share
    pace.py      the pace controller
    mps.py       CUDA MPS detection and SM shares
    options.py   `pipeline.*` options, typed
    sharing.py   opening the trainer's graph in the stage processes without copying it
    shutdown.py  starting and stopping processes so nothing hangs or is left behind
"""
from .source import AsyncBatches, PipelineError

__all__ = ["AsyncBatches", "PipelineError"]
