"""Layer-wise full-neighbour inference, as PyG's and DGL's ogbn-products examples evaluate
(PyG: `model.inference(x_all, subgraph_loader)`): layer 1's output for every node that needs it,
in batches over all their in-neighbours, then layer 2's from those, and so on. No sampling: the
figures are exact, and equal to a sampled evaluation with every fanout -1.

A model can be evaluated so when it has `num_layers` and `inference_per_layer(layer, x,
edge_index, batch_size)` (PyG's `BasicGNN` names): layer `layer` from the features `x` of its
sources (its targets first) to its first `batch_size` targets. conveyor's models and
`PerHopGNN` have both (their `forward` runs through it; a bare PyG `BasicGNN` is run through
`PerHopGNN`); a module of your own may add them. A model whose `inference_per_layer` also takes
`degree` gets the whole graph's in-degree of each row of `x` (trainer/models/gcn.py): GCN's
normalisation then reads whole-graph degrees, and the output is a full-graph forward's
(tests/trainer/test_layerwise_exact.py), though a source's in-edges are not in the batch.

Cost: layer i runs only on the nodes within L - i hops of the evaluated ones, each batch with all
their in-edges. Only one batch is on the device at a time; each layer's output waits in host
memory (nodes x hidden x 4 bytes: ~2.5 GB for ogbn-products at hidden 256), as in PyG's example.
"""
from __future__ import annotations

import inspect
from contextlib import nullcontext

import torch
from torch import Tensor, nn
from torch_geometric.nn.models.basic_gnn import BasicGNN
from tqdm import tqdm

from conveyor.core import ConveyorError
from conveyor.partition import Graph
from conveyor.partition.hetero import flat_features, is_typed
from conveyor.trainer.loop.plan import (
    KEEP_EDGES,
    LayerwisePlan,
    PipelinePlan,
    WholeLayerPlan,
    reached_nodes,  # noqa: F401  (the plan's, named here too)
)
from conveyor.trainer.models.adapter import PerHopGNN, unwrapped
from conveyor.trainer.models.edges import edge_inputs
from conveyor.trainer.models.gcn import degree_weight, graph_degree, takes_degree


def can_run_layerwise(model: nn.Module) -> bool:
    return callable(getattr(model, "inference_per_layer", None)) and isinstance(
        getattr(model, "num_layers", None), int)


def resolve_inference(name: str, model: nn.Module, num_nodes: int | None = None,
                      max_nodes: int | None = None) -> str:
    """`trainer.inference` for this model: `auto` is layerwise when the model can and the graph has
    at most `max_nodes` nodes (trainer.layerwise_max_nodes: a layer-wise pass over a huge graph
    keeps layer outputs of every node within L-1 hops in memory), else sampled (the run's
    start-up names why: `layerwise_obstacle`, `too_large_for_layerwise`); an explicit `layerwise`
    the model cannot run is refused, with that reason."""
    if can_run_layerwise(model):
        if name == "auto" and too_large_for_layerwise(num_nodes, max_nodes):
            return "sampled"
        return "sampled" if name == "sampled" else "layerwise"
    if name == "layerwise":
        raise ConveyorError(f"trainer.inference=layerwise, but the model cannot be evaluated layer by layer: "
                            f"{layerwise_obstacle(model)}. Use trainer.inference=sampled (or auto).")
    return "sampled"


def too_large_for_layerwise(num_nodes: int | None, max_nodes: int | None) -> bool:
    """Whether `auto` evaluates sampled for the graph's size alone (None: no limit)."""
    return num_nodes is not None and max_nodes is not None and num_nodes > max_nodes


def layer_edge_inputs(model: nn.Module, graph: Graph) -> list:
    """The graph's edge attributes the model's layers take, by name (trainer/models/edges.py)."""
    parameters = inspect.signature(model.inference_per_layer).parameters
    takes_any = any(p.kind == p.VAR_KEYWORD for p in parameters.values())
    return [n for n in edge_inputs(model) if n in graph.edge_attrs and (takes_any or n in parameters)]


def layerwise_obstacle(model: nn.Module) -> str | None:
    """Why `model` cannot be evaluated layer by layer (None: it can), in the user's terms: the
    module they gave or named, not conveyor's adapter around it."""
    if can_run_layerwise(model):
        return None
    inner = unwrapped(model)
    name = type(inner).__name__
    if isinstance(inner, BasicGNN) and inner.jk_mode is not None:
        return (f"{name}(jk={inner.jk_mode!r}) combines every layer's output in a last step (jumping "
                f"knowledge), which a pass over the whole graph one layer at a time does not keep; "
                f"without jk it would be")
    if isinstance(inner, BasicGNN) and inner.supports_norm_batch:
        return (f"{name}'s norm ({type(inner.norms[0]).__name__}) normalises over a whole batch, which "
                f"differs between a sampled batch and a layer over the whole graph; a per-node norm "
                f"(batch_norm, layer_norm) would not")
    return (f"{name} has no int attribute `num_layers` and method `inference_per_layer(layer, x, "
            f"edge_index, batch_size)` returning layer `layer`'s output for the first batch_size rows of "
            f"x (PyG's BasicGNN names; docs/design.md, the trainer); add them to evaluate it layer-wise")


def runs_whole_layers(model: nn.Module, graph: Graph, device: torch.device, autocast=nullcontext,
                      feature_dtype: torch.dtype | None = None) -> bool:
    """Whether a WholeLayerPlan evaluates `model` (trainer/loop/plan.py): a model that computes a
    whole layer at once (`runs_whole_layers()`, the built-in SAGE), on the CPU without autocast,
    float32 features used as they are, an untyped graph whose plan may be kept (KEEP_EDGES)."""
    whole = getattr(model, "runs_whole_layers", None)
    if not (callable(whole) and whole()) or device.type != "cpu" or is_typed(graph) or graph.x is None:
        return False
    if graph.x.dtype != torch.float32 or feature_dtype not in (None, torch.float32):
        return False
    with autocast():
        autocasting = torch.is_autocast_enabled("cpu")
    return not autocasting and graph.num_edges * model.num_layers <= KEEP_EDGES


def whole_layer_logits(model: nn.Module, nodes: Tensor, plan: WholeLayerPlan, progress: bool = False) -> Tensor:
    """`layerwise_logits` by whole layers: each layer's output from the one below, all targets at once."""
    inputs = plan.graph.x
    for layer in tqdm(range(len(plan)), desc="eval", disable=None if progress else True, leave=False):
        inputs = model.inference_whole_layer(layer, inputs, plan.adjacency(layer), plan.batch_size)
    return inputs[torch.searchsorted(plan.targets[-1], nodes)]


@torch.no_grad()
def layerwise_logits(model: nn.Module, graph: Graph, nodes: Tensor, batch_size: int,
                     device: torch.device, autocast=nullcontext,
                     feature_dtype: torch.dtype | None = None,
                     plan: LayerwisePlan | PipelinePlan | WholeLayerPlan | None = None,
                     progress: bool = False, num_layers: int | None = None) -> Tensor:
    """The model's output (on the host, float32) at `nodes`, one row each, computed layer by
    layer over every in-neighbour. `feature_dtype`: round the input features through it first,
    as the feature cache does during training (cache.dtype). `plan`: the batches, kept from an
    earlier call over the same nodes (trainer/loop/plan.py); `progress`: a tqdm bar over them.
    `num_layers`: only the first ones (the nodes' embeddings after them), instead of all. Without a
    plan: a WholeLayerPlan where one applies (`runs_whole_layers`), else a LayerwisePlan."""
    model = PerHopGNN(model) if isinstance(model, BasicGNN) else model
    model.eval()
    if plan is None:
        whole = runs_whole_layers(model, graph, device, autocast, feature_dtype)
        plan = (WholeLayerPlan if whole else LayerwisePlan)(graph, nodes, num_layers or model.num_layers, batch_size)
    if isinstance(plan, WholeLayerPlan):
        return whole_layer_logits(model, nodes, plan, progress)
    return batch_logits(model, graph, nodes, device, autocast, feature_dtype, plan, progress)


def batch_logits(model: nn.Module, graph: Graph, nodes: Tensor, device: torch.device, autocast,
                 feature_dtype: torch.dtype | None, plan: LayerwisePlan | PipelinePlan, progress: bool) -> Tensor:
    """`layerwise_logits` batch by batch: each batch's sources gathered, its targets computed."""
    takes_degrees = takes_degree(model, model.inference_per_layer)
    takes_adjacency = "adjacency" in inspect.signature(model.inference_per_layer).parameters
    degree = graph_degree(graph, degree_weight(model, graph)) if takes_degrees else None
    edge_names = layer_edge_inputs(model, graph)
    inputs = outputs = graph.x  # layer 1 reads the features, by global id
    bar = tqdm(plan, total=len(plan), desc="eval", disable=None if progress else True, leave=False,
               dynamic_ncols=True)  # disable=None: shown on a terminal only, not in a log file
    for batch in bar:
        if batch.start == 0:  # a new layer: its input is the previous layer's output
            inputs, outputs = outputs, None
        if batch.x is not None:  # gathered by the pipeline, through the cache (in its dtype already)
            x = batch.x.to(device).float()
        else:  # a typed graph's features: flat, as its cache gathers them (cache/typed.py)
            x = flat_features(graph, batch.n_id) if is_typed(graph) and batch.layer == 0 else inputs[batch.rows]
            x = (x.to(feature_dtype) if feature_dtype is not None and batch.layer == 0 else x).to(device).float()
        extra = {} if degree is None else {"degree": degree[batch.n_id].to(device)}
        extra.update({"n_id": batch.n_id.to(device)} if getattr(model, "takes_n_id", False) else {})
        extra.update({"adjacency": batch.adjacency} if takes_adjacency and batch.adjacency is not None else {})
        extra.update({n: graph.edge_attrs[n][batch.positions.cpu()].to(device) for n in edge_names})
        with autocast():
            out = model.inference_per_layer(batch.layer, x, batch.edge_index.to(device), batch.num_dst, **extra)
        out = out.float().cpu()
        if outputs is None:
            outputs = torch.empty(plan.targets[batch.layer].numel(), out.size(1))
        outputs[batch.start:batch.start + batch.num_dst] = out
    return outputs[torch.searchsorted(plan.targets[-1], nodes)]
