"""conveyor from Python: `conveyor.fit(graph_or_data, ...)` trains as the `conveyor` command does
and returns the trained model and its history; `conveyor.load(run_dir)` gives a run's model back
and `conveyor.predict(model, data)` its output for every node. The top of the import order,
beside launch.py.

`conveyor.NeighborLoader(data, num_neighbors=..., batch_size=...)` is PyG's loader of that name
over conveyor's pipeline, for a training loop of your own; `conveyor.LinkNeighborLoader` is PyG's
link-level one (seed edges, negatives). `conveyor.HGTLoader` is PyG's own, handed through (conveyor
has no HGT sampler), so a script importing it beside NeighborLoader changes that one import.

`fit`, `load`, `predict`, `TrainResult` and the loaders load the trainer or PyG when first
used, so the command's `--help` and its config checks do not wait for them.

The stages are this package's subpackages, each a folder of `conveyor/` (`conveyor.core`,
`conveyor.partition`, `conveyor.samplers`, `conveyor.cache`, `conveyor.pipeline`, `conveyor.loader`,
`conveyor.trainer`, `conveyor.compare`) and its configs `conveyor.conf`; a checkout also shows each
at its root as a link (docs/design.md section 1). Nothing but `conveyor` is a top-level name: a
user's own `trainer.py` shadows nothing."""
import os

# Before torch loads its OpenMP runtime (libgomp reads this once): a thread waiting at the end of a
# parallel region sleeps instead of spinning. torch's threads share the cores with the pipeline's
# stage processes and any other work; spinning, they took a core another thread needed: on the
# shared 2-core machine a training step cost 1.5 s of CPU instead of 0.45 s, so steps ran about
# twice as slow (benchmarks/results/eval_share_cpu_notes.md). The same arithmetic either way; a
# policy the user set stays. Only where conveyor is imported before torch (the conveyor command).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from conveyor.core import ConveyorError  # noqa: E402  (after the policy above)
from conveyor.partition import Graph  # noqa: E402

__all__ = ["ConveyorError", "Graph", "HGTLoader", "LinkNeighborLoader", "NeighborLoader", "TrainResult", "fit", "load",
           "predict"]


def __getattr__(name: str):
    if name == "fit":
        from conveyor.fit import fit as value
    elif name in ("load", "predict"):
        from conveyor import trained
        value = getattr(trained, name)
    elif name in ("NeighborLoader", "LinkNeighborLoader"):
        from conveyor.pipeline.forkserver import start_for_loaders
        start_for_loaders()  # the stage processes' server imports torch while PyG and the script load
        from conveyor import loader
        value = getattr(loader, name)
    elif name == "HGTLoader":  # PyG's, as it is: no pipeline behind it
        from torch_geometric.loader import HGTLoader as value
    elif name == "TrainResult":
        from conveyor.trainer.run import TrainResult as value
    else:
        raise AttributeError(f"module 'conveyor' has no attribute {name!r}")
    globals()[name] = value  # importing conveyor.fit bound the module to this name: the function wins
    return value
