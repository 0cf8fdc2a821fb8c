"""What `fit()` checks of the graph, model and loss it is handed, before any work: the command
line's own checks of a dataset's arrays (partition/datasets/contents.py: finite features in
float32's range, labels 0..C-1 that all occur, splits without repeated or shared nodes, no
unlabelled training node), then what only Python can hand over (features that require grad,
float labels, `[N, C]` targets) and whether the model fits the data's shapes.
Each refusal is one paragraph, a ConveyorError, naming the fix.
"""
from __future__ import annotations

import dataclasses

import torch
from torch import Tensor, nn

from conveyor.core import ConveyorError
from conveyor.core.device import resolve_device
from conveyor.partition import Graph, TypedGraph
from conveyor.partition.datasets import check_trainable
from conveyor.partition.datasets.contents import check_features, check_labels, check_splits
from conveyor.partition.graph import _split_ids
from conveyor.partition.hetero import with_target
from conveyor.pipeline.room import check_batch_room
from conveyor.trainer.models.sizes import check_model_size

SPLITS = ("train_idx", "val_idx", "test_idx")
MODEL_ARGUMENT = ("fit(model=...) takes None (the configured model), a config option name "
                  "(\"sage\", \"gcn\", \"mlp\", \"gat\") or a torch.nn.Module instance (a PyG model "
                  "such as GraphSAGE(in_channels, hidden_channels, num_layers, out_channels), or "
                  "your own module with forward(x, edge_index) or forward(x, layers))")


def checked_graph(given) -> Graph:
    """`given` (a conveyor.Graph or a PyG Data or HeteroData) as a Graph, once it passed every check."""
    if type(given).__name__ == "HeteroData":
        return checked_typed_graph(given)
    graph, where = graph_given(given)
    if graph.x is None or graph.y is None:
        check_trainable(graph, where)  # says that training needs both
    graph.x = graph.x.float()  # trained in float32, as every dataset loader gives it (checked above)
    declared = given.num_classes if isinstance(given, Graph) else None  # a Data's count is max(y) + 1
    graph.num_classes, flat = checked_labels(graph.y, declared, where)
    splits = {name: _ids(getattr(graph, name)) for name in SPLITS}
    splits = check_splits(splits, flat, {name: f"{name} of {where}" for name in SPLITS})
    for name, ids in splits.items():
        setattr(graph, name, ids)
    return check_trainable(graph, where)


def checked_typed_graph(data) -> TypedGraph:
    """A HeteroData as a typed graph (partition/hetero.py) labelled on its one node type with `y`,
    once its features, labels and splits passed the same checks as a Data's."""
    from conveyor.loader.hetero import hetero_graph_and_layout

    labelled = [t for t, store in data.node_items() if getattr(store, "y", None) is not None]
    if len(labelled) != 1:
        raise ConveyorError(f"fit() trains one node type of a HeteroData: the one with labels y; got y on "
                            f"{labelled or 'no node type'}. Give exactly one node type y and its train_mask "
                            f"(e.g. data['paper'].y, data['paper'].train_mask).")
    target, where = labelled[0], f"the HeteroData given to fit() (node type {labelled[0]!r})"
    for node_type, store in data.node_items():
        if getattr(store, "x", None) is not None:
            check_given_features(store.x, f"{where[:-1]}, x of {node_type!r})")
    graph, _ = hetero_graph_and_layout(data)
    store = data.get_node_store(target)
    num_classes, flat = checked_labels(store.y.reshape(-1) if store.y.dim() == 2 and store.y.size(1) == 1
                                       else store.y, None, where)
    splits = {f"{s}_idx": _ids(_split_ids(store, s, flat.numel())) for s in ("train", "val", "test")}
    splits = check_splits(splits, flat, {name: f"{name} of {where}" for name in SPLITS})
    graph.typed = {k: v.float() if k.startswith("x.") else v for k, v in graph.typed.items()}
    graph = with_target(graph, target, flat, num_classes, {k[:-4]: v for k, v in splits.items()})
    return check_trainable(graph, where)


def graph_given(given) -> tuple[Graph, str]:
    """`given` as a Graph (a copy: the checked splits replace its own, never the caller's), its
    features checked, and how messages name it."""
    is_data = hasattr(given, "edge_index") or type(given).__name__ in ("Data", "HeteroData")
    if not isinstance(given, Graph) and not is_data:
        raise ConveyorError(f"fit() trains on a conveyor.Graph or a PyG Data, got a "
                            f"{type(given).__name__}; build one with Graph.from_edge_index(...) or "
                            f"torch_geometric.data.Data(x=..., y=..., edge_index=..., train_mask=...).")
    where = f"the {type(given).__name__} given to fit()"
    x = getattr(given, "x", None)
    if x is not None:
        check_given_features(x, where)
    return (dataclasses.replace(given) if isinstance(given, Graph) else Graph.from_data(given)), where


def checked_link_graph(given) -> Graph:
    """`given` for task=link: features and edges; labels and node splits are not read (the
    edges are split instead). A HeteroData: a typed graph of its types, every x checked."""
    if type(given).__name__ == "HeteroData":
        return checked_typed_link_graph(given)
    graph, where = graph_given(given)
    if graph.x is None or graph.num_edges == 0:
        raise ConveyorError(f"task=link learns which node pairs are linked from the features and the edges "
                            f"of {where}, which has {'no x' if graph.x is None else 'no edge'}; give it both.")
    graph.x = graph.x.float()
    graph.num_classes = graph.num_classes or 0
    return graph


def checked_typed_link_graph(data) -> TypedGraph:
    """A HeteroData for task=link as a typed graph (its labels, if any, are not read)."""
    from conveyor.loader.hetero import hetero_graph_and_layout

    where = "the HeteroData given to fit()"
    for node_type, store in data.node_items():
        if getattr(store, "x", None) is not None:
            check_given_features(store.x, f"{where} (x of {node_type!r})")
    graph, _ = hetero_graph_and_layout(data)
    if graph.num_edges == 0:
        raise ConveyorError(f"task=link learns which node pairs are linked from the edges of {where}, which has "
                            f"none; give it the edge type to predict (data['user', 'rates', 'movie'].edge_index).")
    graph.typed = {k: v.float() if k.startswith("x.") else v for k, v in graph.typed.items()}
    graph.num_classes = 0
    return graph


def _ids(ids: Tensor | None) -> Tensor:
    return torch.empty(0, dtype=torch.long) if ids is None else ids


def check_given_features(x: Tensor, where: str) -> None:
    if not isinstance(x, Tensor) or x.dim() != 2:
        shape = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
        raise ConveyorError(f"x of {where} must be a tensor of shape [N, F] (one row per node), got "
                            f"{shape}; reshape a single feature to [N, 1].")
    if x.requires_grad:
        raise ConveyorError(f"x of {where} requires grad (it is the output of a computation "
                            f"autograd tracks); the features are the model's input, not a "
                            f"parameter: pass x.detach().")
    check_features(x.detach(), f"x of {where}")


def checked_labels(y: Tensor, declared: int | None, where: str) -> tuple[int, Tensor]:
    """The class count, and the labels as one entry per node for the split checks (-1: unlabelled).
    Class ids as the command line checks them; float [N, C] 0/1 targets as multi-label."""
    if y.is_floating_point() and y.dim() == 2:
        if not torch.isfinite(y).all() or (y < 0).any() or (y > 1).any():
            raise ConveyorError(f"y of {where} holds float [N, C] targets (shape {tuple(y.shape)}: "
                                f"multi-label, trained with BCE-with-logits) outside 0..1 or not "
                                f"finite; give each of the C labels as 0 or 1 (or a probability).")
        return y.size(1), torch.zeros(y.size(0), dtype=torch.long)
    if y.is_floating_point() or y.dim() != 1:
        raise ConveyorError(
            f"y of {where} has dtype {y.dtype} and shape {tuple(y.shape)}; labels are either class "
            f"ids, integers of shape [N] (-1 for an unlabelled node; y.long() if they are whole "
            f"numbers stored as floats, y.view(-1) for [N, 1]), or multi-label targets, floats "
            f"of shape [N, C] with a 0/1 per class (y.float()).")
    return check_labels(y, declared, f"y of {where}"), y


def check_model_argument(model) -> None:
    """Refuse a `model=` that is neither None, an option name nor a module instance."""
    if model is None or isinstance(model, (str, nn.Module)):
        return
    if isinstance(model, type) and issubclass(model, nn.Module):
        fix = f"model={model.__name__} is the class: pass an instance, model={model.__name__}(...)"
    else:
        fix = f"got {model!r} (a {type(model).__name__})"
    raise ConveyorError(f"{MODEL_ARGUMENT}; {fix}.")


def check_loss(loss) -> None:
    if loss is not None and not callable(loss):
        raise ConveyorError(f"fit(loss=...) takes a callable loss(out, y) -> scalar tensor (e.g. "
                            f"torch.nn.functional.cross_entropy), or None for the default "
                            f"(cross-entropy; BCE-with-logits for float [N, C] targets); got a "
                            f"{type(loss).__name__}.")


def check_model_shapes(module: nn.Module, graph: Graph, fanouts) -> None:
    """A PyG BasicGNN's in_channels, out_channels and depth against x, y and the fanouts, before any
    work (a mismatch would stop the first batch inside PyG, without naming either side)."""
    from torch_geometric.nn.models.basic_gnn import BasicGNN

    if not isinstance(module, BasicGNN):
        return
    features, classes, hops = graph.x.size(1), int(graph.num_classes), len(fanouts)
    labels = (f"y of shape [N, C] = {list(graph.y.shape)}" if graph.y.dim() == 2
              else f"y holds class ids 0..{classes - 1}")
    problems = []
    if module.in_channels not in (-1, features):
        problems.append(f"in_channels={module.in_channels}, but x of shape [N, F] = "
                        f"{list(graph.x.shape)} has {features} features")
    if module.out_channels != classes:
        problems.append(f"out_channels={module.out_channels}, but {labels}: {classes} outputs a node")
    hop_by_hop = module.jk_mode is None and not module.supports_norm_batch  # adapter.wrap_module
    if hop_by_hop and module.num_layers != hops:
        problems.append(f"num_layers={module.num_layers}, but fanouts={list(fanouts)} samples "
                        f"{hops} hop(s), one per layer")
    if problems:
        name = type(module).__name__
        raise ConveyorError(f"the {name} given to fit() does not fit the data: {'; '.join(problems)}. "
                            f"Build it as {name}({features}, hidden_channels, {hops}, {classes}), or "
                            f"pass fanouts with one entry per layer.")


def check_sizes(graph: Graph, settings, given: nn.Module | None) -> None:
    """Before any work: the configured model with this graph's features and classes (a given
    module exists already), and the run's largest batch (evaluation's, at the training fanouts)
    with what the model takes over it, against what the device may still allocate."""
    device = resolve_device(settings.run.device)
    # A typed graph's types differ in width: every node counted at the widest (a bound, as the batch's is).
    widest = graph.x if not isinstance(graph, TypedGraph) else max(graph.features.values(), key=lambda x: x.size(1))
    features, hops = widest.size(1), len(settings.sampler.fanouts)
    if given is None:
        check_model_size(settings.model.hidden, int(graph.num_classes), hops, device, features)
    trainer = settings.trainer
    largest = min(max(trainer.batch_size, trainer.eval_batch_size), graph.num_nodes)
    check_batch_room(graph, settings.sampler.fanouts, largest, device, row_bytes=features * widest.element_size(),
                     hidden=settings.model.hidden if given is None else None,
                     fix="Lower batch_size, trainer.eval_batch_size or fanouts (or model.hidden).")
