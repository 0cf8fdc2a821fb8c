"""The batch sources, and nothing else: seeds in, `PreparedBatch`es (sampled subgraph, features,
labels, on the training device) out. Which seeds, batch by batch and epoch by epoch, is the loader's
(loader/seeds.py); the cores a stage may use, core/cores.py. Imports partition, samplers and cache;
never the trainer, so a stage process starts without the models (PyG) it never uses.

    source = batch_source(graph, sampler, features, device, settings)   # PipelineSettings
    for batch in source.run(seed_batches, sampler_seed):                # PreparedBatch
        ...
    source.close()

`sampler`: an object with `sample(seeds) -> SampledBatch` (optionally `sample_many`,
`manual_seed`), or a spec with `build(graph, device)` that makes one (`samplers.SamplerSpec`);
`features`: an object with `gather(n_id, out=None)`, `stats()`, `feature_dim` and `dtype` (a
`cache.FeatureCache`), or a spec (`cache.CacheSpec`). With `settings.name == "async"` both are
pickled into the stage process that uses them, so they must be picklable: a spec is small, an
object travels whole (its tensors as shared memory). docs/design.md §2.6 states the contract.

    batch.py     PreparedBatch and BatchCost, what both sources yield
    phases.py    what run()'s phase changes: the sampler (layer-wise: every in-neighbour) and the features
    serial.py    SerialBatches: sample then gather, in the caller's process (`pipeline=serial`)
    source.py    AsyncBatches: the sampler and the loader in two processes joined by queues
                 (TurboGNN), paced by queue depths and, under CUDA MPS, by per-process SM shares;
                 it ties together, one job each:
    processes.py   the stage processes, their queues and control block
    watch.py       faults and stalls (PipelineError)
    transport.py   batch messages in, views of their slots, slots back
    monitor.py     statistics, TensorBoard scalars, pace decisions
    mps.py         CUDA MPS detection and SM shares (MPSShares)
    stages.py    the sampler and loader process bodies
    slots.py     recycled shared buffers that carry batches between processes
    control.py   the counters and switches the processes share
    pace.py      the pace controller
    settings.py  `pipeline.*`, declared and typed (PipelineSettings)
    forkserver.py  where the stage processes come from: a fork server with torch and the stage code loaded
    generators.py  a torch.Generator inside a stage's work, carried into the stage process with its stream
    memory.py    room for the largest batch of a run, kept free when an `auto` cache is sized
    sharing.py   opening the trainer's graph in the stage processes without copying it
    shm.py       what the async pipeline places in /dev/shm, and the paragraph when it lacks room
    room.py      a batch's size bounded before sampling; the room the batches take, checked per run
    shutdown.py  starting and stopping processes so nothing hangs or is left behind
    guard.py     refusing to spawn from a script's top level without `if __name__ == "__main__":`
"""
import dataclasses
import logging

from conveyor.cache.protocol import FeatureRecipe, FeatureSource
from conveyor.core import ConveyorError
from conveyor.core.names import require_own_name
from conveyor.partition import Graph
from conveyor.partition.attributes import AttributeStore
from conveyor.pipeline.batch import BatchCost, PreparedBatch
from conveyor.pipeline.serial import SerialBatches
from conveyor.pipeline.settings import PipelineSettings
from conveyor.pipeline.source import AsyncBatches, PipelineError
from conveyor.samplers.protocol import Sampler, SamplerRecipe

require_own_name(__name__, "conveyor.pipeline")

log = logging.getLogger("conveyor")


def batch_source(graph: Graph, sampler, features, device, settings: PipelineSettings, batch_ratio: float = 1.0,
                 recorder=None, attributes=None, batch_size=None):
    """The batch source `settings.name` names: `SerialBatches` (in this process) or `AsyncBatches`
    (sampler and loader processes); auto picks one for `graph` (PipelineSettings.choose) and the
    start-up line says which and why. `features`: a feature source, its spec, or None (batches
    without x); `batch_ratio`: the largest batch `run()` will be given over the training batch, in
    seeds (room an auto cache leaves free); `recorder`: where the async pipeline's TensorBoard
    scalars go (`scalar(tag, value, step)`), or None; `attributes`: the graph's other attributes
    each batch carries (partition.attributes: an AttributeStore or its AttributeSpec), or None;
    `batch_size`: seeds of a training batch, if known, so that the room the async pipeline's slots
    take (in /dev/shm and in memory) is checked before its processes start, else before the first
    run (pipeline/room.py)."""
    check_parts(sampler, features, attributes)
    name, why = settings.choose(graph)
    settings = settings.resolved(graph)
    threads, how = settings.sampling_threads()
    where = "in the sampler process" if settings.name == "async" else "in the trainer's process, between steps"
    log.info("pipeline: %s (%s); sampling: %d torch thread%s (%s), %s", name, why, threads, "s" * (threads > 1),
             how, where)  # one start-up line: the console's summary stays short
    settings = dataclasses.replace(settings, sampler_threads=threads)  # chosen once: a restart keeps it
    if settings.name == "async":
        return AsyncBatches(graph, sampler, features, device, settings, batch_ratio, recorder, attributes, batch_size)
    return SerialBatches(graph, sampler, features, device, batch_ratio, sampling_threads=threads,
                         attributes=attributes)


def check_parts(sampler, features, attributes=None) -> None:
    """Refuse, before any process starts, a sampler or feature source the pipeline could not use
    (samplers/protocol.py, cache/protocol.py: what any class of the user's must have)."""
    if not isinstance(sampler, (Sampler, SamplerRecipe)):
        raise ConveyorError(f"the sampler given, a {type(sampler).__name__}, has neither sample(seeds) -> "
                            f"SampledBatch nor build(graph, device) -> sampler; give a sampler name (bsp, fused, "
                            f"pyg) or an object with one of those methods (docs/design.md §2.6).")
    if attributes is not None and not isinstance(attributes, AttributeStore) and not hasattr(attributes, "build"):
        raise ConveyorError(f"the attributes given, a {type(attributes).__name__}, have neither fields() and "
                            f"gather(name, index, out) nor build(graph, device); give a partition.attributes."
                            f"AttributeSpec or such an object.")
    if features is not None and not isinstance(features, (FeatureSource, FeatureRecipe)):
        need = ", ".join(n for n in ("gather", "stats", "feature_dim", "dtype") if not hasattr(features, n))
        raise ConveyorError(f"the feature source given, a {type(features).__name__}, lacks {need} (a feature "
                            f"source has gather(n_id, out=None), stats(), feature_dim and dtype) and has no "
                            f"build(graph, device); give a cache policy (degree, random, none) or such an "
                            f"object (docs/design.md §2.6).")


__all__ = ["AsyncBatches", "BatchCost", "PipelineError", "PipelineSettings", "PreparedBatch", "SerialBatches",
           "batch_source"]
