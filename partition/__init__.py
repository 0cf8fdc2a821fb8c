"""Stage 0: graph storage, dataset loaders and self-reliant partitions. Imports no other stage."""
from .errors import ConveyorError
from .graph import Graph
from .datasets import DATASETS, load_dataset
from .store import Part, load_part, load_parts
from .partitioner import load_or_partition, partition_graph, partition_report

__all__ = ["ConveyorError", "DATASETS", "Graph", "Part", "load_dataset", "load_or_partition",
           "load_part", "load_parts", "partition_graph", "partition_report"]
