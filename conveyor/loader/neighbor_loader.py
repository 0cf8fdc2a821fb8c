"""`conveyor.NeighborLoader`: PyG's `NeighborLoader` for node-level work, on a `Data` or a
`HeteroData` (loader/hetero.py), backed by conveyor's pipeline (docs/design.md §2.7, §2.8).

Its seeds are nodes (`input_nodes`); everything else a PyG loader does over the pipeline (epochs,
`loader(index)`, held batches, nested loops) is pyg_loader.py's `PyGLoader`. Each batch is the
user's data sliced to it as PyG's loader slices it (pyg_input.py, to_pyg.py): every node- and
edge-level attribute, e_id, parallel edges, dtypes.
"""
from __future__ import annotations

from dataclasses import replace
from typing import List, Optional

import torch
from torch import Tensor
from torch_geometric.loader import NeighborLoader as PyGNeighborLoader
from torch_geometric.sampler import NodeSamplerInput

from conveyor.core import ConveyorError
from conveyor.loader.hetero import to_hetero_data
from conveyor.loader.index_samplers import index_batches, plan_of
from conveyor.loader.inputs import (
    attributes_of,
    features_of,
    input_node_ids,
    pipeline_settings,
    sampler_of,
    seed_times,
)
from conveyor.loader.keywords import check_keywords
from conveyor.loader.pipeline_loader import LoaderParts
from conveyor.loader.pyg_face import describe, pipeline_sampler
from conveyor.loader.pyg_loader import PyGLoader, loader_inputs
from conveyor.loader.repeated_seeds import (
    distinct_seeds,
    has_repeats,
    with_repeated_seeds,
    with_repeated_typed_seeds,
)
from conveyor.loader.to_pyg import to_pyg
from conveyor.partition.hetero import is_typed
from conveyor.pipeline.room import check_batch_room
from conveyor.pipeline.seeds import EpochPlan
from conveyor.samplers.temporal import EDGE_TIME, TimedSeedsSpec, time_of
from conveyor.samplers.typed import relation_fanouts


class NeighborLoader(PyGLoader, PyGNeighborLoader):
    """As `torch_geometric.loader.NeighborLoader(data, num_neighbors, input_nodes=None,
    batch_size=1, shuffle=False, drop_last=False, ...)` with the keywords of PyG it honours
    (keywords.py: subgraph_type, weight_attr, num_workers, transform, ...), plus conveyor's own:

    pipeline: "async" (sampler and feature loader in their own processes, overlapped with your
        loop; PyG's num_workers=0 means "serial") or "serial" (both in this process); node_sampler:
        "auto", "bsp", "fused", "pyg", or your own sampler or spec (README, "Your own sampler or
        feature source"); cache: a policy ("degree", "random", "none"), a `cache.CacheSettings`,
        or your own feature source or spec; device: where batches arrive ("auto": CUDA when there
        is one); seed: the epochs' order and draws (None: `torch.initial_seed()`, so
        `torch.manual_seed` sets it); depth: batches each stage may prepare ahead.

    It is a `torch_geometric.loader.NeighborLoader` (and a torch `DataLoader`) to PyG's code, with
    the attributes PyG's consumers read (pyg_face.py); `sampler=` / `batch_sampler=` are PyG's,
    torch samplers of positions in input_nodes (index_samplers.py). Any other PyG keyword is
    refused by name unless it is at PyG's default. Close it with
    `close()` or a `with` block; garbage collection and interpreter exit close it too."""
    typed = True

    def __init__(self, data, num_neighbors, input_nodes=None, *, batch_size: int = 1, shuffle: bool = False,
                 drop_last: bool = False, pipeline: Optional[str] = None, node_sampler="auto", cache="degree",
                 device="auto", seed=None, depth: Optional[int] = None, **pyg_keywords):
        taken = check_keywords(pyg_keywords)
        batches = index_batches(taken.get("sampler"), taken.get("batch_sampler"), batch_size, shuffle, drop_last,
                                "NeighborLoader")
        options, graph, layout, device, seed = loader_inputs("NeighborLoader", data, batch_size, taken, pipeline,
                                                             depth, node_sampler, cache, device, seed, typed=True)
        parts = LoaderParts(sampler_of(node_sampler, num_neighbors, seed, device, options, graph),
                            features_of(cache, seed, graph), device, pipeline_settings(options.pipeline, options.depth),
                            attributes=attributes_of(graph))
        nodes, self.mask_input, self.input_type = input_node_ids(input_nodes, graph, options.subgraph_type)
        fanouts, row_bytes = room_of(graph, num_neighbors)
        check_batch_room(graph, fanouts, min(batch_size, max(nodes.numel(), 1)), device, row_bytes=row_bytes,
                         fix="Lower batch_size or num_neighbors.")
        input_time = input_times(taken.get("input_time"), nodes, options.time_attr, graph)
        seeds = nodes if options.time_attr is None else torch.arange(nodes.numel())  # temporal: positions
        if options.time_attr is not None:
            parts = replace(parts, sampler=TimedSeedsSpec(parts.sampler, nodes, input_time))
        plan = plan_of(seeds, batches, seed, EpochPlan(seeds, batch_size, seed, bool(shuffle), bool(drop_last)))
        super().__init__(data, graph, layout, parts, plan, options, cache, seed)
        self.batch_size, self.shuffle, self.drop_last = batch_size, bool(shuffle), bool(drop_last)
        self.input_nodes = nodes
        describe(self, taken, taken.get("sampler"), taken.get("batch_sampler"))
        self.input_time = input_time  # PyG's: the seeds' times (pyg_face.py's describe sets None)
        self.node_sampler = pipeline_sampler(node_sampler, num_neighbors, taken, options.subgraph_type)
        self.input_data = node_input(nodes, self.input_type, graph, input_time)

    def seed_batches(self, epoch: int) -> List[Tensor]:
        """Each batch's seeds once each: a repeat gets its place in to_data (disjoint: as given,
        each copy a subgraph of its own)."""
        return [self.seed_batch(seeds) for seeds in super().seed_batches(epoch)]

    def seed_batch(self, seeds: Tensor) -> Tensor:
        return seeds if self.options.disjoint else distinct_seeds(seeds)

    def to_data(self, prepared, positions: Tensor):
        input_id = self.input_nodes[positions] if self.mask_input else positions
        seeds = self.input_nodes[positions]
        if self.input_type is not None:  # a HeteroData's batch (loader/hetero.py); a mask's ids are the type's
            offset = self.layout.schema.offsets[self.layout.schema.node_type(self.input_type)]
            input_id = input_id - offset if self.mask_input else input_id
            data = to_hetero_data(prepared, self.layout, self.input_type, input_id, self.options.subgraph_type)
            if has_repeats(seeds) and not self.options.disjoint:
                data = self.typed_repeats(data, seeds - offset)
            if self.input_time is not None:
                data[self.input_type].seed_time = self.input_time[positions]
        else:
            data = to_pyg(prepared, self.layout, input_id, hop_counts=self.options.subgraph_type == "directional")
            if self.options.disjoint:
                data.batch = prepared.batch.extras["batch"]  # whose each node is (samplers/disjoint.py)
            elif has_repeats(seeds):
                data = with_repeated_seeds(data, seeds, self.layout)
            if self.input_time is not None:
                data.seed_time = self.input_time[positions]
        return data

    def typed_repeats(self, data, seeds: Tensor):
        """A HeteroData batch with its repeated seeds each in its place (directional subgraphs only)."""
        if self.options.subgraph_type != "directional":
            raise ConveyorError(f"a HeteroData batch holds a seed more than once (a sampler= drawing with "
                                f"replacement, e.g. ImbalancedSampler), which conveyor places with "
                                f"subgraph_type='directional' only (got {self.options.subgraph_type!r}); give each "
                                f"seed once.")
        return with_repeated_typed_seeds(data, seeds, self.layout, self.input_type)


def room_of(graph, num_neighbors) -> tuple:
    """The fanouts and node row (bytes) a batch's bound is taken at (pipeline/room.py): a typed
    graph's node draws each relation into its type, so at most the relations' sum a hop (-1: all),
    each node counted at the widest type's row; else num_neighbors and x's row (none without x)."""
    if not is_typed(graph):
        return list(num_neighbors), 0 if graph.x is None else None
    per_relation = relation_fanouts(graph.schema, num_neighbors)
    hops = [-1 if -1 in hop else sum(hop) for hop in zip(*per_relation)]
    rows = [x.size(1) * x.element_size() for x in graph.features.values()]
    return hops, max(rows, default=0)


def node_input(nodes: Tensor, input_type, graph, input_time: Optional[Tensor] = None) -> NodeSamplerInput:
    """PyG's `loader.input_data`: the seeds (a HeteroData's by their type's own ids), their times
    and their type."""
    if input_type is not None:
        nodes = nodes - graph.schema.offsets[graph.schema.node_type(input_type)]
    return NodeSamplerInput(input_id=None, node=nodes, time=input_time, input_type=input_type)


def input_times(input_time, nodes: Tensor, time_attr: Optional[str], graph) -> Optional[Tensor]:
    """PyG's input_time, one per input node (checked), or None; refused where the seeds' times
    are needed and not given (edge-level time)."""
    if input_time is not None:
        return seed_times(input_time, nodes.numel(), "input_time")
    if time_attr is not None and time_of(graph, time_attr)[0] == EDGE_TIME:
        raise ConveyorError(f"time_attr={time_attr!r} is an edge-level attribute: edge-level temporal sampling needs "
                            f"each seed's time, so give input_time= (one time per input node).")
    return None
