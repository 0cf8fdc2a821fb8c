"""`conveyor.load(run_dir_or_checkpoint)`: the trained model back from a run, and
`conveyor.predict(model, data)`: its output (or embeddings) for every node, layer by layer.

`load` reads `checkpoints/best.pt` of a run folder (else `last.pt`), or the checkpoint file
named, with `weights_only=True`, and rebuilds the model its `module` record names
(trainer/models/portable.py): a PyG model comes back as that PyG class with PyG's own keys, conveyor's
built-in models as `SampledGNN`. A class of one's own is never imported from a file's text:
pass an instance, `load(path, model=MyGNN(...))`, and its weights are loaded into it.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import torch
from torch import Tensor, nn

from conveyor.core import ConveyorError
from conveyor.core.errors import one_line
from conveyor.core.regular import check_regular
from conveyor.partition import Graph
from conveyor.trainer.loop.layerwise import can_run_layerwise, layerwise_logits
from conveyor.trainer.models.adapter import EdgeIndexGNN, wrap_module
from conveyor.trainer.models.portable import rebuild
from conveyor.trainer.outputs.checkpoint import BEST, CHECKPOINT, load_checkpoint


def checkpoint_file(path) -> Path:
    """The checkpoint `path` names: a file, or a run folder's best.pt (else last.pt)."""
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
    file = checkpoint_file(path)
    state = load_checkpoint(file.parent, map_location, file.name)
    record = state.get("module") if isinstance(state, dict) else None
    if not isinstance(record, dict) or not isinstance(record.get("state"), dict):
        raise ConveyorError(f"{file} holds no model record (it was written by an earlier conveyor, "
                            f"or by another program): its weights are under 'model'; load them into "
                            f"the model that trained them with model.load_state_dict(...).")
    name = record.get("class")
    if model is None:
        model = rebuild(record)
        if model is None:
            raise ConveyorError(f"{file} holds the weights of a {name}, which conveyor does not build "
                                f"again (it never imports code a file names): build one as it was "
                                f"trained and pass it, conveyor.load(path, model={name}(...)).")
        return model.eval()
    try:
        model.load_state_dict(record["state"])
    except (RuntimeError, KeyError, ValueError) as error:
        raise ConveyorError(f"the weights in {file} (a {name}) do not fit the {type(model).__name__} "
                            f"given: {one_line(str(error))[:400]}; build it with the arguments it "
                            f"was trained with.") from None
    return model.eval()


@torch.no_grad()
def predict(model: nn.Module, data, nodes: Optional[Tensor] = None, *, layers: Optional[int] = None,
            batch_size: int = 1024, device="cpu") -> Tensor:
    """The model's output for `nodes` (default every node), one row each, on the host: layer by
    layer over every in-neighbour (exact: no sampling), each layer in batches of `batch_size`
    targets on `device`. `layers`: run only the first ones, giving each node's embedding after
    them. A model that cannot run layer by layer (a `forward(x, edge_index)` module, a BasicGNN
    with `jk`) runs once on the whole graph."""
    graph = data if isinstance(data, Graph) else Graph.from_data(data)
    if graph.x is None:
        raise ConveyorError("predict() needs node features: the graph has no x.")
    nodes = torch.arange(graph.num_nodes) if nodes is None else torch.as_tensor(nodes).long()
    wrapped = wrap_module(model)
    if can_run_layerwise(wrapped):
        depth = wrapped.num_layers
        if layers is not None and not 1 <= layers <= depth:
            raise ConveyorError(f"predict(layers={layers}): the model has {depth} layers; pass 1..{depth}.")
        return layerwise_logits(wrapped.to(device), graph, nodes, batch_size, torch.device(device),
                                num_layers=layers)
    if layers is not None or not isinstance(wrapped, EdgeIndexGNN):
        raise ConveyorError(f"predict() runs a {type(model).__name__} only whole: layers= needs "
                            f"num_layers and inference_per_layer(layer, x, edge_index, batch_size) "
                            f"(PyG's BasicGNN names; docs/design.md §5).")
    model = model.to(device).eval()
    return model(graph.x.to(device).float(), graph.edge_index().to(device))[nodes].float().cpu()
