"""What `conveyor.NeighborLoader` is given (a PyG `Data`, a conveyor `Graph`, or PyG's
`(FeatureStore, GraphStore)` pair), made into the `Graph` the pipeline samples and gathers from,
and the `BatchLayout` each batch is rebuilt with as PyG's `filter_data` would: every key of the
user's data in its order, node-level tensors sliced by `n_id` (x and y in their own dtype and
shape), edge-level ones by `e_id`, every edge kept (parallel ones too), anything else as it is.

A 2-D `x` goes through the feature cache; every other node-level tensor (a 1-D `x`, `y`, masks,
...) through the pipeline's attribute store (partition/attributes.py), which gathers it in the
loader's stage process as the cache gathers `x`.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field, replace
from typing import Any, Dict, List, Tuple

import numpy as np
import torch
from torch import Tensor

from conveyor.core import ConveyorError
from conveyor.loader.adj_t import adjacency_edges, adjacency_layout, refuse_sparse
from conveyor.partition import Graph

X, NODE, EDGE, EDGE_INDEX, NUM_NODES, OTHER = "x", "node", "edge", "edge_index", "num_nodes", "other"
ADJ_T = "adj_t"  # T.ToSparseTensor's adjacency: the graph, and each batch's own (loader/adj_t.py)


@dataclass
class BatchLayout:
    """How a batch rebuilds the user's data: each key in order with its kind (X: the features the
    cache gathers; NODE, EDGE: sliced attributes; EDGE_INDEX; NUM_NODES: the batch's node count;
    ADJ_T: the batch's adj_t, its kind in `others`; OTHER: a value copied as it is, kept in `others`)."""
    keys: List[Tuple[str, str]]
    others: Dict[str, Any] = field(default_factory=dict)


def graph_and_layout(data, leave_out: Tuple[str, ...] = ()) -> Tuple[Graph, BatchLayout]:
    """The pipeline's graph of `data` and how its batches are laid out (module doc); the keys
    `leave_out` of a Data are neither read nor in the batches (a link loader makes its own)."""
    if isinstance(data, Graph):
        return graph_of_graph(data)
    if isinstance(data, (tuple, list)) and len(data) == 2:
        data = data_of_stores(*data)
    if type(data).__name__ == "HeteroData" or not hasattr(data, "edge_index"):
        raise ConveyorError(
            f"conveyor's loaders take a PyG Data, a conveyor.Graph or a (FeatureStore, GraphStore) pair "
            f"(and a HeteroData); got a {type(data).__name__}.")
    return graph_of_data(data, leave_out)


def graph_of_graph(graph: Graph) -> Tuple[Graph, BatchLayout]:
    """A conveyor Graph: x through the cache, y and the other attributes as they are."""
    keys = [(X, X)] if graph.x is not None else []
    keys += [(EDGE_INDEX, EDGE_INDEX)] + ([("y", NODE)] if graph.y is not None else [])
    keys += [(k, NODE) for k in graph.node_attrs] + [(k, EDGE) for k in graph.edge_attrs]
    node_attrs = {**graph.node_attrs, **({"y": graph.y} if graph.y is not None else {})}
    return replace(graph, y=None, node_attrs=node_attrs), BatchLayout(keys)


def graph_of_data(data, leave_out: Tuple[str, ...] = ()) -> Tuple[Graph, BatchLayout]:
    edge_index, num_nodes = edges_of(data), int(data.num_nodes) if data.num_nodes is not None else 0
    layout, x, nodes, edges = BatchLayout([]), None, {}, {}
    for key, value in data:
        if key in leave_out:
            continue
        kind = kind_of(data, key, value)
        layout.keys.append((key, kind))
        if kind == ADJ_T:  # its values (if any) an edge attribute; its kind among `others` (loader/adj_t.py)
            layout.others[key] = adjacency_layout(value)
            values = adjacency_edges(value)[1]
            if values is not None:
                edges[key] = values
        elif kind == X:
            x = as_tensor(value, key)
        elif kind == NODE:
            nodes[key] = as_tensor(value, key)
        elif kind == EDGE:
            edges[key] = as_tensor(value, key)
        elif kind == OTHER:
            layout.others[key] = value
    graph = Graph.from_edge_index(edge_index, num_nodes, dedup=False, x=x, node_attrs=nodes, edge_attrs=edges,
                                  name=type(data).__name__)
    return graph.validate(), layout


def edges_of(data) -> Tensor:
    """The graph's edges: adj_t's where the data has one (PyG samples it, not edge_index), else
    edge_index (none: PyG's Data(num_nodes=N), nodes without edges)."""
    if "adj_t" in data:
        return adjacency_edges(data.adj_t)[0]
    return torch.empty(2, 0, dtype=torch.long) if data.edge_index is None else as_tensor(data.edge_index, EDGE_INDEX)


def kind_of(data, key: str, value) -> str:
    """What `key` of a PyG Data is to a batch (BatchLayout's kinds), as PyG's filter_data decides."""
    if key in (EDGE_INDEX, NUM_NODES, ADJ_T):
        return key
    refuse_sparse(f"data.{key}", value)
    if not isinstance(value, (Tensor, np.ndarray)):
        return OTHER
    if data.is_edge_attr(key):
        return EDGE
    if data.is_node_attr(key):
        return X if key == X and value.ndim == 2 else NODE
    return OTHER


def as_tensor(value, key: str) -> Tensor:
    """A tensor of `value` (a numpy array or memmap shares its memory), on the CPU."""
    if isinstance(value, np.ndarray):
        with warnings.catch_warnings():  # a read-only memmap: conveyor only reads it
            warnings.simplefilter("ignore", UserWarning)
            value = torch.from_numpy(value)
    if not isinstance(value, Tensor):
        raise ConveyorError(f"data.{key} must be a tensor or a numpy array, got a {type(value).__name__}.")
    if value.layout != torch.strided:
        raise ConveyorError(f"data.{key} is a sparse tensor ({value.layout}); conveyor's loaders slice dense "
                            f"tensors by node or edge: pass data.{key} = data.{key}.to_dense().")
    value = value.as_subclass(Tensor)  # PyG's EdgeIndex and other subclasses as plain tensors
    if value.requires_grad:  # a learnable x or edge embedding (PyG takes it): batches carry its values
        value = value.detach()
    if value.is_cuda:
        raise ConveyorError(f"data.{key} is on {value.device}; conveyor.NeighborLoader reads the graph from "
                            f"host memory and puts batches on device=: pass data.cpu().")
    return value


def data_of_stores(feature_store, graph_store):
    """PyG's (FeatureStore, GraphStore) pair of one node and edge type as a Data: the edges in the
    store's COO order (their e_id), every tensor of the feature store, and num_nodes (which PyG's
    batches of a store always carry)."""
    from torch_geometric.data import Data
    from torch_geometric.data.graph_store import EdgeLayout

    edge_attrs = graph_store.get_all_edge_attrs()
    if len(edge_attrs) != 1 or edge_attrs[0].edge_type is not None:
        raise ConveyorError(f"conveyor.NeighborLoader takes a (FeatureStore, GraphStore) pair of one edge type "
                            f"(edge_type=None), got {[a.edge_type for a in edge_attrs]}; use "
                            f"torch_geometric.loader.NeighborLoader for heterogeneous stores.")
    row, col, _ = graph_store._edge_to_layout(edge_attrs[0], EdgeLayout.COO)
    data = Data(edge_index=torch.stack([row, col]))
    sizes = list(edge_attrs[0].size or ())
    for attr in feature_store.get_all_tensor_attrs():
        attr.index = None  # the whole tensor
        data[attr.attr_name] = feature_store.get_tensor(attr)
        sizes.append(data[attr.attr_name].shape[0])
    data.num_nodes = max(sizes, default=int(data.edge_index.max()) + 1 if data.edge_index.numel() else 0)
    return data
