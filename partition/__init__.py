"""Stage 0: graph storage, dataset loaders and self-reliant partitions. Imports no other stage."""
from .errors import ConveyorError
from .graph import Graph

__all__ = ["ConveyorError", "Graph"]
