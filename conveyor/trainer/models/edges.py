"""Edge features for the models that take them: PyG's names, `edge_weight` (a scalar per edge:
GCNConv, GraphConv), `edge_attr` (a vector per edge: GATConv with `edge_dim`, GINEConv, ...) and
`edge_type` (each edge's relation: RGCNConv, a typed graph's models, trainer/models/hetero.py).

A model takes one when its layers do: a stock `BasicGNN` says so itself (`supports_edge_weight`,
`supports_edge_attr`; conveyor's GCN takes `edge_weight`), a module of one's own by naming it in its
`forward`. The run asks the pipeline for those of the graph's edge attributes (`edge_spec`), which
its loader stage gathers for each batch's edges, hop 1's first; `per_layer` cuts them into the
model's layers, hop L's first, as `SampledBatch.layers()` orders the edges.
"""
from __future__ import annotations

import inspect
from typing import Dict, List, Tuple

from torch import Tensor, nn
from torch.nn.parallel import DistributedDataParallel
from torch_geometric.nn.models.basic_gnn import BasicGNN

from conveyor.partition import Graph
from conveyor.partition.attributes import AttributeSpec

EDGE_INPUTS = ("edge_weight", "edge_attr", "edge_type")  # edge_type: a typed graph's relations (models/hetero.py)


def edge_inputs(model: nn.Module) -> Tuple[str, ...]:
    """Which of PyG's edge inputs `model` (or the stock module inside its adapter) takes."""
    if callable(getattr(model, "edge_inputs", None)):  # a model that says (HeteroEdgeIndexGNN: before its .module)
        return tuple(model.edge_inputs())
    inner = next((m for m in (getattr(model, "gnn", None), getattr(model, "module", None)) if m is not None), model)
    if isinstance(inner, BasicGNN):
        return tuple(name for name, takes in zip(EDGE_INPUTS, (inner.supports_edge_weight, inner.supports_edge_attr))
                     if takes)
    if callable(getattr(inner, "edge_inputs", None)):
        return tuple(inner.edge_inputs())
    try:
        parameters = inspect.signature(inner.forward).parameters
    except (TypeError, ValueError):
        return ()
    return tuple(name for name in EDGE_INPUTS if name in parameters)


def edge_spec(model: nn.Module, graph: Graph) -> AttributeSpec | None:
    """The graph's edge attributes the model takes, as the pipeline gathers them; None: none."""
    names = tuple(name for name in edge_inputs(model) if name in graph.edge_attrs)
    return AttributeSpec(edge=names) if names else None


def per_layer(prepared, names) -> Dict[str, List[Tensor]]:
    """A prepared batch's edge attributes `names`, cut into its hops and ordered as its layers
    (`SampledBatch.layers()`: hop L's first), and with them the edges' positions (`edge_pos`: what
    tells two parallel edges apart); {} when the batch carries none of them."""
    present = [n for n in names if n in prepared.edge_attrs]
    if not present:
        return {}
    sizes = [int(e.size(1)) for e in prepared.batch.edge_index_per_hop]
    cut = {n: list(prepared.edge_attrs[n].split(sizes))[::-1] for n in present}
    if prepared.batch.edge_pos_per_hop is not None:
        cut["edge_pos"] = list(prepared.batch.edge_pos_per_hop)[::-1]
    return cut


def model_edges(model: nn.Module, prepared) -> Dict[str, List[Tensor]]:
    """The edge inputs of `prepared` to hand `model`'s forward: per layer, with `edge_pos` only for
    a model that merges the hops (EdgeIndexGNN: `takes_edge_pos`)."""
    edges = per_layer(prepared, EDGE_INPUTS)
    inner = model.module if isinstance(model, DistributedDataParallel) else model
    if not getattr(inner, "takes_edge_pos", False):
        edges.pop("edge_pos", None)
    return edges


def layer_inputs(edges: Dict[str, List[Tensor]], layer: int) -> Dict[str, Tensor]:
    """Layer `layer`'s edge inputs (those a conv takes: edge_weight, edge_attr)."""
    return {n: values[layer] for n, values in edges.items() if n in EDGE_INPUTS}


def batch_inputs(model: nn.Module, prepared, degree=None) -> dict:
    """What the trainer hands `model`'s forward besides x and the layers: the nodes' whole-graph
    degrees (`degree`, by node: model.gcn_degrees=graph), its edge inputs per layer, and the
    batch's n_id for a model that reads it (`takes_n_id`: a typed graph's, trainer/models/hetero.py)."""
    inner = model.module if isinstance(model, DistributedDataParallel) else model
    extra = {} if degree is None else {"degree": degree[prepared.batch.n_id.to(degree.device)]}
    if getattr(inner, "takes_n_id", False):
        extra["n_id"] = prepared.batch.n_id
    return {**extra, **model_edges(model, prepared)}
