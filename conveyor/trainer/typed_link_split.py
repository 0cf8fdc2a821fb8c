"""The link task's split of a typed graph (partition/hetero.py): one edge type's edges into
training, validation and test links, as a PyG user splits a `HeteroData`.

- `random`: PyG's own `RandomLinkSplit(edge_types=edge_type, rev_edge_types=reverse)`, drawn from
  the run's seed (as link_split.py draws the untyped one): the reverse relation loses exactly the
  validation and test edges too, so no held-out link reaches a message-passing graph through its
  reverse edge.
- `temporal` (the edge type has a `time` attribute): the links sorted by time, the earliest
  train, the next `val_ratio` validation, the latest `test_ratio` test, as PyG's
  temporal_link_pred.py and recommender_system.py split MovieLens: a model is tested on the
  future of what it trained on. Held-out pairs leave both relations' message-passing graphs.
  Users active only late have no training link then (cold start: on synthetic_movielens' small
  scales most test links are such users', and a dot decoder ranks them below random pairs).

Either way training's graph holds the training links only, validation's embeddings are computed
on it, and the test's on the training and validation links (RandomLinkSplit's test data), every
other relation whole. Links are global ids of the typed graph (its node types' id ranges);
validation and test links come with as many negatives, pairs of the edge type's node types that
are no edge of it, labelled 0.
"""
from __future__ import annotations

import random

import torch
from torch import Tensor

from conveyor.core import ConveyorError
from conveyor.partition.hetero import EdgeType, Schema, TypedGraph, typed_graph, with_target
from conveyor.samplers import sampler_entry
from conveyor.samplers.temporal import TemporalSpec
from conveyor.trainer.link_split import LinkSplit

TIME = "time"


def link_edge_type(schema: Schema, name) -> EdgeType:
    """The edge type `task.edge_type` names (None: the graph's first relation)."""
    return schema.edge_types[0] if name is None else schema.edge_types[schema.relation(name)]


def reverse_of(schema: Schema, edge_type: EdgeType):
    """The relation that runs `edge_type`'s edges backwards: (dst, rev_<rel>, src) as PyG's
    ToUndirected names it, else the one relation from dst to src; None where there is none."""
    src, rel, dst = edge_type
    if (dst, f"rev_{rel}", src) in schema.edge_types:
        return (dst, f"rev_{rel}", src)
    backwards = [e for e in schema.edge_types if (e[0], e[2]) == (dst, src) and e != edge_type]
    return backwards[0] if len(backwards) == 1 else None


def split_typed_links(graph: TypedGraph, edge_type: EdgeType, val_ratio: float, test_ratio: float, seed: int,
                      how: str = "random") -> LinkSplit:
    """`graph`'s `edge_type` links split (module doc); `how`: random or temporal."""
    schema = graph.schema
    relation = schema.relation(edge_type)
    timed = TIME in graph.type_attrs("edge", relation)
    if how == "temporal" and not timed:
        raise ConveyorError(f"task.split=temporal orders the links by time, but the edge type {edge_type} has no "
                            f"'{TIME}' attribute; give it one, or use task.split=random.")
    temporal = how == "temporal"
    data = graph.to_data()
    reverse = reverse_of(schema, edge_type)
    try:
        with seeded(seed):
            parts = (temporal_parts if temporal else random_parts)(data, edge_type, reverse, val_ratio, test_ratio)
    except ValueError as error:  # too few edges for the split
        raise ConveyorError(f"task=link cannot split the {edge_type} edges of {graph!r}: {error}. Give it more "
                            f"edges, or lower task.val_ratio and task.test_ratio.")
    train, val, test = parts
    offsets = (schema.offsets[schema.node_type(edge_type[0])], schema.offsets[schema.node_type(edge_type[2])])
    links = {name: global_links(store[edge_type], offsets) for name, store in zip(("train", "val", "test"), parts)}
    for name, ratio in (("val", val_ratio), ("test", test_ratio)):
        if int(links[name][1].sum()) == 0:
            raise ConveyorError(f"task=link: task.{name}_ratio={ratio:g} of the {edge_type} edges leaves no "
                                f"{name} link (AUC nan); raise it, or give the graph more edges.")
    kind = "temporal: train on the past, test on the future" if temporal else "random"
    train_links = links["train"][0][:, links["train"][1] > 0]
    times = train[edge_type].edge_label_time if temporal else None
    return LinkSplit(message_graph(graph, train), message_graph(graph, test), train_links, *links["val"],
                     *links["test"], False, f"{edge_type}, {kind}" + (f", reverse {reverse} split alike" if reverse
                                                                        else ""), times)


class seeded:
    """torch's and Python's global generators seeded for PyG's draws, and restored after."""

    def __init__(self, seed: int):
        self.seed = seed

    def __enter__(self):
        self.python, self.fork = random.getstate(), torch.random.fork_rng(devices=[])
        self.fork.__enter__()
        torch.manual_seed(self.seed)
        random.seed(self.seed)

    def __exit__(self, *exc):
        random.setstate(self.python)
        return self.fork.__exit__(*exc)


def random_parts(data, edge_type, reverse, val_ratio: float, test_ratio: float):
    """PyG's RandomLinkSplit of `edge_type` (and its reverse) into three HeteroData."""
    from torch_geometric.transforms import RandomLinkSplit

    return RandomLinkSplit(num_val=val_ratio, num_test=test_ratio, is_undirected=False, edge_types=edge_type,
                           rev_edge_types=reverse, add_negative_train_samples=False)(data)


def temporal_parts(data, edge_type, reverse, val_ratio: float, test_ratio: float):
    """Three HeteroData as RandomLinkSplit's, the links cut by time instead of at random."""
    store = data[edge_type]
    order = torch.argsort(store[TIME], stable=True)
    num_val, num_test = int(val_ratio * order.numel()), int(test_ratio * order.numel())
    num_train = order.numel() - num_val - num_test
    if num_train <= 0:
        raise ValueError("Insufficient number of edges for training")
    cuts = (order[:num_train], order[num_train:num_train + num_val], order[num_train + num_val:])
    sizes = (data[edge_type[0]].num_nodes, data[edge_type[2]].num_nodes)
    parts = []
    for name, message in (("train", cuts[0]), ("val", cuts[0]), ("test", torch.cat(cuts[:2]))):
        part = keep_edges(data, edge_type, reverse, message)
        part[edge_type].edge_label_index, part[edge_type].edge_label = labelled(
            store.edge_index, cuts[("train", "val", "test").index(name)], name != "train", sizes)
        if name == "train":  # each training link's time: its batch is drawn by it (temporal_sampler)
            part[edge_type].edge_label_time = store[TIME][cuts[0]]
        parts.append(part)
    return parts


def temporal_sampler(settings, seed: int, device) -> TemporalSpec:
    """The training batches' node sampler of a temporal split: PyG's temporal sampling
    (samplers/temporal.py) by the edge types' `time`, each training link's subgraph drawn only
    among edges not later than the link (`task.temporal_strategy`), bsp's (sampler.name auto or
    bsp); what cannot draw so is refused by name (check_temporal_sampler, before any work)."""
    sampler = settings.sampler
    return TemporalSpec([int(f) for f in sampler.fanouts], seed, TIME, settings.task.temporal_strategy)


def check_temporal_sampler(settings, device) -> None:
    """task.split=temporal draws its batches by time: asked of the sampler's registry entry (as
    the loaders' time_attr asks it), with sampler.name=auto meaning bsp, the sampler that can."""
    sampler = settings.sampler
    if sampler._target_:
        raise ConveyorError(f"task.split=temporal draws each training link's subgraph by time, with conveyor's "
                            f"temporal sampling (bsp's); your sampler ({sampler._target_}) draws as it likes: "
                            f"leave sampler._target_ out, or use task.split=random.")
    name = "bsp" if sampler.name == "auto" else sampler.name
    sampler_entry(name, None, device).check(True, None, False, True, sampler.draws,
                                            where=" (task.split=temporal)", temporal=True)
    if getattr(settings, "mode", None) == "compare" and not pyg_samples_by_time():
        raise ConveyorError("mode=compare with task.split=temporal: PyG's reference would draw its training batches "
                            "by time as conveyor's run does (LinkNeighborLoader with edge_label_time and time_attr), "
                            "which needs pyg-lib, not installed here. Install pyg-lib, or compare with "
                            "task.split=random.")


def pyg_samples_by_time() -> bool:
    """Whether PyG's own loaders can sample by time here (they need pyg-lib for it)."""
    import torch_geometric.typing as pyg_typing
    return bool(pyg_typing.WITH_PYG_LIB)


def keep_edges(data, edge_type, reverse, kept: Tensor):
    """A copy of `data` whose `edge_type` keeps the edges `kept` (their attributes too) and whose
    `reverse` keeps only the reverses of those pairs."""
    part = data.clone()
    store = data[edge_type]
    for key, value in store.items():
        if store.is_edge_attr(key):
            part[edge_type][key] = value[..., kept] if key == "edge_index" else value[kept]
    if reverse is not None:
        width = data[edge_type[2]].num_nodes
        pairs = store.edge_index[0, kept] * width + store.edge_index[1, kept]
        back = data[reverse].edge_index
        mask = torch.isin(back[1] * width + back[0], pairs)
        for key, value in data[reverse].items():
            if data[reverse].is_edge_attr(key):
                part[reverse][key] = value[..., mask] if key == "edge_index" else value[mask]
    return part


def labelled(edge_index: Tensor, positions: Tensor, with_negatives: bool, sizes):
    """The links at `positions`, followed (validation, test) by as many negatives: pairs of the
    edge type's nodes that are no edge of it, drawn as RandomLinkSplit draws them."""
    from torch_geometric.utils import negative_sampling

    positive = edge_index[:, positions]
    if not with_negatives:
        return positive, torch.ones(positive.size(1))
    negative = negative_sampling(edge_index, num_nodes=sizes, num_neg_samples=positive.size(1))
    return (torch.cat([positive, negative], 1),
            torch.cat([torch.ones(positive.size(1)), torch.zeros(negative.size(1))]))


def global_links(store, offsets) -> tuple:
    """A split's (edge_label_index in the typed graph's global ids, edge_label as float)."""
    index = store.edge_label_index + torch.tensor([[offsets[0]], [offsets[1]]])
    return index, store.edge_label.float()


def message_graph(graph: TypedGraph, data) -> TypedGraph:
    """The typed graph of a split's message-passing edges (every relation's, with their edge
    attributes) over `graph`'s nodes, features, labels and splits."""
    schema = graph.schema
    edges, edge = {}, {}
    for r, edge_type in enumerate(schema.edge_types):
        store = data[edge_type]
        edges[edge_type] = store.edge_index
        edge.update({(edge_type, k): store[k] for k in graph.type_attrs("edge", r)})
    node = {(t, k): v for i, t in enumerate(schema.node_types) for k, v in graph.type_attrs("node", i).items()}
    x = {schema.node_types[t]: v for t, v in graph.features.items()}
    typed = typed_graph(dict(zip(schema.node_types, schema.node_counts)), edges, x=x, node=node, edge=edge,
                        name=f"{graph.name}, link split")
    if schema.target is None:
        return typed
    offset = schema.offsets[schema.node_type(schema.target)]
    local = {s: None if getattr(graph, f"{s}_idx") is None else getattr(graph, f"{s}_idx") - offset
             for s in ("train", "val", "test")}
    count = schema.node_counts[schema.node_type(schema.target)]
    return with_target(typed, schema.target, graph.y[offset:offset + count], graph.num_classes, local)
