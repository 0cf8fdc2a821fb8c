"""Stage 0: graph storage, dataset loaders and self-reliant partitions. Imports no other stage."""
from .datasets import DATASETS, load_dataset
from .errors import ConveyorError
from .graph import Graph
from .partitioner import load_or_partition, partition_graph, partition_report
from .store import Part, load_part, load_parts

__all__ = ["ConveyorError", "DATASETS", "Graph", "Part", "load_dataset", "load_or_partition",
           "load_part", "load_parts", "partition_graph", "partition_report"]
