"""Stage 0: graph storage, dataset loaders and self-reliant partitions. Imports no other stage."""
from conveyor.core.names import require_own_name
from conveyor.partition.datasets import DATASETS, load_dataset
from conveyor.partition.graph import Graph
from conveyor.partition.hetero import Schema, TypedGraph, is_typed, typed_graph  # registers TypedGraph with Graph.load
from conveyor.partition.partitioner import load_or_partition, partition_graph, partition_report
from conveyor.partition.store import Part, load_part, load_parts

require_own_name(__name__, "conveyor.partition")

__all__ = ["DATASETS", "Graph", "Part", "Schema", "TypedGraph", "is_typed", "load_dataset", "load_or_partition",
           "load_part", "load_parts", "partition_graph", "partition_report", "typed_graph"]
