"""A prepared batch as PyG's `NeighborLoader` yields it: the user's data sliced to the batch (each
key of `BatchLayout` in its order: node-level tensors by `n_id`, edge-level ones by `e_id`,
`edge_index` PyG's one edge list, anything else as it is), then `n_id`, `e_id`,
`num_sampled_nodes`, `num_sampled_edges` (directional subgraphs only, as PyG), `input_id` and
`batch_size`, as PyG's `NodeLoader.filter_fn` adds them.

The edges are PyG's (samplers/subgraph.py, `pyg_edges`): the hops' edges, hop 1's first, each
node's drawn at the hop after the one that first reached it; edge attributes and e_id, gathered
for every edge the sampler drew, follow the same cut.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor
from torch_geometric.data import Data

from conveyor.loader.adj_t import batch_adjacency
from conveyor.loader.pyg_input import ADJ_T, EDGE, EDGE_INDEX, NODE, NUM_NODES, OTHER, BatchLayout, X
from conveyor.partition.attributes import E_ID
from conveyor.samplers.subgraph import pyg_edges


def to_pyg(prepared, layout: BatchLayout, input_id: Tensor, hop_counts: bool = True) -> Data:
    """`prepared` (a pipeline.PreparedBatch) as PyG's batch; `hop_counts`: whether it says how many
    nodes and edges each hop sampled (PyG's directional subgraphs do, the others do not)."""
    data = sliced_data(prepared, layout, hop_counts)
    data.input_id = input_id
    data.batch_size = int(prepared.batch.num_nodes_per_hop[0])
    return data


def sliced_data(prepared, layout: BatchLayout, hop_counts: bool = True) -> Data:
    """The user's data sliced to the batch, then n_id, e_id and (`hop_counts`) the per-hop
    counts: what PyG's node and link loaders' batches both hold."""
    batch = prepared.batch
    edge_index, _, mask, edge_counts = pyg_edges(batch)
    values = {X: lambda key: prepared.x, NODE: lambda key: prepared.node_attrs[key],
              EDGE: lambda key: kept(prepared.edge_attrs[key], mask), EDGE_INDEX: lambda key: edge_index,
              NUM_NODES: lambda key: batch.n_id.numel(), OTHER: lambda key: layout.others[key],
              ADJ_T: lambda key: batch_adjacency(layout.others[key], edge_index, kept_or_none(prepared, key, mask),
                                                 (batch.n_id.numel(),) * 2)}
    data = Data()
    for key, kind in layout.keys:
        data[key] = values[kind](key)
    if "n_id" not in data:
        data.n_id = batch.n_id
    if E_ID in prepared.edge_attrs and "e_id" not in data:
        data.e_id = kept(prepared.edge_attrs[E_ID], mask)
    if hop_counts:
        counts = batch.num_nodes_per_hop
        data.num_sampled_nodes = torch.diff(counts, prepend=counts.new_zeros(1)).tolist()
        data.num_sampled_edges = edge_counts
    return data


def kept_or_none(prepared, key: str, mask: Optional[Tensor]) -> Optional[Tensor]:
    """The batch's rows of edge attribute `key`, or None when the graph has no such attribute."""
    return kept(prepared.edge_attrs[key], mask) if key in prepared.edge_attrs else None


def kept(values: Tensor, mask: Optional[Tensor]) -> Tensor:
    """The rows of an edge attribute that belong to PyG's edges."""
    return values if mask is None else values[mask.to(values.device)]
