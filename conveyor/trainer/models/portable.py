"""The trained model in a form `conveyor.load` rebuilds without running any code a file names.

Each checkpoint holds, beside the trainer's own `model` (the wrapped module's keys), a `module`
record: the library (`torch_geometric` or `conveyor`), the class name, its init arguments as
plain values, and the module's own `state_dict` (a PyG model's keys as PyG names them; the
tensors are the same storage as `model`'s, saved once). Only a `BasicGNN` of `torch_geometric.nn`
(GraphSAGE, GCN, GAT, GIN, ...) and conveyor's `SampledGNN` are rebuilt, by name, from that
record; for any other class the record names it and keeps its weights, and `load` takes an
instance to load them into.

A BasicGNN's init arguments are read back from the instance (PyG keeps no copy): BasicGNN's own
(channels, depth, dropout, activation, norm, jk) and the first conv's own plain-valued arguments
(GAT's `heads`, SAGE's `aggr`, ...). They are trusted only when a model built from them has the
same keys and shapes and, with the same weights, the same output on a small fixed graph;
otherwise the record keeps no init arguments, as for a class of one's own.
"""
from __future__ import annotations

import inspect
from typing import Optional

import torch
from torch import nn
from torch_geometric.nn import GATv2Conv
from torch_geometric.nn.models.basic_gnn import BasicGNN

from conveyor.trainer.models.adapter import unwrapped

PLAIN = (bool, int, float, str)
SKIPPED = {"self", "in_channels", "out_channels", "kwargs", "nn"}


def portable_spec(model: nn.Module) -> dict:
    """The record for `model` (the trainer's, wrapped or not), without its weights."""
    module = unwrapped(model)
    init = None
    if isinstance(module, BasicGNN):
        init = basic_gnn_args(module)
        library = basic_gnn_library(module) if init is not None and rebuilds(module, init) else None
        init = init if library else None
    elif type(module).__name__ == "SampledGNN" and hasattr(module, "init_args"):
        library, init = "conveyor", dict(module.init_args)
    else:
        library = None
    return {"library": library, "class": type(module).__name__, "init": init}


def basic_gnn_library(gnn: BasicGNN) -> Optional[str]:
    """Where `load` finds the class by name: PyG's own, or conveyor's GAT (trainer/models/gat.py); any
    other subclass (a user's, whatever its name) is not rebuilt."""
    import torch_geometric.nn as pyg

    from conveyor.trainer.models.gat import GAT
    cls = type(gnn)
    return "torch_geometric" if getattr(pyg, cls.__name__, None) is cls else "conveyor" if cls is GAT else None


def with_weights(spec: dict, model: nn.Module) -> dict:
    """The record to save: `spec` and the module's own state_dict."""
    return {**spec, "state": unwrapped(model).state_dict()}


def basic_gnn_args(gnn: BasicGNN) -> Optional[dict]:
    """What `type(gnn)(**args)` takes to build the same model, as far as the instance tells."""
    if not isinstance(gnn.in_channels, int) or gnn.in_channels < 0 or gnn.norm_kwargs:
        return None  # lazy or bipartite sizes, norm arguments: not read back
    act = None if gnn.act is None else type(gnn.act).__name__.lower()
    has_out = gnn.jk_mode is None or hasattr(gnn, "lin")
    args = {"in_channels": gnn.in_channels, "hidden_channels": gnn.hidden_channels,
            "num_layers": gnn.num_layers, "out_channels": gnn.out_channels if has_out else None,
            "dropout": gnn.dropout.p, "act": act, "act_first": gnn.act_first, "norm": gnn.norm,
            "jk": gnn.jk_mode}
    for name in inspect.signature(type(gnn).__init__).parameters:  # a subclass's own (conveyor's GAT: out_heads)
        if name not in inspect.signature(BasicGNN.__init__).parameters and isinstance(getattr(gnn, name, None), PLAIN):
            args[name] = getattr(gnn, name)
    conv = gnn.convs[0]
    own = set(inspect.signature(BasicGNN.__init__).parameters) | SKIPPED
    for name in inspect.signature(type(conv).__init__).parameters:
        value = getattr(conv, name, None)
        if name not in own and isinstance(value, PLAIN):
            args[name] = value
    if isinstance(conv, GATv2Conv):
        args["v2"] = True
    if isinstance(getattr(conv, "eps", None), nn.Parameter):  # GIN(train_eps=True)
        args["train_eps"] = True
    return args


def rebuilds(gnn: BasicGNN, args: dict) -> bool:
    """Whether `type(gnn)(**args)` with gnn's weights is gnn: same keys, shapes and output."""
    try:
        twin = type(gnn)(**args)
        mine, theirs = gnn.state_dict(), twin.state_dict()
        if {k: v.shape for k, v in mine.items()} != {k: v.shape for k, v in theirs.items()}:
            return False
        twin.load_state_dict(mine)
    except Exception:  # an argument read back wrongly: the record keeps none
        return False
    generator = torch.Generator().manual_seed(0)  # not the run's random stream
    x = torch.randn(6, gnn.in_channels, generator=generator).to(next(gnn.parameters()).device)
    edge_index = torch.tensor([[0, 1, 2, 3, 4, 5, 1], [1, 2, 0, 4, 5, 3, 3]], device=x.device)
    was_training = gnn.training
    try:
        with torch.no_grad():
            return torch.allclose(gnn.eval()(x, edge_index), twin.to(x.device).eval()(x, edge_index), atol=1e-6)
    finally:
        gnn.train(was_training)


def rebuild(record: dict) -> Optional[nn.Module]:
    """The model a record names, with its weights; None for a class conveyor does not rebuild."""
    if record.get("init") is None:
        return None
    if record["library"] == "torch_geometric":
        import torch_geometric.nn as pyg
        cls = getattr(pyg, record["class"], None)
        if not (isinstance(cls, type) and issubclass(cls, BasicGNN)):
            return None
    elif record["library"] == "conveyor" and record["class"] == "SampledGNN":
        from conveyor.trainer.models.sampled import SampledGNN as cls
    elif record["library"] == "conveyor" and record["class"] == "GAT":
        from conveyor.trainer.models.gat import GAT as cls
    else:
        return None
    module = cls(**record["init"])
    module.load_state_dict(record["state"])
    return module
