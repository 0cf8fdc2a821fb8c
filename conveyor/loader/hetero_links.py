"""`conveyor.LinkNeighborLoader` on a `HeteroData` (or a typed store pair): the links of one edge
type, as PyG's `LinkLoader` takes them (`edge_label_index=(edge_type, index)`: type-local ids, or
the edge type alone for all of its edges), made global ids of the typed graph (partition/hetero.py:
node ids grouped by type) for the sampler stage, and each batch made PyG's heterogeneous link
batch: loader/hetero.py's typed batch, then, as `LinkLoader.filter_fn` adds them, `input_id` and
the links on the edge type (`edge_label_index` in each endpoint type's batch-local ids,
`edge_label`, `edge_label_time`) or, for triplets, `src_index` on the source type and
`dst_pos_index`, `dst_neg_index` on the destination type (with `seed_time` on both); with
disjoint subgraphs, each type's `batch` (loader/hetero.py).

The sampler stage draws the links' endpoints as global ids (samplers/link.py), so the batch's links
are positions in its n_id: here each becomes its rank among its type's nodes in n_id, the
type-local id PyG's batch uses.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Tuple

import torch
from torch import Tensor
from torch_geometric.data import HeteroData

from conveyor.core import ConveyorError
from conveyor.loader.adj_t import SPARSE_TENSOR, adjacency_layout
from conveyor.loader.hetero import HeteroLayout, hetero_batch
from conveyor.loader.link_inputs import dense_pairs
from conveyor.loader.pyg_input import as_tensor
from conveyor.partition.hetero import EdgeType, Schema, TypedGraph


@dataclass(frozen=True)
class TypedLinks:
    """The links of one edge type batches are cut from: `edges` [2, P] global ids, `local` the same
    as type-local ids (what PyG's `input_data` holds), each endpoint type's (first id, count)."""
    edge_type: EdgeType
    edges: Tensor
    local: Tensor
    src_nodes: Tuple[int, int]
    dst_nodes: Tuple[int, int]


def canonical_edge_type(key, schema: Schema) -> EdgeType:
    """PyG's `HeteroData._to_canonical`: (src, rel, dst) as it is; (src, dst) the one edge type
    joining them, else (src, "to", dst)."""
    key = tuple(key)
    if len(key) not in (2, 3) or not all(isinstance(k, str) for k in key):
        raise ConveyorError(f"a HeteroData's edge_label_index names an edge type, (src, rel, dst) or (src, dst), "
                            f"with its [2, P] links or None: e.g. (('user', 'rates', 'movie'), index); got {key!r}.")
    if len(key) == 3:
        return key
    matches = [e for e in schema.edge_types if (e[0], e[2]) == key]
    return matches[0] if len(matches) == 1 else (key[0], "to", key[1])


def typed_label_edges(edge_label_index, graph: TypedGraph, data=None) -> TypedLinks:
    """PyG's heterogeneous edge_label_index (an edge type, or (edge type, [2, P] type-local ids or
    None)) as links of the typed graph; None or no index: every edge of that type, in its order
    (`every_link`: the HeteroData `data`'s edge_index where it holds adj_t too)."""
    if edge_label_index is None or isinstance(edge_label_index, Tensor):
        raise ConveyorError("a HeteroData's edge_label_index names the links' edge type: ('user', 'rates', 'movie') "
                            "for all of its edges, or (edge_type, [2, P] links in each type's own ids).")
    given = tuple(edge_label_index)
    key, index = (given, None) if all(isinstance(k, str) for k in given) else (given[0], given[1])
    if len(given) != 2 and index is not None:
        raise ConveyorError(f"edge_label_index must be an edge type or (edge type, index), got {edge_label_index!r}.")
    schema = graph.schema
    edge_type = canonical_edge_type(key, schema)
    for node_type in (edge_type[0], edge_type[2]):
        schema.node_type(node_type)  # refused, naming the node types, when the graph has no such type
    if index is None:
        if edge_type not in schema.edge_types:
            raise ConveyorError(f"edge_label_index names the edge type {edge_type!r}, which the graph does not have "
                                f"(its edge types: {list(schema.edge_types)}); give its links as (edge_type, index).")
        local = every_link(data, edge_type, graph)
    else:
        local = checked_index(index, edge_type, schema)
    firsts = [schema.offsets[schema.node_type(edge_type[i])] for i in (0, 2)]
    counts = [schema.node_counts[schema.node_type(edge_type[i])] for i in (0, 2)]
    edges = local + torch.tensor(firsts).view(2, 1)
    return TypedLinks(edge_type, edges, local, (firsts[0], counts[0]), (firsts[1], counts[1]))


def every_link(data, edge_type: EdgeType, graph: TypedGraph) -> Tensor:
    """Every edge of `edge_type` as PyG's LinkLoader takes them, `data[edge_type].edge_index`: the
    data's own where it has one, else a SparseTensor adj_t's edges in its order (what PyG's
    EdgeStorage gives, and the typed graph's relation edges). A torch sparse adj_t alone is refused
    (PyG's loader fails on it: no edge_index)."""
    store = data[edge_type] if isinstance(data, HeteroData) and edge_type in data.edge_types else None
    if store is not None and "adj_t" in store and "edge_index" in store:
        return as_tensor(store.edge_index, f"data[{edge_type!r}].edge_index")
    if store is not None and "adj_t" in store and adjacency_layout(store.adj_t) != SPARSE_TENSOR:
        raise ConveyorError(f"edge_label_index names the edge type {edge_type!r} alone, whose edges the data "
                            f"holds as a torch sparse adj_t without edge_index (PyG's LinkNeighborLoader reads "
                            f"the links from edge_index, and fails); give them as (edge_type, index), or keep "
                            f"edge_index (T.ToSparseTensor(remove_edge_index=False)).")
    return graph.relation_edges()[graph.schema.edge_types.index(edge_type)]


def checked_index(index, edge_type: EdgeType, schema: Schema) -> Tensor:
    """A [2, P] tensor of type-local ids: sources of edge_type's source type, destinations of its
    destination type."""
    edges = dense_pairs(index, f"the links of {edge_type!r}")
    for row, node_type in ((0, edge_type[0]), (1, edge_type[2])):
        count = schema.node_counts[schema.node_type(node_type)]
        if edges.size(1) and (int(edges[row].min()) < 0 or int(edges[row].max()) >= count):
            raise ConveyorError(f"the links of {edge_type!r} hold {node_type!r} ids from {int(edges[row].min())} to "
                                f"{int(edges[row].max())}, but that type's nodes are 0..{count - 1}.")
    return edges


def typed_link_data(prepared, layout: HeteroLayout, links: TypedLinks, input_id: Tensor, triplet: bool,
                    subgraph_type: str):
    """PyG's heterogeneous link batch (module doc) of a prepared batch whose extras hold the links
    (samplers/link.py) in its local ids."""
    data, cut = hetero_batch(prepared, layout, subgraph_type)
    extras, (src, _, dst) = prepared.batch.extras, links.edge_type
    rank = cut.rank
    store = data.get_edge_store(*links.edge_type)
    store.input_id = input_id
    if triplet:
        data.get_node_store(src).src_index = rank.index_select(0, extras["src_index"])
        data.get_node_store(dst).dst_pos_index = rank.index_select(0, extras["dst_pos_index"])
        negatives = extras["dst_neg_index"]
        data.get_node_store(dst).dst_neg_index = rank.index_select(0, negatives.reshape(-1)).view_as(negatives)
        for key in ("edge_label_index", "edge_label_time"):
            if key in store:
                del store[key]
        if "seed_time" in extras:  # temporal: each link's time (samplers/link.py)
            data.get_node_store(src).seed_time = data.get_node_store(dst).seed_time = extras["seed_time"]
    else:
        store.edge_label_index = rank.index_select(0, extras["edge_label_index"].reshape(-1)).view(2, -1)
        for key in ("edge_label", "edge_label_time"):
            if key in extras:
                store[key] = extras[key]
    return data
