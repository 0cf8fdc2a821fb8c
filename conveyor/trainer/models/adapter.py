"""Models from the config by `model._target_` (Hydra), and the adapters that give any module the
trainer's contract: the one place a model is wrapped (`wrap_module`).

The model contract (docs/design.md §5): `forward(x, layers)` takes the features of every batch
node and `layers`, one `(edge_index, num_src, num_dst)` per layer (the first layer on hop L's
edges), and returns one row per seed. `PerHopGNN` gives a stock PyG `BasicGNN` (`GraphSAGE`,
`GCN`, `GAT`, `GIN`, ...) that contract layer by layer over the hops (the fast path: each layer
computes only the nodes the next needs); `EdgeIndexGNN` gives it to any module with
`forward(x, edge_index)`, run once on the batch's merged subgraph; a module with
`forward(x, layers)` follows it directly. A `_target_` is built with `in_channels`, `out_channels`,
`num_layers` (one per fanout), `hidden_channels` (from `model.hidden`) and the other `model.*`
keys (`dropout`, and the class's own).
"""
from __future__ import annotations

import inspect

import torch
from torch import Tensor, nn
from torch_geometric.nn import GATConv, GATv2Conv, GCNConv, GINConv, SAGEConv
from torch_geometric.nn.models.basic_gnn import BasicGNN

from conveyor.core import ConveyorError
from conveyor.core.errors import one_line
from conveyor.trainer.models.dropout import dropout
from conveyor.trainer.models.edges import layer_inputs
from conveyor.trainer.models.gcn import gcn_layer
from conveyor.trainer.models.sparse import Adjacency
from conveyor.trainer.models.sparse import adjacency as sparse_adjacency

# Layers that take (source features, target features): they compute only the num_dst targets.
# Any other layer (GCNConv has no bipartite form) runs on all num_src nodes, then keeps the targets.
BIPARTITE = (SAGEConv, GATConv, GATv2Conv, GINConv)
CONVEYOR_KEYS = ("name", "hidden", "input_dropout", "gcn_degrees", "fast_dropout")  # read here, not passed


class PerHopForward(nn.Module):
    """`forward(x, layers)` as layer after layer of `inference_per_layer` over the batch's hops,
    after dropout on the raw features (`self.input_dropout`; as Kipf & Welling's GCN, it helps
    tiny label sets). A subclass gives `num_layers` and `inference_per_layer`. Its dropouts take
    their masks from trainer/models/dropout.py where `fast_dropout` is True (conveyor's built-in
    models by default, ModelSettings.uses_fast_dropout), else F.dropout's draws."""

    fast_dropout = False

    def forward(self, x: Tensor, layers, degree: Tensor | None = None, **edges) -> Tensor:
        """`x`: features of all N_L batch nodes; `layers`: (edge_index, num_src, num_dst) per layer;
        `degree`: each node's whole-graph in-degree, for GCN's normalisation (trainer/models/gcn.py);
        `edges`: edge_weight and/or edge_attr, one tensor per layer (trainer/models/edges.py)."""
        layers = list(layers)
        if len(layers) != self.num_layers:
            raise ConveyorError(f"the model has {self.num_layers} layers but the batch has "
                                f"{len(layers)} hops; use one fanout per layer.")
        x = dropout(x, self.input_dropout, self.training, self.fast_dropout)
        for i, (edge_index, num_src, num_dst) in enumerate(layers):
            extra = {} if degree is None else {"degree": degree[:num_src]}
            x = x[:num_src] if x.size(0) != num_src else x  # a whole slice still costs a copy in backward
            x = self.inference_per_layer(i, x, edge_index, num_dst, **extra, **layer_inputs(edges, i))
        return x


class PerHopGNN(PerHopForward):
    """A PyG BasicGNN whose layer i runs on hop L-i+1's edges, as its own forward would after
    `trim_to_layer`; activation, norm and dropout between layers exactly as BasicGNN orders them."""

    def __init__(self, gnn: BasicGNN, input_dropout: float = 0.0, fast_dropout: bool = False):
        super().__init__()
        if gnn.jk_mode is not None or gnn.supports_norm_batch:
            raise ConveyorError(f"{type(gnn).__name__} with jk={gnn.jk_mode!r} or a per-graph norm "
                                f"cannot run hop by hop (its layers' outputs cover different nodes); "
                                f"drop jk and use a per-node norm (batch_norm, layer_norm).")
        self.gnn, self.input_dropout, self.fast_dropout = gnn, input_dropout, fast_dropout

    @property
    def num_layers(self) -> int:
        return self.gnn.num_layers

    def inference_per_layer(self, layer: int, x: Tensor, edge_index: Tensor, batch_size: int,
                            degree: Tensor | None = None, adjacency: Adjacency | None = None, **edges) -> Tensor:
        """BasicGNN's own `inference_per_layer`, but bipartite where the layer allows it (only the
        `batch_size` targets are computed) and with its dropout while training, so that
        `forward` runs hop by hop through it. `degree` and `adjacency`: as SampledGNN's
        (trainer/models/gcn.py, sparse.py); `edges`: this layer's edge_weight and/or edge_attr,
        handed to the conv as BasicGNN does."""
        gnn = self.gnn
        conv, norm = gnn.convs[layer], gnn.norms[layer]
        if isinstance(conv, GCNConv):
            x = gcn_layer(conv, x, edge_index, batch_size, degree, edges.get("edge_weight"), adjacency)
        elif isinstance(conv, BIPARTITE):
            x = bipartite_layer(conv, x, edge_index, batch_size, adjacency, **conv_edges(gnn, edges))
        else:
            x = conv(x, edge_index, **conv_edges(gnn, edges))[:batch_size]
        if layer < gnn.num_layers - 1:
            x = gnn.act(x) if gnn.act is not None and gnn.act_first else x
            x = norm(x)
            x = gnn.act(x) if gnn.act is not None and not gnn.act_first else x
            x = dropout(x, gnn.dropout.p, gnn.dropout.training, self.fast_dropout)  # gnn.dropout(x)'s
        return x


def conv_edges(gnn: BasicGNN, edges: dict) -> dict:
    """The edge inputs a BasicGNN hands its convs (as its forward does: by its supports_* flags)."""
    takes = {"edge_weight": gnn.supports_edge_weight, "edge_attr": gnn.supports_edge_attr}
    return {name: value for name, value in edges.items() if takes.get(name)}


def bipartite_layer(conv, x: Tensor, edge_index: Tensor, num_dst: int, adjacency: Adjacency | None = None,
                    **edges) -> Tensor:
    """`conv` from the sources `x` to the first `num_dst` of them. Without autograd (evaluation)
    on the CPU, a SAGEConv sums by a sparse CSR product (PyG's spmm; `adjacency`: edge_index's
    structure, trainer/models/sparse.py, where the caller keeps it), the same sums 3-5x faster
    than gathering every edge's source row (on this CPU: 0.26-0.43 against 1.33-1.42 s for 250K
    edges at width 256); training keeps the edge list, whose backward is PyG's usual, as a
    user's model was written (conveyor's own SAGE layers train on the product: sparse.py)."""
    if isinstance(conv, SAGEConv) and not torch.is_grad_enabled() and x.device.type == "cpu":
        adjacency = adjacency or sparse_adjacency(edge_index, num_dst, x.size(0))
        edge_index = adjacency.matrix(torch.ones(adjacency.col.numel(), device=x.device))
    return conv((x, x[:num_dst]), edge_index, **edges)


class EdgeIndexGNN(nn.Module):
    """A module with `forward(x, edge_index)` (a PyG model as PyG's NeighborLoader feeds it) run on
    the batch's subgraph: every hop's sampled edges, merged and without repeats, over all batch
    nodes; the seeds' rows of its output. Every layer then computes every batch node, so it costs
    more than PerHopGNN's hop-by-hop layers."""

    takes_edge_pos = True  # trainer/models/edges.py: the positions that tell repeats from parallel edges

    def __init__(self, module: nn.Module):
        super().__init__()
        self.module = module

    def forward(self, x: Tensor, layers, edge_pos=None, **edges) -> Tensor:
        """`edge_pos` and `edges` (edge_weight, edge_attr): per layer, as PerHopForward's."""
        layers = list(layers)
        num_nodes, num_seeds = layers[0][1], layers[-1][2]
        edge_index = torch.cat([edge_index for edge_index, _, _ in layers], 1)
        # A node of an inner hop draws its in-neighbours again at each later hop: drop the repeats,
        # the same edge drawn twice (by position: parallel edges stay apart).
        key = torch.cat(edge_pos) if edge_pos is not None else edge_index[1] * num_nodes + edge_index[0]
        key, first = first_of_each(key)
        edge_index = edge_index[:, first]
        inputs = {name: torch.cat(values)[first] for name, values in edges.items()}
        return self.module(x[:num_nodes], edge_index, **inputs)[:num_seeds]


def first_of_each(key: Tensor) -> tuple[Tensor, Tensor]:
    """The distinct values of `key`, ascending, and the index of each one's first occurrence."""
    values, inverse = torch.unique(key, return_inverse=True)
    first = torch.full((values.numel(),), key.numel(), dtype=torch.long, device=key.device)
    first.scatter_reduce_(0, inverse, torch.arange(key.numel(), device=key.device), "amin")
    return values, first


def takes_edge_index(module: nn.Module) -> bool:
    """Whether `module.forward`'s second argument is PyG's `edge_index` (or `adj_t`), not `layers`."""
    try:
        names = list(inspect.signature(module.forward).parameters)
    except (TypeError, ValueError):  # a builtin or compiled forward: keep the trainer's contract
        return False
    return len(names) > 1 and names[1] in ("edge_index", "adj_t")


def wrap_module(module: nn.Module, input_dropout: float = 0.0, fast_dropout: bool = False) -> nn.Module:
    """`module` with the trainer's `forward(x, layers)`: a BasicGNN hop by hop (PerHopGNN; with `jk`
    or a per-graph norm, which cannot run so, on the merged subgraph), any other
    `forward(x, edge_index)` on the merged subgraph, a `forward(x, layers)` module as it is.
    `fast_dropout`: a BasicGNN's dropouts between layers take conveyor's masks (only on request:
    otherwise it draws F.dropout's, as its own forward would)."""
    if isinstance(module, BasicGNN):
        if module.jk_mode is None and not module.supports_norm_batch:
            return PerHopGNN(module, input_dropout, fast_dropout)
        return EdgeIndexGNN(module)
    return EdgeIndexGNN(module) if takes_edge_index(module) else module


def unwrapped(model: nn.Module) -> nn.Module:
    """The module a user gave or named, inside its adapter (the model itself when it has none)."""
    return model.gnn if isinstance(model, PerHopGNN) else model.module if isinstance(model, EdgeIndexGNN) else model


def model_from_target(model, in_dim: int, out_dim: int, num_layers: int) -> nn.Module:
    """`hydra.utils.instantiate` of `model._target_` (ModelSettings), wrapped (`wrap_module`)."""
    module = instantiate_target(model, in_dim, out_dim, num_layers)
    if not isinstance(module, nn.Module):
        raise ConveyorError(f"model._target_={model._target_} made a {type(module).__name__}, not "
                            f"a torch.nn.Module.")
    return wrap_module(module, model.input_dropout, model.uses_fast_dropout())


def instantiate_target(model, in_dim: int, out_dim: int, num_layers: int):
    """`model._target_` built as it is, with in_channels, out_channels, num_layers, hidden_channels
    (model.hidden) and the other model.* keys; `mode=compare`'s PyG reference runs it unwrapped."""
    from hydra.utils import instantiate

    keys = model.to_dict()
    kwargs = {k: v for k, v in keys.items() if k not in CONVEYOR_KEYS}
    kwargs["_target_"] = substitute_target(kwargs)
    if "hidden" in keys:
        kwargs.setdefault("hidden_channels", keys["hidden"])
    try:
        return instantiate(kwargs, in_channels=in_dim, out_channels=out_dim, num_layers=num_layers)
    except Exception as error:  # Hydra wraps the import or constructor error
        raise ConveyorError(f"cannot build model._target_={keys['_target_']}: {one_line(str(error))} "
                            f"It is called with in_channels, out_channels, num_layers, "
                            f"hidden_channels (model.hidden) and the other model.* keys.") from None


# A PyG class the config names, built as conveyor's subclass of it when the config sets a key only
# that subclass takes: (the config's _target_, the key) -> the class built instead.
SUBSTITUTES = {("torch_geometric.nn.GAT", "out_heads"): "conveyor.trainer.models.gat.GAT"}


def substitute_target(kwargs: dict) -> str:
    """The class to build for `kwargs["_target_"]` (SUBSTITUTES): Velickovic et al.'s GAT averages its
    output heads, which PyG's GAT cannot (trainer/models/gat.py)."""
    target = kwargs["_target_"]
    return next((ours for (theirs, key), ours in SUBSTITUTES.items() if target == theirs and key in kwargs), target)


def target_class(model) -> type | None:
    """The class `model._target_` names, or None when it names none (building it then says why)."""
    from hydra.utils import get_class
    try:
        return get_class(str(model._target_))
    except Exception:  # Hydra's import error; instantiate_target reports it in full
        return None
