"""Layer-wise full-neighbour inference, as PyG's and DGL's ogbn-products examples evaluate
(PyG: `model.inference(x_all, subgraph_loader)`): layer 1's output for every node that needs it,
in batches over all their in-neighbours, then layer 2's from those, and so on. No sampling: the
figures are exact, and equal to a sampled evaluation with every fanout -1.

A model can be evaluated so when it has `num_layers` and `inference_per_layer(layer, x,
edge_index, batch_size)` (PyG's `BasicGNN` names): layer `layer` from the features `x` of its
sources (its targets first) to its first `batch_size` targets. conveyor's models and
`PerHopGNN` have both (their `forward` runs through it; a bare PyG `BasicGNN` is run through
`PerHopGNN`); a module of your own may add them. A model whose `inference_per_layer` also takes
`degree` gets the whole graph's in-degree of each row of `x` (trainer/gcn.py): GCN's
normalisation then reads whole-graph degrees, and the output is a full-graph forward's
(tests/test_layerwise_exact.py), though a source's in-edges are not in the batch.

Cost: layer i runs only on the nodes within L - i hops of the evaluated ones, each batch with all
their in-edges. Only one batch is on the device at a time; each layer's output waits in host
memory (nodes x hidden x 4 bytes: ~2.5 GB for ogbn-products at hidden 256), as in PyG's example.
"""
from __future__ import annotations

from contextlib import nullcontext
from typing import List

import torch
from torch import Tensor, nn
from torch_geometric.nn.models.basic_gnn import BasicGNN

from conveyor.partition import ConveyorError, Graph
from conveyor.partition.expansion import in_neighbour_chunks
from conveyor.samplers import build_sampler

from .adapter import PerHopGNN
from .gcn import graph_degree, takes_degree


def can_run_layerwise(model: nn.Module) -> bool:
    return callable(getattr(model, "inference_per_layer", None)) and isinstance(
        getattr(model, "num_layers", None), int)


def resolve_inference(name: str, model: nn.Module) -> str:
    """`trainer.inference` for this model: `auto` is layerwise when the model can, else sampled;
    an explicit `layerwise` the model cannot run is refused."""
    if can_run_layerwise(model):
        return "sampled" if name == "sampled" else "layerwise"
    if name == "layerwise":
        raise ConveyorError(
            f"trainer.inference=layerwise, but the model ({type(model).__name__}) cannot be "
            f"evaluated layer by layer: it needs an int attribute `num_layers` and a method "
            f"`inference_per_layer(layer, x, edge_index, batch_size)` returning layer `layer`'s "
            f"output for the first batch_size rows of x (PyG's BasicGNN names; docs/design.md, "
            f"the trainer). Add them, or use trainer.inference=sampled (or auto).")
    return "sampled"


def reached_nodes(graph: Graph, nodes: Tensor, hops: int) -> List[Tensor]:
    """[nodes within `hops` hops of `nodes` (along in-edges), ..., within 1 hop, `nodes`], each
    ascending: the targets of each layer when the last layer's targets are `nodes`."""
    inside = torch.zeros(graph.num_nodes, dtype=torch.bool)
    inside[nodes] = True
    sets, frontier = [inside.nonzero().flatten()], nodes
    for _ in range(hops):
        before = inside.clone()
        for neighbours, _ in in_neighbour_chunks(graph, frontier):
            inside[neighbours] = True
        frontier = (inside & ~before).nonzero().flatten()  # only new nodes have unread in-edges
        sets.append(inside.nonzero().flatten())
    return sets[::-1]


@torch.no_grad()
def layerwise_logits(model: nn.Module, graph: Graph, nodes: Tensor, batch_size: int,
                     device: torch.device, autocast=nullcontext,
                     feature_dtype: torch.dtype | None = None) -> Tensor:
    """The model's output (on the host, float32) at `nodes`, one row each, computed layer by
    layer over every in-neighbour. `feature_dtype`: round the input features through it first,
    as the feature cache does during training (cache.dtype)."""
    model = PerHopGNN(model) if isinstance(model, BasicGNN) else model
    model.eval()
    targets = reached_nodes(graph, torch.unique(nodes), model.num_layers - 1)
    full = build_sampler("bsp", graph, [-1])  # one hop, every in-neighbour: no random draws
    degree = graph_degree(graph) if takes_degree(model, model.inference_per_layer) else None
    inputs, input_ids = graph.x, None  # layer 1 reads the features, by global id
    for layer, wanted in enumerate(targets):
        outputs = None
        for start in range(0, wanted.numel(), batch_size):
            batch = full.sample(wanted[start:start + batch_size])
            (edge_index, _num_src, num_dst), = batch.layers()
            rows = batch.n_id if input_ids is None else torch.searchsorted(input_ids, batch.n_id)
            x = inputs[rows]
            x = (x.to(feature_dtype) if feature_dtype is not None and layer == 0 else x).to(device).float()
            extra = {} if degree is None else {"degree": degree[batch.n_id].to(device)}
            with autocast():
                out = model.inference_per_layer(layer, x, edge_index.to(device), num_dst, **extra)
            out = out.float().cpu()
            if outputs is None:
                outputs = torch.empty(wanted.numel(), out.size(1))
            outputs[start:start + num_dst] = out
        inputs, input_ids = outputs, wanted
    return inputs[torch.searchsorted(input_ids, nodes)]
