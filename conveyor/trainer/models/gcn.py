"""GCN's normalisation with the whole graph's degrees, for layer-wise evaluation.

`GCNConv` normalises an edge u -> v by 1 / sqrt(deg(u) deg(v)), counting the degrees in the
edge_index it is given. Layer-wise evaluation (trainer/loop/layerwise.py) gives a layer only the
in-edges of its targets: their degrees are whole, but a source that is not a target of the same
batch would count only the edges into it that the batch holds, and its messages would weigh too
much. Here the degrees come from the whole graph, so each layer gives exactly what a full-graph
forward of the same weights gives (tests/trainer/test_layerwise_exact.py). Training on sampled subgraphs
keeps GCNConv's own normalisation over the batch's edges, as PyG's NeighborLoader training does.
"""
from __future__ import annotations

import inspect

import torch
from torch import Tensor
from torch_geometric.nn import GCNConv

from conveyor.core import ConveyorError
from conveyor.partition import Graph
from conveyor.trainer.models.edges import edge_inputs
from conveyor.trainer.models.sparse import Adjacency, can_sum_sparse, gcn_propagate
from conveyor.trainer.models.sparse import adjacency as sparse_adjacency


def graph_degree(graph: Graph, weight: Tensor | None = None) -> Tensor:
    """Each node's in-edges in the whole graph, its self-loops left out: GCNConv drops them and
    adds one self-loop of its own per node (add_remaining_self_loops). `weight` (the edges' weights
    in CSC order): their sum instead of their count, as GCNConv's weighted degree."""
    dst = torch.repeat_interleave(torch.arange(graph.num_nodes), graph.in_degree())
    weight = torch.ones(graph.num_edges) if weight is None else weight.float()
    kept = graph.indices.long() != dst
    return torch.zeros(graph.num_nodes).index_add_(0, dst[kept], weight[kept])


def degree_weight(model: torch.nn.Module, graph: Graph) -> Tensor | None:
    """The edge weights GCN's whole-graph degrees sum, where the model weighs its edges."""
    return graph.edge_attrs.get("edge_weight") if "edge_weight" in edge_inputs(model) else None


def takes_degree(model: torch.nn.Module, method) -> bool:
    """Whether the model normalises by degrees (a GCNConv inside) and `method` can be given them."""
    return "degree" in inspect.signature(method).parameters and any(
        isinstance(module, GCNConv) for module in model.modules())


def training_degree(gcn_degrees: str, graph: Graph, model: torch.nn.Module, device) -> Tensor | None:
    """What the training loop hands the model by node (trainer/loop/epoch.py): with
    model.gcn_degrees=graph the whole graph's degrees, else None."""
    if gcn_degrees != "graph":
        return None
    if not takes_degree(model, model.forward):
        raise ConveyorError(f"model.gcn_degrees=graph normalises GCN by the whole graph's degrees, but the "
                            f"model ({type(model).__name__}) has no GCNConv or its forward takes no `degree`; "
                            f"use model.gcn_degrees=batch (the default), or model=gcn.")
    return graph_degree(graph, degree_weight(model, graph)).to(device)


def gcn_layer(conv: GCNConv, x: Tensor, edge_index: Tensor, num_dst: int, degree: Tensor | None,
              edge_weight: Tensor | None = None, adjacency: Adjacency | None = None) -> Tensor:
    """`conv`'s output at the first `num_dst` rows of `x` (the targets, whose in-edges
    `edge_index` holds: row 0 sources, row 1 targets, local ids), its edges weighed by
    `edge_weight` where given. `degree`: the whole-graph in-degree (graph_degree, weighted as the
    edges are) of each row of `x`; None: GCNConv's own, over `edge_index`. With `degree`, the sums
    are a sparse-matrix product on the CPU (trainer/models/sparse.py; `adjacency`: edge_index's
    structure where the caller keeps it)."""
    if degree is None or not conv.normalize:
        return conv(x, edge_index, edge_weight)[:num_dst]
    src, dst = edge_index[0].long(), edge_index[1].long()
    fill = (2.0 if conv.improved else 1.0) if conv.add_self_loops else 0.0
    deg = degree.to(x.device, x.dtype) + fill
    norm = deg.pow(-0.5).masked_fill(deg == 0, 0.0)  # as gcn_norm: no edges, no weight
    weight = norm[src] * norm[dst]
    if edge_weight is not None:
        weight = weight * edge_weight.to(weight.dtype).view(-1)
    if conv.add_self_loops:  # a target's own term is fill / deg, in place of any self-loop edge
        weight = weight.masked_fill(src == dst, 0.0)
    own = fill * norm[:num_dst] ** 2
    if can_sum_sparse(x):
        adjacency = adjacency or sparse_adjacency(edge_index, num_dst, x.size(0))
        return gcn_propagate(conv, x, adjacency, adjacency.in_slot_order(weight), own)
    h = conv.lin(x)
    loops = torch.arange(num_dst, device=x.device)
    out = conv.propagate(torch.stack([torch.cat([src, loops]), torch.cat([dst, loops])]), x=(h, h[:num_dst]),
                         edge_weight=torch.cat([weight, own]), size=(h.size(0), num_dst))
    return out + conv.bias if conv.bias is not None else out
