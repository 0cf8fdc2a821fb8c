"""Stage 0: graph storage, dataset loaders and self-reliant partitions. Imports no other stage."""
from .errors import ConveyorError
from .graph import Graph
from .datasets import DATASETS, load_dataset

__all__ = ["ConveyorError", "DATASETS", "Graph", "load_dataset"]
