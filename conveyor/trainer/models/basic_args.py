"""A PyG `BasicGNN`'s init arguments, read back from the instance (PyG keeps no copy), for
`conveyor.load` to build it again (portable.py): BasicGNN's own (channels, depth, dropout,
activation, norm, jk) and the first conv's own plain-valued arguments (GAT's `heads`, SAGE's
`aggr`, ...); `recorded_to_hetero` keeps them on a `to_hetero` module made of one.
"""
from __future__ import annotations

import inspect
from typing import Optional

import torch
from torch import nn
from torch_geometric.nn import GATv2Conv
from torch_geometric.nn.models.basic_gnn import BasicGNN

PLAIN = (bool, int, float, str)
SKIPPED = {"self", "in_channels", "out_channels", "kwargs", "nn"}
SOURCE = "conveyor_source"  # a to_hetero module's attribute: the record of the BasicGNN it was made from


def recorded_to_hetero(gnn: BasicGNN, metadata, aggr: str = "sum") -> nn.Module:
    """PyG's `to_hetero(gnn, metadata, aggr)`, remembering the BasicGNN's record (its `source`)
    where `gnn` is one `load` can build again, before its lazy sizes are known."""
    from torch_geometric.nn import to_hetero

    module = to_hetero(gnn, metadata, aggr=aggr)
    args, library = basic_gnn_args(gnn, lazy=True), basic_gnn_library(gnn)
    if args is not None and library is not None and aggr == "sum":
        setattr(module, SOURCE, {"library": library, "class": type(gnn).__name__, "init": args})
    return module


def basic_gnn_library(gnn: BasicGNN) -> Optional[str]:
    """Where `load` finds the class by name: PyG's own, or conveyor's GAT (trainer/models/gat.py); any
    other subclass (a user's, whatever its name) is not rebuilt."""
    import torch_geometric.nn as pyg

    from conveyor.trainer.models.gat import GAT
    cls = type(gnn)
    return "torch_geometric" if getattr(pyg, cls.__name__, None) is cls else "conveyor" if cls is GAT else None


def basic_gnn_args(gnn: BasicGNN, lazy: bool = False) -> Optional[dict]:
    """What `type(gnn)(**args)` takes to build the same model, as far as the instance tells.
    `lazy`: a model whose input width is to be inferred (-1, or (-1, -1): to_hetero's) is read too."""
    channels = gnn.in_channels
    if lazy and isinstance(channels, tuple) and channels == (-1, -1):
        channels = [-1, -1]
    elif not isinstance(channels, int) or (channels < 0 and not (lazy and channels == -1)):
        return None  # bipartite sizes: not read back
    if gnn.norm_kwargs:
        return None  # norm arguments: not read back
    act = None if gnn.act is None else type(gnn.act).__name__.lower()
    has_out = gnn.jk_mode is None or hasattr(gnn, "lin")
    args = {"in_channels": channels, "hidden_channels": gnn.hidden_channels,
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
