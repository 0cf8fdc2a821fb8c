"""`conveyor.load(run_dir_or_checkpoint)`: the trained model back from a run, and
`conveyor.predict(model, data)`: its output (or embeddings) for every node, layer by layer.

`load` reads `checkpoints/best.pt` of a run folder (else `last.pt`), or the checkpoint file
named, with `weights_only=True`, and rebuilds the model its `module` record names
(trainer/models/portable.py): a PyG model comes back as that PyG class with PyG's own keys, conveyor's
built-in models as `SampledGNN`. A class of one's own is never imported from a file's text:
pass an instance, `load(path, model=MyGNN(...))`, and its weights are loaded into it.
"""
from __future__ import annotations

import numbers
import os
import warnings
from pathlib import Path
from typing import Optional

import torch
from torch import Tensor, nn

from conveyor.core import ConveyorError
from conveyor.core.device import resolve_device
from conveyor.core.errors import one_line
from conveyor.core.memory import check_memory
from conveyor.core.regular import check_regular
from conveyor.partition import Graph
from conveyor.trainer.loop.layerwise import can_run_layerwise, layerwise_logits
from conveyor.trainer.models.adapter import EdgeIndexGNN, unwrapped, wrap_module
from conveyor.trainer.models.portable import PLAIN, rebuild
from conveyor.trainer.outputs.checkpoint import BEST, CHECKPOINT, load_checkpoint

LIBRARIES = (None, "torch_geometric", "conveyor")  # what a module record may name (portable.py)
EDITED = ("it was edited or damaged, or written by another program; conveyor builds nothing from it. Pass "
          "the model built as it was trained instead: conveyor.load(path, model=...)")


def checkpoint_file(path) -> Path:
    """The checkpoint `path` names: a file, or a run folder's best.pt (else last.pt)."""
    if not isinstance(path, (str, os.PathLike)):
        raise ConveyorError(f"conveyor.load() takes a run folder (its run.out_dir) or a checkpoint file as a "
                            f"path, got {repr(path)[:80]} of type {type(path).__name__}.")
    path = Path(path).expanduser()
    if path.is_dir():
        found = [path / name for name in (BEST, CHECKPOINT) if (path / name).exists()]
        if not found:
            raise ConveyorError(f"{path} holds no {BEST} or {CHECKPOINT}: it is not a run folder, or "
                                f"no epoch of its run finished; pass a run's run.out_dir or a checkpoint file.")
        return found[0]
    if not check_regular(path, "checkpoint").exists():
        raise ConveyorError(f"{path} does not exist; pass a run's run.out_dir or a checkpoint file "
                            f"(checkpoints/best.pt or last.pt in it).")
    return path


def load(path, model: Optional[nn.Module] = None, map_location="cpu") -> nn.Module:
    """The trained model of the run folder or checkpoint `path`, in eval mode. `model`: an
    instance to load the weights into (needed for a class of one's own)."""
    check_model(model, "conveyor.load(path, model=...)", optional=True)
    file = checkpoint_file(path)
    state = load_checkpoint(file.parent, map_location, file.name)
    record = state.get("module") if isinstance(state, dict) else None
    if not isinstance(record, dict) or not isinstance(record.get("state"), dict):
        raise ConveyorError(f"{file} holds no model record (it was written by an earlier conveyor, "
                            f"or by another program): its weights are under 'model'; load them into "
                            f"the model that trained them with model.load_state_dict(...).")
    name = record.get("class")
    if model is None:
        model = rebuilt(record, file)
        if model is None:
            raise ConveyorError(f"{file} holds the weights of a {name}, which conveyor does not build "
                                f"again (it never imports code a file names): build one as it was "
                                f"trained and pass it, conveyor.load(path, model={name}(...)).")
        return model.eval()
    try:
        model.load_state_dict(record["state"])
    except (RuntimeError, KeyError, ValueError, TypeError, AttributeError) as error:
        raise ConveyorError(f"the weights in {file} (a {name}) do not fit the {type(model).__name__} "
                            f"given: {one_line(str(error))[:400]}; build it with the arguments it "
                            f"was trained with.") from None
    return model.eval()


def rebuilt(record: dict, file: Path) -> Optional[nn.Module]:
    """The model `record` names (None: a class conveyor does not build), once its arguments and
    weights were checked on the meta device: a record that was edited (a size as text, arguments
    that are no dict, a keyword the class lacks, a weight of another shape, a hidden width of
    10**10) is one paragraph, and nothing is allocated before its size is known to fit."""
    check_record(record, file)
    try:
        with torch.device("meta"), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # loading real weights into meta ones copies nothing, and says so
            shape = rebuild(record)
    except (ConveyorError, TypeError, ValueError, RuntimeError, KeyError, AttributeError, AssertionError,
            IndexError, ZeroDivisionError, OverflowError) as error:
        raise ConveyorError(f"the model record in {file} does not build its {record.get('class')} "
                            f"({one_line(str(error))[:300]}): {EDITED}.") from None
    if shape is None:
        return None
    size = sum(t.numel() * t.element_size() for t in (*shape.parameters(), *shape.buffers()))
    check_memory(f"the {record.get('class')} of {file}", {"for its weights": size}, "cpu",
                 f"The record's sizes ({record.get('init')}) may have been edited: {EDITED}.")
    return rebuild(record)


def check_record(record: dict, file: Path) -> None:
    """A module record's fields of the types portable.py writes: a known library, a class name,
    init arguments as a dict of plain values by name (None for a class not rebuilt), weights."""
    library, name, init = record.get("library", ()), record.get("class"), record.get("init", ())
    problems = []
    if library not in LIBRARIES:
        problems.append(f"library is {library!r}, not one of {', '.join(map(str, LIBRARIES))}"
                        if library != () else "it names no library")
    if not isinstance(name, str):
        problems.append(f"class is {repr(name)[:80]}, not a name")
    if init != () and init is not None and not (
            isinstance(init, dict) and all(isinstance(k, str) and (v is None or isinstance(v, PLAIN))
                                           for k, v in init.items())):
        problems.append(f"init is {repr(init)[:120]}, not a dict of plain values by name")
    elif init == ():
        problems.append("it has no init")
    if problems:
        raise ConveyorError(f"the model record in {file} is not one conveyor writes ({'; '.join(problems)}): "
                            f"{EDITED}.")
    if isinstance(init, dict):
        check_sizes(init, record["state"], file)


SIZE_KEYS = ("in_channels", "hidden_channels", "num_layers", "out_channels", "heads", "out_heads",
             "in_dim", "hidden", "out_dim")  # BasicGNN's, GAT's and SampledGNN's sizes


def check_sizes(init: dict, state: dict, file: Path) -> None:
    """Sizes in a record's init arguments must be whole numbers >= 1 (out_channels may be None),
    none larger than the values its weights hold, nor more layers than it has weights: so even the
    model built on the meta device (no memory, but one Python object per layer) stays small."""
    bad = [f"{k}={v!r}" for k, v in init.items() if k in SIZE_KEYS and v is not None and not (
        isinstance(v, int) and not isinstance(v, bool) and v >= 1)]
    if bad:
        raise ConveyorError(f"the model record in {file} gives {', '.join(bad)}, where a size is a whole "
                            f"number >= 1: {EDITED}.")
    weights = [t for t in state.values() if isinstance(t, Tensor)]
    values = sum(t.numel() for t in weights)
    big = [f"{k}={v:,}" for k, v in init.items() if k in SIZE_KEYS and isinstance(v, int)
           and (v > len(weights) if k == "num_layers" else v > values)]
    if big:
        raise ConveyorError(f"the model record in {file} gives {', '.join(big)}, but its weights are "
                            f"{len(weights)} tensors of {values:,} values in all, which no such model has: {EDITED}.")


@torch.no_grad()
def predict(model: nn.Module, data, nodes: Optional[Tensor] = None, *, layers: Optional[int] = None,
            batch_size: int = 1024, device="cpu") -> Tensor:
    """The model's output for `nodes` (default every node; node ids, or a boolean mask over the
    nodes such as PyG's `data.test_mask`), one row each, on the host: layer by layer over every
    in-neighbour (exact: no sampling), each layer in batches of `batch_size` targets on `device`.
    `layers`: run only the first ones, giving each node's embedding after them. A model that cannot
    run layer by layer (a `forward(x, edge_index)` module, a BasicGNN with `jk`) runs once on the
    whole graph. Every argument is checked first, each refusal one paragraph."""
    check_model(model, "predict(model, data)")
    graph = graph_of(data)
    ids = node_ids(nodes, graph.num_nodes)
    if ids.numel() == 0:  # no rows, of the model's own width (found on one node)
        return predict(model, graph, torch.zeros(1, dtype=torch.long), layers=layers, batch_size=batch_size,
                       device=device)[:0]
    check_count(batch_size, "batch_size")
    if layers is not None:
        check_count(layers, "layers")
    device = device_of(device)
    check_width(model, graph)
    wrapped = wrap_module(model)
    try:
        if can_run_layerwise(wrapped):
            depth = wrapped.num_layers
            if layers is not None and not 1 <= layers <= depth:
                raise ConveyorError(f"predict(layers={layers}): the model has {depth} layers; pass 1..{depth}.")
            return layerwise_logits(wrapped.to(device), graph, ids, batch_size, device, num_layers=layers)
        if layers is not None or not isinstance(wrapped, EdgeIndexGNN):
            raise ConveyorError(f"predict() runs a {type(model).__name__} only whole: layers= needs "
                                f"num_layers and inference_per_layer(layer, x, edge_index, batch_size) "
                                f"(PyG's BasicGNN names; docs/design.md §5).")
        model = model.to(device).eval()
        return model(graph.x.to(device).float(), graph.edge_index().to(device))[ids].float().cpu()
    except RuntimeError as error:  # the model's own shapes against the graph's (a module of one's own)
        raise ConveyorError(f"predict() could not run the {type(model).__name__} on this graph "
                            f"({graph.num_nodes} nodes, x of width {graph.x.size(1)}): {one_line(str(error))[:300]}; "
                            f"give the model the graph it was built for.") from None


def check_model(model, call: str, optional: bool = False) -> None:
    if (optional and model is None) or isinstance(model, nn.Module):
        return
    what = (f"the class {model.__name__}: pass an instance, {model.__name__}(...)"
            if isinstance(model, type) else f"{repr(model)[:80]} of type {type(model).__name__}")
    raise ConveyorError(f"{call} takes a torch.nn.Module instance (e.g. what conveyor.load returns), got {what}.")


def graph_of(data) -> Graph:
    if not isinstance(data, Graph) and not hasattr(data, "edge_index"):
        raise ConveyorError(f"predict(model, data) takes a conveyor.Graph or a PyG Data as data, got "
                            f"{repr(data)[:80]} of type {type(data).__name__}.")
    graph = data if isinstance(data, Graph) else Graph.from_data(data)
    if graph.x is None:
        raise ConveyorError("predict() needs node features: the graph has no x.")
    if graph.num_nodes == 0:
        raise ConveyorError("predict() got a graph without nodes; give it the graph to predict on.")
    return graph


def node_ids(nodes, num_nodes: int) -> Tensor:
    """`nodes` as int64 node ids: every node (None), a boolean mask over the nodes, or ids in range."""
    if nodes is None:
        return torch.arange(num_nodes)
    fix = (f"pass node ids (integers in 0..{num_nodes - 1}) or a boolean mask of {num_nodes} entries "
           f"(PyG's data.test_mask)")
    try:
        ids = nodes if isinstance(nodes, Tensor) else torch.as_tensor(nodes)
    except (TypeError, ValueError, RuntimeError):
        raise ConveyorError(f"predict(nodes=...) got {repr(nodes)[:80]}, which torch cannot read as a tensor; "
                            f"{fix}.") from None
    if ids.dtype == torch.bool:
        if ids.shape != (num_nodes,):
            raise ConveyorError(f"predict(nodes=...) got a boolean mask of shape {tuple(ids.shape)}, but the "
                                f"graph has {num_nodes} nodes; {fix}.")
        return ids.nonzero().view(-1).cpu()
    if ids.dtype.is_floating_point or ids.dtype.is_complex or ids.dtype == torch.uint8 or ids.dim() > 1:
        why = ("a uint8 tensor could be ids or an old-style mask" if ids.dtype == torch.uint8 else
               f"a tensor of dtype {ids.dtype} and shape {tuple(ids.shape)} is neither")
        raise ConveyorError(f"predict(nodes=...): {why}; {fix} (mask.bool(), or ids.long() if whole numbers).")
    ids = ids.reshape(-1).long().cpu()
    outside = ids[(ids < 0) | (ids >= num_nodes)]
    if outside.numel():
        raise ConveyorError(f"predict(nodes=...) holds node id {int(outside[0])}, but the graph has "
                            f"{num_nodes} nodes (ids 0..{num_nodes - 1}); {fix}.")
    return ids


def check_count(value, name: str) -> None:
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < 1:
        raise ConveyorError(f"predict({name}={value!r}): {name} is a whole number >= 1.")


def device_of(device) -> torch.device:
    try:
        return resolve_device(device)
    except ConveyorError as error:
        raise ConveyorError(f"predict(device={device!r}): {str(error).replace('run.device', 'device')}") from None


def check_width(model: nn.Module, graph: Graph) -> None:
    """The model's input width against the graph's features, where the model says it (a BasicGNN's
    in_channels, conveyor's own in_dim); any other module shows it when it runs."""
    module = unwrapped(model)
    args = getattr(module, "init_args", None)
    width = args.get("in_dim") if isinstance(args, dict) else getattr(module, "in_channels", None)
    if isinstance(width, int) and width > 0 and width != graph.x.size(1):
        raise ConveyorError(f"predict(): the {type(module).__name__} takes {width} features a node, but the "
                            f"graph's x has {graph.x.size(1)} (shape {tuple(graph.x.shape)}); give it the graph "
                            f"it was trained on, with the same features.")
