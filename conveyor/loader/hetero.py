"""`conveyor.NeighborLoader` on a PyG `HeteroData` (or a typed (FeatureStore, GraphStore) pair): the
data as a typed graph (partition/hetero.py: one CSC, node ids grouped by type, each relation its
sub-rows) and each batch as PyG's heterogeneous loader makes it (`filter_hetero_data` and
`NodeLoader.filter_fn`): every node and edge type of the data with its keys in order, node-level
tensors by the type's `n_id`, edge-level ones by the edge type's `e_id`, then per type `n_id`,
per edge type `e_id`, `num_sampled_nodes` / `num_sampled_edges` per type (directional subgraphs,
as pyg-lib's), and on the input type `input_id` and `batch_size`.

A node type's 2-D floating `x` goes through the typed feature cache (cache/typed.py; the first
such x's dtype: another dtype travels as an attribute), everything else through the typed
attribute store (partition/typed_attributes.py), both in the pipeline's loader stage. The batch is
sampled as one graph with global ids (samplers/typed.py); here it is cut into types: a node's type
from its id, an edge's from its relation, local ids as each node's rank among its type's nodes in
n_id (so each type's seeds and earlier hops come first, as in PyG's batches).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import HeteroData

from conveyor.core import ConveyorError
from conveyor.loader.adj_t import adjacency_edges, adjacency_layout, batch_adjacency, refuse_sparse
from conveyor.loader.pyg_input import ADJ_T, EDGE, EDGE_INDEX, NODE, NUM_NODES, OTHER, X, as_tensor
from conveyor.loader.repeated_seeds import directional_repeats
from conveyor.loader.to_pyg import kept
from conveyor.partition.attributes import E_ID
from conveyor.partition.hetero import EDGE_TYPE, Schema, TypeCut, TypedGraph, by_relation, split_flat, typed_graph
from conveyor.samplers.subgraph import pyg_edges
from conveyor.samplers.validation import check_seeds


@dataclass
class HeteroLayout:
    """How a batch rebuilds the user's HeteroData: each node and edge type's keys in order with
    their kinds (pyg_input's X, NODE, EDGE, EDGE_INDEX, NUM_NODES, OTHER), the values copied as
    they are (`others`, by (type or None, key)), and the schema."""
    schema: Schema
    node_keys: Dict[str, List[Tuple[str, str]]] = field(default_factory=dict)
    edge_keys: Dict[tuple, List[Tuple[str, str]]] = field(default_factory=dict)
    global_keys: List[str] = field(default_factory=list)
    others: Dict[Tuple[Any, str], Any] = field(default_factory=dict)
    x_widths: Dict[str, int] = field(default_factory=dict)  # the node types whose x the cache gathers


def is_hetero(data) -> bool:
    return isinstance(data, HeteroData)


def hetero_graph_and_layout(data: HeteroData, leave_out: Tuple[str, ...] = ()) -> Tuple[TypedGraph, HeteroLayout]:
    """The typed graph the pipeline samples and gathers from, and how its batches are laid out; the
    keys `leave_out` of its stores are neither read nor in the batches (a link loader makes its own)."""
    if not data.edge_types and not data.node_types:
        raise ConveyorError("the HeteroData given has no node or edge types; give it node types (data['paper'].x) "
                            "and edge types (data['paper', 'cites', 'paper'].edge_index).")
    layout, x, node, edges, edge = HeteroLayout(Schema((), (), (), ())), {}, {}, {}, {}
    cached_dtype = next((v.dtype for _, store in data.node_items() for k, v in store.items()
                         if _is_features(k, v)), None)
    for t, store in data.node_items():
        layout.node_keys[t] = []
        for key, value in ((k, v) for k, v in store.items() if k not in leave_out):
            refuse_sparse(f"data[{t!r}].{key}", value)
            kind = NUM_NODES if key == NUM_NODES else _value_kind(store.is_node_attr(key), value, NODE)
            kind = X if kind == NODE and _is_features(key, value) and value.dtype == cached_dtype else kind
            layout.node_keys[t].append((key, kind))
            _keep(layout, t, key, kind, value, x if kind == X else node)
    for e, store in data.edge_items():
        layout.edge_keys[e] = _edge_keys(layout, e, store, leave_out, edges, edge)
    for key, value in data._global_store.items():
        layout.global_keys.append(key)
        layout.others[(None, key)] = value
    counts = {t: int(store.num_nodes or 0) for t, store in data.node_items()}
    graph = typed_graph(counts, {e: edges[(e, EDGE_INDEX)] for e in data.edge_types},
                        x={t: v for (t, _), v in x.items()}, node=node, edge=edge, name="HeteroData")
    layout.schema = graph.schema
    layout.x_widths = {t: int(v.size(1)) for (t, _), v in x.items()}
    return graph, layout


def _edge_keys(layout: HeteroLayout, e, store, leave_out: Tuple[str, ...], edges: dict, edge: dict):
    """One edge type's keys in order with their kinds; its edges kept in `edges` (adj_t's in its CSR
    order where it has one, which PyG samples over edge_index: loader/adj_t.py), attributes in `edge`."""
    keys, by_adjacency = [], ADJ_T in store
    for key, value in ((k, v) for k, v in store.items() if k not in leave_out):
        if key == ADJ_T:
            layout.others[(e, key)] = adjacency_layout(value, f"data[{e!r}].adj_t")
            edges[(e, EDGE_INDEX)], values = adjacency_edges(value)
            if values is not None:  # the batch's adj_t values: an edge attribute, gathered by e_id
                edge[(e, key)] = as_tensor(values, f"{e}.adj_t's values")
            keys.append((key, ADJ_T))
            continue
        refuse_sparse(f"data[{e!r}].{key}", value)
        kind = EDGE_INDEX if key == EDGE_INDEX else _value_kind(store.is_edge_attr(key), value, EDGE)
        keys.append((key, kind))
        if not (kind == EDGE_INDEX and by_adjacency):  # with adj_t, edge_index is the batch's edges
            _keep(layout, e, key, kind, value, edges if kind == EDGE_INDEX else edge)
    if by_adjacency:
        _check_rows(e, keys, edge, edges[(e, EDGE_INDEX)].size(1))
    return keys


def _check_rows(e, keys: List[Tuple[str, str]], edge: dict, entries: int) -> None:
    """Each edge attribute beside an adj_t has a row per adj_t entry (the edge's e_id is its place
    in adj_t's order); a torch sparse adj_t sums parallel edges, so the rows may no longer match."""
    for key in (k for k, kind in keys if kind == EDGE and edge[(e, k)].size(0) != entries):
        raise ConveyorError(f"data[{e!r}].{key} has {edge[(e, key)].size(0)} rows but data[{e!r}].adj_t holds "
                            f"{entries} entries (edges), so its rows cannot be cut by edge (a torch sparse adj_t "
                            f"sums parallel edges into one entry); give the edges as a SparseTensor "
                            f"(T.ToSparseTensor() with torch_sparse installed) or as edge_index.")


def _is_features(key: str, value) -> bool:
    return key == X and isinstance(value, Tensor) and value.dim() == 2 and value.is_floating_point()


def _value_kind(is_attr: bool, value, kind: str) -> str:
    return kind if is_attr and isinstance(value, (Tensor, np.ndarray)) else OTHER


def _keep(layout: HeteroLayout, owner, key: str, kind: str, value, into: dict) -> None:
    if kind == OTHER:
        layout.others[(owner, key)] = value
    elif kind != NUM_NODES:
        into[(owner, key)] = as_tensor(value, f"{owner}.{key}")


def typed_stores(graph_store) -> bool:
    """Whether a GraphStore holds typed edges (else pyg_input.py reads the pair as a Data)."""
    edge_attrs = getattr(graph_store, "get_all_edge_attrs", None)
    return callable(edge_attrs) and any(a.edge_type is not None for a in edge_attrs())


def hetero_data_of_stores(feature_store, graph_store) -> HeteroData:
    """PyG's typed (FeatureStore, GraphStore) pair as a HeteroData: each edge type's edges in the
    store's COO order, every tensor of the feature store by its group (the node type), and each
    node type's num_nodes (which PyG's batches of a store carry)."""
    from torch_geometric.data.graph_store import EdgeLayout

    data, sizes = HeteroData(), {}
    for attr in graph_store.get_all_edge_attrs():
        row, col, _ = graph_store._edge_to_layout(attr, EdgeLayout.COO)
        data.get_edge_store(*attr.edge_type).edge_index = torch.stack([row, col])
        src, _, dst = attr.edge_type
        for node_type, size in zip((src, dst), attr.size or (None, None)):
            sizes.setdefault(node_type, []).append(size if size is not None else 0)
    for attr in feature_store.get_all_tensor_attrs():
        attr.index = None  # the whole tensor
        data.get_node_store(attr.group_name)[attr.attr_name] = value = feature_store.get_tensor(attr)
        sizes.setdefault(attr.group_name, []).append(value.shape[0])
    for node_type, found in sizes.items():
        data.get_node_store(node_type).num_nodes = max(found)
    return data


def with_weights(graph: TypedGraph, weight_attr: Optional[str]) -> TypedGraph:
    """The graph with every relation's `weight_attr` as one edge attribute in CSC order, which the
    sampler draws by (samplers/weights.py); every relation must have it."""
    if weight_attr is None:
        return graph
    missing = [e for r, e in enumerate(graph.schema.edge_types) if f"edge.{r}.{weight_attr}" not in graph.typed]
    if missing:
        raise ConveyorError(f"weight_attr={weight_attr!r}, but the edge type(s) {missing} have no such attribute; "
                            f"give every edge type data[edge_type].{weight_attr}.")
    weights = torch.cat([graph.typed[f"edge.{r}.{weight_attr}"] for r in range(len(graph.schema.edge_types))])
    graph.edge_attrs = {**graph.edge_attrs, weight_attr: weights[graph.edge_ids]}
    return graph


def typed_input_nodes(input_nodes, graph: TypedGraph, subgraph_type: str = "directional") -> Tuple[Tensor, bool, str]:
    """PyG's heterogeneous input_nodes (a node type, or (type, ids | boolean mask | None)) as global
    ids, whether they came as a mask (input_id is then the node ids, else positions), and the type."""
    node_type, ids = (input_nodes, None) if isinstance(input_nodes, str) else (None, None)
    if isinstance(input_nodes, (tuple, list)) and len(input_nodes) == 2 and isinstance(input_nodes[0], str):
        node_type, ids = input_nodes
    if node_type is None:
        raise ConveyorError(f"a HeteroData's input_nodes name the seeds' node type: 'paper', or ('paper', ids), "
                            f"('paper', mask) or ('paper', None); got {input_nodes!r}.")
    t = graph.schema.node_type(node_type)
    offset, count = graph.schema.offsets[t], graph.schema.node_counts[t]
    if ids is None:
        return torch.arange(count) + offset, False, node_type
    ids = torch.tensor(ids) if isinstance(ids, range) else torch.as_tensor(ids)
    if ids.dtype == torch.bool:
        if ids.shape != (count,):
            raise ConveyorError(f"input_nodes' mask of {node_type!r} must have one entry per node ({count}), got "
                                f"shape {tuple(ids.shape)}.")
        return ids.nonzero().view(-1) + offset, True, node_type
    ids = check_seeds(ids.cpu(), count, unique=False)  # a node given more than once: as PyG (repeated_seeds.py)
    return directional_repeats(ids, subgraph_type) + offset, False, node_type


def to_hetero_data(prepared, layout: HeteroLayout, input_type: str, input_id: Tensor,
                   subgraph_type: str = "directional") -> HeteroData:
    """`prepared` (a pipeline.PreparedBatch of a typed graph) as PyG's heterogeneous node batch:
    `hetero_batch`'s, with input_id and batch_size on the input type."""
    data, _ = hetero_batch(prepared, layout, subgraph_type)
    data.get_node_store(input_type).input_id = input_id
    data.get_node_store(input_type).batch_size = int(prepared.batch.num_nodes_per_hop[0])
    return data


def hetero_batch(prepared, layout: HeteroLayout, subgraph_type: str = "directional") -> Tuple[HeteroData, TypeCut]:
    """`prepared` (a pipeline.PreparedBatch of a typed graph) as PyG's heterogeneous batch, and its
    nodes cut into types; a bidirectional one as PyG's `HeteroSamplerOutput.to_bidirectional` makes
    it (no e_id, no edge attributes, no counts per hop for the edge types it joins)."""
    schema, batch = layout.schema, prepared.batch
    cut = TypeCut(schema, batch.n_id, batch.num_nodes_per_hop.tolist())
    edges = typed_edges(prepared, cut)
    data = HeteroData()
    features = split_features(prepared.x, cut.per_type, layout)
    for t, node_type in enumerate(schema.node_types):
        fill_node_store(data.get_node_store(node_type), layout, node_type, t, prepared, cut, features)
    rows = {e: (edges.edge_index[r], True) for r, e in enumerate(schema.edge_types)}
    if subgraph_type == "bidirectional":
        rows = bidirectional_rows({e: v for e, (v, _) in rows.items()}, cut, schema)
    for r, edge_type in enumerate(schema.edge_types):
        store = data.get_edge_store(*edge_type)
        row, with_ids = rows[edge_type]
        sizes = tuple(cut.per_type[schema.node_type(edge_type[i])] for i in (2, 0))  # adj_t's: targets, sources
        fill_edge_store(store, layout, edge_type, r, row, prepared, edges.masks[r] if with_ids else None, with_ids,
                        sizes)
        if with_ids and edges.e_id is not None:
            store.e_id = edges.e_id[r] - schema.edge_offsets[r]
        if subgraph_type == "directional":
            store.num_sampled_edges = edges.per_hop[r]
    for key in layout.global_keys:
        data[key] = layout.others[(None, key)]
    if subgraph_type == "directional":
        for node_type, counts in zip(schema.node_types, cut.per_hop_nodes()):
            data.get_node_store(node_type).num_sampled_nodes = counts
    if "batch" in batch.extras:  # disjoint subgraphs: whose each node is (samplers/disjoint.py), type by type
        for t, node_type in enumerate(schema.node_types):
            data.get_node_store(node_type).batch = batch.extras["batch"].index_select(0, cut.positions(t))
    return data, cut


@dataclass
class TypedEdges:
    """PyG's edges of a batch cut by relation: type-local edge_index, the mask of its kept edges
    among all it drew (None: all kept), e_id (global), counts per hop."""
    edge_index: List[Tensor]
    masks: List[Optional[Tensor]]
    e_id: Optional[List[Tensor]]
    per_hop: List[List[int]]


def typed_edges(prepared, cut: TypeCut) -> TypedEdges:
    edge_index, _, mask, edge_counts = pyg_edges(prepared.batch)
    every_type = prepared.edge_attrs[EDGE_TYPE]
    relation, num_relations, hops = kept(every_type, mask).long(), len(cut.schema.edge_types), len(edge_counts)
    order, counts = by_relation(relation, num_relations)  # one sort, then views per relation
    local = cut.rank.index_select(0, edge_index.reshape(-1)).view(2, -1).index_select(1, order)
    hop = torch.repeat_interleave(torch.arange(hops, device=relation.device),
                                  torch.tensor(edge_counts, dtype=torch.long, device=relation.device))
    per_hop = torch.bincount(relation * hops + hop, minlength=num_relations * hops).view(num_relations, hops)
    e_id = kept(prepared.edge_attrs[E_ID], mask).index_select(0, order).split(counts) \
        if E_ID in prepared.edge_attrs else None
    masks = [None if mask is None else mask[every_type == r] for r in range(num_relations)]
    return TypedEdges(list(local.split(counts, 1)), masks, e_id, per_hop.tolist())


def bidirectional_rows(rows: Dict[tuple, Tensor], cut: TypeCut, schema: Schema) -> Dict[tuple, Tuple[Tensor, bool]]:
    """Each edge type's edges made bidirectional by PyG's own HeteroSamplerOutput.to_bidirectional,
    and whether it kept its edge ids (an edge type it joined with its reverse has none)."""
    from torch_geometric.sampler import HeteroSamplerOutput

    out = HeteroSamplerOutput(node={t: cut.nodes(i) for i, t in enumerate(schema.node_types)},
                              row={e: v[0] for e, v in rows.items()}, col={e: v[1] for e, v in rows.items()},
                              edge={e: v.new_zeros(v.size(1)) for e, v in rows.items()}).to_bidirectional()
    return {e: (torch.stack([out.row[e], out.col[e]]), out.edge[e] is not None) for e in rows}


def split_features(x: Optional[Tensor], per_type: List[int], layout: HeteroLayout) -> Dict[str, Tensor]:
    """The flat features of the typed cache (cache/typed.py) as each type's [n_t, F_t] view."""
    if x is None:
        return {}
    types = layout.schema.node_types
    return {types[t]: v for t, v in split_flat(x, per_type, [layout.x_widths.get(n) for n in types]).items()}


def fill_node_store(store, layout: HeteroLayout, node_type: str, t: int, prepared, cut: TypeCut, features) -> None:
    for key, kind in layout.node_keys[node_type]:
        if kind == X:
            store[key] = features[node_type]
        elif kind == NODE:
            store[key] = prepared.node_attrs[f"{t}/{key}"]
        elif kind == NUM_NODES:
            store.num_nodes = cut.per_type[t]
        else:
            store[key] = layout.others[(node_type, key)]
    if "n_id" not in store:
        store.n_id = cut.nodes(t)


def fill_edge_store(store, layout: HeteroLayout, edge_type, r: int, edge_index: Tensor, prepared,
                    mask: Optional[Tensor], with_attrs: bool = True, sizes: Tuple[int, int] = (0, 0)) -> None:
    """One edge type's store of the batch; `sizes` (its destination and source types' node counts
    in the batch) are its adj_t's, whose values are those of the kept edges (none without e_id, as PyG)."""
    for key, kind in layout.edge_keys[edge_type]:
        if kind == EDGE_INDEX:
            store.edge_index = edge_index
        elif kind == ADJ_T:
            values = prepared.edge_attrs.get(f"{r}/{key}") if with_attrs else None
            store[key] = batch_adjacency(layout.others[(edge_type, key)], edge_index,
                                         None if values is None else kept(values, mask), sizes)
        elif kind == EDGE:
            if with_attrs:
                store[key] = kept(prepared.edge_attrs[f"{r}/{key}"], mask)
        else:
            store[key] = layout.others[(edge_type, key)]
