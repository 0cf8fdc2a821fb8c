"""conveyor from Python: `conveyor.fit(graph_or_data, ...)` trains as `python launch.py` does and
returns the trained model and its history. The top of the import order, beside launch.py."""
from partition import ConveyorError, Graph
from trainer.run import TrainResult

from .fit import fit

__all__ = ["ConveyorError", "Graph", "TrainResult", "fit"]
