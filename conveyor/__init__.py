"""conveyor from Python: `conveyor.fit(graph_or_data, ...)` trains as the `conveyor` command does
and returns the trained model and its history. The top of the import order, beside launch.py.

`fit` and `TrainResult` load the trainer (torch_geometric) when first used, so the command's
`--help` and its config checks do not wait for it."""
from partition import ConveyorError, Graph

__all__ = ["ConveyorError", "Graph", "TrainResult", "fit"]


def __getattr__(name: str):
    if name == "fit":
        from .fit import fit as value
    elif name == "TrainResult":
        from trainer.run import TrainResult as value
    else:
        raise AttributeError(f"module 'conveyor' has no attribute {name!r}")
    globals()[name] = value  # importing conveyor.fit bound the module to this name: the function wins
    return value
