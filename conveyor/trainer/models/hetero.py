"""Models of typed graphs (partition/hetero.py), trained as PyG trains a `HeteroData`: PyG's
`to_hetero(GraphSAGE(...), metadata)` (`model=sage`, or any `to_hetero`'d BasicGNN handed to
`conveyor.fit`) and R-GCN (`model=rgcn`, as OGB's ogbn-mag example: Schlichtkrull et al.).

A typed model computes one layer at a time on dicts, as PyG's heterogeneous layers do:
`typed_layer(layer, x, num_dst, edge_index)` maps each node type's source states `x[t]` (its
targets first: `num_dst[t]` of them) over each relation's edges (type-local ids) to each type's
target states. `TypedGNN` gives such a model the trainer's contract (docs/design.md §5): the
pipeline's batches are one graph of global ids (grouped by type) with per-hop edges and each edge's
relation (`edge_type`), so `inference_per_layer(layer, x, edge_index, batch_size, n_id,
edge_type)` cuts them into types (`TypeCut`), runs the typed layer and puts the targets' rows back
in n_id order. So training runs hop by hop (each layer computes only the nodes the next needs)
and layer-wise evaluation (trainer/loop/layerwise.py) runs every layer over every in-edge of every
relation, exactly, with nothing typed in the loop but the layer-0 input (the feature cache's flat
rows, cache/typed.py; a node type without features gets a learned embedding per node, as OGB's
R-GCN example does).

A `to_hetero`'d BasicGNN runs layer by layer through its own per-relation convs (`convs[i]`:
a ModuleDict by edge type), summed per destination type (`to_hetero`'s default aggr), then its
norm, activation and dropout per node type; this is checked once against the module's own forward
on a small random graph, and a module that differs (another aggr, jk) or any other module with
`forward(x_dict, edge_index_dict)` runs instead on each batch's merged subgraph
(`HeteroEdgeIndexGNN`, sampled evaluation), as PyG's loop runs it.
"""
from __future__ import annotations

import inspect
from typing import Dict, List, Sequence

import torch
from torch import Tensor, nn

from conveyor.core import ConveyorError
from conveyor.partition.hetero import Schema, TypeCut, TypedGraph, split_flat
from conveyor.trainer.model_registry import model_entry
from conveyor.trainer.models.adapter import first_of_each
from conveyor.trainer.models.dropout import dropout, relu_dropout
from conveyor.trainer.models.sparse import (
    Adjacency,
    bipartite_sage_layer,
    sum_of_linear_means,
    summable_sage,
    summed_sage_layers,
)

EMBEDDING_DIM = 64  # a featureless node type's learned embedding, where the settings give no width


def key(edge_type) -> str:
    """An edge type as to_hetero names its modules: 'src__rel__dst'."""
    return "__".join(edge_type)


class RGCN(nn.Module):
    """R-GCN (OGB's ogbn-mag example): per layer, each node type's target states are a root linear
    map of its own state (per node type, with bias) plus, for each relation into it, a linear map
    (per relation, no bias) of the mean of its in-neighbours' states; ReLU and dropout between
    (conveyor's masks where `fast_dropout`, trainer/models/dropout.py: model=rgcn's default)."""

    def __init__(self, metadata, in_channels: Dict[str, int], hidden_channels: int, out_channels: int,
                 num_layers: int, dropout: float = 0.5, fast_dropout: bool = False):
        super().__init__()
        node_types, edge_types = metadata
        self.node_types, self.edge_types = list(node_types), [tuple(e) for e in edge_types]
        self.num_layers, self.dropout, self.fast_dropout = num_layers, dropout, fast_dropout
        dims = [dict(in_channels)] + [{t: hidden_channels for t in node_types}] * (num_layers - 1)
        outs = [hidden_channels] * (num_layers - 1) + [out_channels]
        self.rel = nn.ModuleList(nn.ModuleDict({key(e): nn.Linear(d[e[0]], o, bias=False) for e in self.edge_types})
                                 for d, o in zip(dims, outs))
        self.root = nn.ModuleList(nn.ModuleDict({t: nn.Linear(d[t], o) for t in node_types})
                                  for d, o in zip(dims, outs))
        self.init_args = {"in_channels": dict(in_channels), "hidden_channels": hidden_channels,
                          "out_channels": out_channels, "num_layers": num_layers, "dropout": dropout,
                          "fast_dropout": fast_dropout}

    takes_adjacency = True  # TypedGNN hands typed_layer each relation's CSR structure

    def typed_layer(self, layer: int, x: Dict[str, Tensor], num_dst: Dict[str, int],
                    edge_index: Dict[tuple, Tensor], adjacency: Dict[tuple, Adjacency] | None = None
                    ) -> Dict[str, Tensor]:
        """Each type's root map plus its relations' maps of their means, accumulated in one output
        (trainer/models/sparse.py `sum_of_linear_means`: CSR products on the CPU; `adjacency`: each
        relation's CSR structure, else made here)."""
        into, out, adjacency = relations_into(edge_index), {}, adjacency or {}
        for t in self.node_types:
            if t in x:
                root = self.root[layer][t]
                relations = [(x[e[0]], edges, self.rel[layer][key(e)].weight, adjacency.get(e))
                             for e, edges in into.get(t, [])]
                out[t] = sum_of_linear_means(relations, x[t][:num_dst[t]], root.weight, root.bias)
        if layer < self.num_layers - 1:
            out = {t: relu_dropout(v, self.dropout, self.training, self.fast_dropout) for t, v in out.items()}
        return out

    def forward(self, x_dict: Dict[str, Tensor], edge_index_dict: Dict[tuple, Tensor]) -> Dict[str, Tensor]:
        """PyG's heterogeneous forward, every node a target (PyG's training loop, a full graph)."""
        for layer in range(self.num_layers):
            x_dict = self.typed_layer(layer, x_dict, {t: v.size(0) for t, v in x_dict.items()}, edge_index_dict)
        return x_dict


class HeteroBasicGNN(nn.Module):
    """A `to_hetero`'d BasicGNN (a torch.fx GraphModule) run one layer at a time (module doc)."""

    def __init__(self, module: nn.Module, act_first: bool = False, fast_dropout: bool = False):
        super().__init__()
        self.module, self.act_first, self.fast_dropout = module, act_first, fast_dropout

    @property
    def num_layers(self) -> int:
        return len(self.module.convs)

    takes_adjacency = True  # TypedGNN hands typed_layer each relation's CSR structure

    def typed_layer(self, layer: int, x: Dict[str, Tensor], num_dst: Dict[str, int],
                    edge_index: Dict[tuple, Tensor], adjacency: Dict[tuple, Adjacency] | None = None
                    ) -> Dict[str, Tensor]:
        """to_hetero's sum over the relations into each type of their convs' outputs: for plain
        SAGEConvs one output with the root map once (sparse.py `summed_sage_layers`; `adjacency`:
        each relation's CSR structure, else made there), else conv by conv (`bipartite_sage_layer`)."""
        convs, out, adjacency = self.module.convs[layer], {}, adjacency or {}
        for dst, relations in relations_into(edge_index).items():
            x_dst, typed_convs = x[dst][:num_dst[dst]], [convs[key(e)] for e, _ in relations]
            if all(summable_sage(conv) for conv in typed_convs):
                sources = [(x[e[0]], edges, adjacency.get(e)) for e, edges in relations]
                out[dst] = summed_sage_layers(typed_convs, sources, x_dst)
                continue
            for conv, (edge_type, edges) in zip(typed_convs, relations):
                y = bipartite_sage_layer(conv, x[edge_type[0]], x_dst, edges)
                out[dst] = y if dst not in out else out[dst] + y
        if layer < self.num_layers - 1:
            out = {t: self.between_layers(layer, t, v) for t, v in out.items()}
        return out

    def between_layers(self, layer: int, node_type: str, x: Tensor) -> Tensor:
        """BasicGNN's norm, activation and dropout after a hidden layer, each per node type; the
        dropout's masks conveyor's where `fast_dropout` (trainer/models/dropout.py), a ReLU then
        in one with it."""
        gm, act = self.module, per_type(getattr(self.module, "act", None), node_type)
        x = act(x) if act is not None and self.act_first else x
        norm = per_type(gm.norms[layer], node_type) if hasattr(gm, "norms") else None
        x = norm(x) if norm is not None else x
        drop = per_type(gm.dropout, node_type) if hasattr(gm, "dropout") else None
        if not isinstance(drop, nn.Dropout):
            x = act(x) if act is not None and not self.act_first else x
            return drop(x) if drop is not None else x
        if isinstance(act, nn.ReLU) and not self.act_first:
            return relu_dropout(x, drop.p, drop.training, self.fast_dropout)
        x = act(x) if act is not None and not self.act_first else x
        return dropout(x, drop.p, drop.training, self.fast_dropout)

    def forward(self, x_dict, edge_index_dict, **kwargs):
        return self.module(x_dict, edge_index_dict, **kwargs)


def relations_into(edge_index: Dict[tuple, Tensor]) -> Dict[str, list]:
    """Each destination type's (edge_type, edges) pairs, in `edge_index`'s order."""
    into: Dict[str, list] = {}
    for edge_type, edges in edge_index.items():
        into.setdefault(edge_type[2], []).append((edge_type, edges))
    return into


def per_type(module, node_type: str):
    """`module` for `node_type`: to_hetero's ModuleDict entry, or the module itself."""
    return module[node_type] if isinstance(module, nn.ModuleDict) else module


class TypedGNN(nn.Module):
    """A typed model with the trainer's contract `forward(x, layers, n_id, edge_type)` (module
    doc). `widths`: each node type's cached feature width (the flat input's layout); a type without
    features gets a learned embedding per node of `embedding_dim`."""

    typed = True
    takes_n_id = True  # trainer/models/edges.py: the batch's n_id is handed to forward

    def __init__(self, inner: nn.Module, schema: Schema, widths: Dict[str, int], embedding_dim: int = EMBEDDING_DIM):
        super().__init__()
        self.inner, self.schema = inner, schema
        self.widths = {t: int(widths[t]) for t in schema.node_types if t in widths}
        self.embeddings = nn.ModuleDict({t: nn.Embedding(n, embedding_dim) for t, n in
                                         zip(schema.node_types, schema.node_counts) if t not in self.widths})

    @property
    def num_layers(self) -> int:
        return self.inner.num_layers

    def edge_inputs(self) -> tuple:
        return ("edge_type",)  # the pipeline gathers each sampled edge's relation

    def forward(self, x: Tensor, layers, n_id: Tensor, edge_type: Sequence[Tensor]) -> Tensor:
        """`x`: the batch's flat typed features; `layers`: (edge_index, num_src, num_dst) per layer,
        hop L's first; `edge_type`: each layer's edges' relations. One row per seed. Between layers
        each type's rows stay apart: a layer's targets of a type are the next layer's sources of
        that type, in the same order (n_id's), so only the last layer's go back in n_id order."""
        layers, states, cut = list(layers), None, None
        for i, (edge_index, num_src, num_dst) in enumerate(layers):
            if cut is None or cut.n_id.numel() != num_src:
                cut = TypeCut(self.schema, n_id[:num_src])
            inputs = self.typed_input(x, cut) if states is None else {  # a whole slice costs a copy in backward
                t: states[t] if states[t].size(0) == n else states[t][:n] for t, n in zip(self.schema.node_types,
                                                                                          cut.per_type)}
            targets = TypeCut(self.schema, n_id[:num_dst])
            out = self.run_layer(i, inputs, cut, targets.per_type, edge_index, edge_type[i])
            if i == len(layers) - 1:
                return in_batch_order(out, cut, targets.per_type, num_dst, self.schema)
            states, cut = every_type(out, targets.per_type, self.schema), targets

    def inference_per_layer(self, layer: int, x: Tensor, edge_index: Tensor, batch_size: int, n_id: Tensor,
                            edge_type: Tensor) -> Tensor:
        """Layer `layer` from the sources `n_id` (targets first; `x`: the flat typed features at
        layer 0, else one row per source) to the first `batch_size` of them, in their order."""
        cut = TypeCut(self.schema, n_id)
        inputs = self.typed_input(x, cut) if layer == 0 else {
            t: x.index_select(0, cut.positions(i)) for i, t in enumerate(self.schema.node_types)}
        targets = TypeCut(self.schema, n_id[:batch_size]).per_type
        out = self.run_layer(layer, inputs, cut, targets, edge_index, edge_type)
        return in_batch_order(out, cut, targets, batch_size, self.schema)

    def run_layer(self, layer: int, inputs: Dict[str, Tensor], cut: TypeCut, targets: List[int],
                  edge_index: Tensor, edge_type: Tensor) -> Dict[str, Tensor]:
        """The inner model's typed layer on the sources `cut` to the first `targets` of each type;
        a built-in (`takes_adjacency`) gets each relation's CSR structure too (`relation_edges`)."""
        edges, adjacency = relation_edges(cut, targets, edge_index, edge_type, self.schema)
        num_dst = dict(zip(self.schema.node_types, targets))
        if getattr(self.inner, "takes_adjacency", False):
            return self.inner.typed_layer(layer, inputs, num_dst, edges, adjacency=adjacency)
        return self.inner.typed_layer(layer, inputs, num_dst, edges)

    def typed_input(self, x: Tensor, cut: TypeCut) -> Dict[str, Tensor]:
        """The layer-0 states of each type: its rows of the flat features, or its embeddings."""
        rows = split_flat(x, cut.per_type, [self.widths.get(t) for t in self.schema.node_types])
        return {node_type: rows[t] if t in rows else self.embeddings[node_type](cut.nodes(t))
                for t, node_type in enumerate(self.schema.node_types)}


def relation_edges(cut: TypeCut, targets: List[int], edge_index: Tensor, edge_type: Tensor,
                   schema: Schema) -> tuple:
    """Each relation's edges of `edge_index` (batch ids) as type-local ids, grouped by target, and
    their CSR structures (sparse.py `Adjacency`), by edge type: one stable sort by relation, then
    target (the targets are n_id's first, so a type's batch order is its local order), where
    cutting by relation then sorting each relation's edges took one sort more per relation."""
    relation, num_targets = edge_type.long(), sum(targets)
    sort_key = relation * num_targets + edge_index[1]
    order = torch.argsort(sort_key.int() if len(schema.edge_types) * num_targets < 2 ** 31 else sort_key, stable=True)
    local = cut.rank.index_select(0, edge_index.index_select(1, order).reshape(-1)).view(2, -1)
    counts = torch.bincount(relation, minlength=len(schema.edge_types)).tolist()
    index = {t: i for i, t in enumerate(schema.node_types)}
    edges, adjacency = {}, {}
    for edge_type_, pairs in zip(schema.edge_types, local.split(counts, 1)):
        src, _, dst = edge_type_
        crow = torch.zeros(targets[index[dst]] + 1, dtype=torch.long, device=pairs.device)
        torch.cumsum(torch.bincount(pairs[1], minlength=targets[index[dst]]), 0, out=crow[1:])
        edges[edge_type_] = pairs
        adjacency[edge_type_] = Adjacency(crow, pairs[0], None, cut.per_type[index[src]])
    return edges, adjacency


def every_type(out: Dict[str, Tensor], targets: List[int], schema: Schema) -> Dict[str, Tensor]:
    """A layer's outputs as the next layer's sources: each type's rows (a type no relation
    reaches: zeros, as `in_batch_order` gives it)."""
    some = next(iter(out.values()))
    return {t: out[t] if t in out else some.new_zeros(n, some.size(1)) for t, n in zip(schema.node_types, targets)}


def in_batch_order(out: Dict[str, Tensor], cut: TypeCut, targets: List[int], batch_size: int,
                   schema: Schema) -> Tensor:
    """Each type's target rows back in n_id order (a type no relation reaches: zeros)."""
    width = next(iter(out.values())).size(1)
    result = next(iter(out.values())).new_zeros(batch_size, width)
    for t, node_type in enumerate(schema.node_types):
        if targets[t] and node_type in out:
            result = result.index_copy(0, cut.positions(t)[:targets[t]], out[node_type])
    return result


class HeteroEdgeIndexGNN(nn.Module):
    """A module with `forward(x_dict, edge_index_dict)` (PyG's HeteroData forward) run on the
    batch's merged subgraph, every hop's edges without repeats, as PyG's loop runs it; the seeds'
    rows of the target type's output."""

    typed, takes_n_id, takes_edge_pos = True, True, True

    def __init__(self, module: nn.Module, schema: Schema, widths: Dict[str, int], embedding_dim: int = EMBEDDING_DIM):
        super().__init__()
        self.module, self.schema = module, schema
        self.input = TypedGNN(nn.Identity(), schema, widths, embedding_dim)  # the layer-0 input alone

    def edge_inputs(self) -> tuple:
        return ("edge_type",)

    def forward(self, x: Tensor, layers, n_id: Tensor, edge_type: Sequence[Tensor], edge_pos=None) -> Tensor:
        layers = list(layers)
        edge_index = torch.cat([e for e, _, _ in layers], 1)
        relation = torch.cat(list(edge_type)).long()
        if edge_pos is not None:  # a node of an inner hop drew again at later hops: drop the repeats
            _, first = first_of_each(torch.cat(list(edge_pos)))
            edge_index, relation = edge_index[:, first], relation[first]
        cut = TypeCut(self.schema, n_id)
        x_dict = self.input.typed_input(x, cut)
        out = self.module(x_dict, dict(zip(self.schema.edge_types, cut.edges(edge_index, relation))))
        return out[self.schema.target][:layers[-1][2]]


def takes_typed_inputs(module: nn.Module) -> bool:
    """Whether `module.forward` takes PyG's heterogeneous inputs (x_dict, edge_index_dict)."""
    try:
        names = list(inspect.signature(module.forward).parameters)
    except (TypeError, ValueError):
        return False
    return len(names) > 1 and names[0] in ("x", "x_dict") and names[1] in ("edge_index", "edge_index_dict")


def feature_widths(graph: TypedGraph) -> Dict[str, int]:
    return {graph.schema.node_types[t]: int(x.size(1)) for t, x in graph.features.items()}


def probe_graph(schema: Schema, widths: Dict[str, int], seed: int = 0):
    """A small random typed graph of the schema's types (x_dict, edge_index_dict): 3 nodes a type."""
    generator = torch.Generator().manual_seed(seed)
    x = {t: torch.randn(3, widths[t], generator=generator) for t in schema.node_types}
    edges = {e: torch.randint(0, 3, (2, 5), generator=generator) for e in schema.edge_types}
    return x, edges


def runs_layer_by_layer(model: HeteroBasicGNN, schema: Schema, widths: Dict[str, int]) -> bool:
    """Whether `model`'s layer-by-layer run equals its module's own forward on a probe graph."""
    x, edges = probe_graph(schema, widths)
    training = model.training
    model.eval()
    try:
        with torch.no_grad():
            whole = model.module(x, edges)
            mine = x
            for layer in range(model.num_layers):
                mine = model.typed_layer(layer, mine, {t: 3 for t in mine}, edges)
        return set(whole) == set(mine) and all(torch.allclose(whole[t], mine[t], atol=1e-5) for t in whole)
    except Exception:  # noqa: BLE001 -- a module of another shape: it runs whole instead
        return False
    finally:
        model.train(training)


def wrap_typed(module: nn.Module, graph: TypedGraph, embedding_dim: int = EMBEDDING_DIM,
               fast_dropout: bool = False) -> nn.Module:
    """`module` with the trainer's contract on `graph`'s batches: layer by layer (`TypedGNN`) where
    it can, else on the merged subgraph (`HeteroEdgeIndexGNN`); a ConveyorError for a module that
    takes no typed inputs. `fast_dropout`: a to_hetero'd BasicGNN's dropouts between layers take
    conveyor's masks (ModelSettings.uses_fast_dropout)."""
    schema, widths = graph.schema, feature_widths(graph)
    inputs = {t: widths.get(t, embedding_dim) for t in schema.node_types}
    if callable(getattr(module, "typed_layer", None)):
        return TypedGNN(module, schema, widths, embedding_dim)
    if isinstance(getattr(module, "convs", None), nn.ModuleList):
        for act_first in (False, True):
            layered = HeteroBasicGNN(module, act_first, fast_dropout)
            if runs_layer_by_layer(layered, schema, inputs):
                return TypedGNN(layered, schema, widths, embedding_dim)
    if takes_typed_inputs(module):
        with torch.no_grad():  # a lazy module's parameters exist before the optimizer is made
            module(*probe_graph(schema, inputs))
        return HeteroEdgeIndexGNN(module, schema, widths, embedding_dim)
    raise ConveyorError(f"a typed graph trains a heterogeneous model: PyG's to_hetero(model, metadata), a "
                        f"HeteroConv model, or any module with forward(x_dict, edge_index_dict); got a "
                        f"{type(module).__name__} whose forward takes neither.")


def typed_model(model, graph: TypedGraph, num_layers: int, out_channels: int | None = None) -> nn.Module:
    """The model `model` (ModelSettings) names, on the typed graph, `out_channels` wide (None: the
    graph's classes; task=link: model.hidden): a built-in as its registry entry builds it
    (trainer/model_registry.py: rgcn, R-GCN; sage, to_hetero(GraphSAGE)) or a model._target_
    BasicGNN made typed by to_hetero."""
    classes = int(graph.num_classes) if out_channels is None else int(out_channels)
    if model._target_ is None:
        return model_entry(model.name).builder(typed=True)(model, graph, num_layers, classes)
    from conveyor.trainer.models.adapter import instantiate_target
    return to_hetero_model(instantiate_target(model, -1, classes, num_layers), graph, model.hidden,
                           model.uses_fast_dropout())


def rgcn_model(model, graph: TypedGraph, num_layers: int, classes: int) -> nn.Module:
    """model=rgcn: R-GCN, `classes` wide. A node type without features gets a learned embedding as wide as the
    widest features (OGB's R-GCN: 128, the papers')."""
    schema, widths = graph.schema, feature_widths(graph)
    metadata = (list(schema.node_types), list(schema.edge_types))
    embedding = max(widths.values(), default=model.hidden)
    inputs = {t: widths.get(t, embedding) for t in schema.node_types}
    return TypedGNN(RGCN(metadata, inputs, model.hidden, classes, num_layers, model.dropout,
                         model.uses_fast_dropout()), schema, widths, embedding)


def typed_sage(model, graph: TypedGraph, num_layers: int, classes: int) -> nn.Module:
    """model=sage on a typed graph: PyG's to_hetero(GraphSAGE), `classes` wide."""
    from torch_geometric.nn import GraphSAGE
    gnn = GraphSAGE((-1, -1), model.hidden, num_layers, classes, dropout=model.dropout)
    return to_hetero_model(gnn, graph, model.hidden, model.uses_fast_dropout())


def to_hetero_model(gnn: nn.Module, graph: TypedGraph, hidden: int, fast_dropout: bool = False) -> nn.Module:
    """A BasicGNN made typed by to_hetero (sum over relations); a featureless type's embedding as
    wide as the widest features; `fast_dropout` as `wrap_typed`'s."""
    from conveyor.trainer.models.basic_args import recorded_to_hetero
    widths = feature_widths(graph)
    metadata = (list(graph.schema.node_types), list(graph.schema.edge_types))
    return wrap_typed(recorded_to_hetero(gnn, metadata, aggr="sum"), graph, max(widths.values(), default=hidden),
                      fast_dropout)
