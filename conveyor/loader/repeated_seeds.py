"""Seed nodes given more than once in one batch, as PyG's loader takes them.

PyG's `NeighborLoader` gives each seed of a batch its own place: `input_nodes=[0, 0, 1]` makes
`n_id[:3] = [0, 0, 1]`, each copy a target of its own hop-1 edges, the nodes sampled after them
shared. conveyor's samplers take a batch's seeds once each (their dedup starts from the seeds), so
the loader samples the batch's distinct seeds and then gives each repeat its place here: the
seeds in the order given, then the rest of the batch's nodes; the hop-1 edges of a seed once per
copy (with their edge attributes and e_id), every later edge once. A repeat's neighbours are its
first copy's draw (PyG draws each copy anew: same distribution, not independent).
"""
from __future__ import annotations

import torch
from torch import Tensor
from torch_geometric.data import Data

from conveyor.core import ConveyorError
from conveyor.loader.pyg_input import ADJ_T, EDGE, NODE, BatchLayout, X


def has_repeats(seeds: Tensor) -> bool:
    return torch.unique(seeds).numel() != seeds.numel()


def directional_repeats(ids: Tensor, subgraph_type: str) -> Tensor:
    """`ids`, once checked that a node given more than once comes with directional subgraphs."""
    if subgraph_type != "directional" and has_repeats(ids):
        raise ConveyorError(f"input_nodes holds some node more than once, which conveyor.NeighborLoader "
                            f"takes with subgraph_type='directional' only (got {subgraph_type!r}); pass "
                            f"each node once (torch.unique(input_nodes)).")
    return ids


def distinct_seeds(seeds: Tensor) -> Tensor:
    """`seeds` with each node once, at its first place."""
    if not has_repeats(seeds):
        return seeds
    distinct, which = torch.unique(seeds, return_inverse=True)
    return seeds[first_places(which, distinct.numel()).sort().values]


def first_places(which: Tensor, count: int) -> Tensor:
    """For each of `count` values, the first place in `which` (a value per place) that holds it."""
    first = torch.full((count,), which.numel(), dtype=torch.long, device=which.device)
    return first.scatter_reduce_(0, which, torch.arange(which.numel(), device=which.device), "amin")


def with_repeated_seeds(data: Data, seeds: Tensor, layout: BatchLayout) -> Data:
    """`data`, a directional batch sampled from `distinct_seeds(seeds)`, with every seed in its
    place as `seeds` gives them (module doc)."""
    if any(kind == ADJ_T for _, kind in layout.keys):
        raise ConveyorError("a batch holds a seed more than once, which conveyor's loader places for edge_index but "
                            "not for adj_t; give each seed once, or the graph as edge_index.")
    distinct = int(data.batch_size)
    copy_of = place_in(data.n_id[:distinct], seeds.to(data.n_id.device))  # each given seed's place among the distinct
    first_place = first_places(copy_of, distinct)
    rest = torch.arange(distinct, data.n_id.numel(), device=copy_of.device)
    node_order = torch.cat([copy_of, rest])  # new node -> old node
    new_place = torch.cat([first_place, rest - distinct + seeds.numel()])  # old node -> new node
    edge_order, targets = hop_one_copies(data.edge_index[1, :data.num_sampled_edges[0]], copy_of, distinct)
    later = torch.arange(data.num_sampled_edges[0], data.edge_index.size(1), device=copy_of.device)
    edges = torch.cat([edge_order, later])
    edge_index = new_place[data.edge_index[:, edges]]
    edge_index[1, :targets.numel()] = targets
    for key, kind in layout.keys:
        if kind in (X, NODE):
            data[key] = data[key][node_order.to(data[key].device)]
        elif kind == EDGE:
            data[key] = data[key][edges.to(data[key].device)]
    for key in ("n_id", "e_id"):
        if key in data and all(key != k for k, _ in layout.keys):
            data[key] = data[key][(node_order if key == "n_id" else edges).to(data[key].device)]
    data.edge_index = edge_index
    if "num_nodes" in data:
        data.num_nodes = data.n_id.numel()
    data.num_sampled_nodes = [seeds.numel()] + list(data.num_sampled_nodes[1:])
    data.num_sampled_edges = [targets.numel()] + list(data.num_sampled_edges[1:])
    data.batch_size = seeds.numel()
    return data


def place_in(distinct: Tensor, seeds: Tensor) -> Tensor:
    """For each of `seeds`, its position in `distinct` (which holds each of them once)."""
    order = torch.argsort(distinct)
    return order[torch.searchsorted(distinct[order], seeds)]


def hop_one_copies(targets: Tensor, copy_of: Tensor, distinct: int):
    """The hop-1 edges (their positions) once per copy of their target seed, in the copies' order
    and, within one, in the sampler's; and each such edge's new target (the copy's place)."""
    order = torch.argsort(targets, stable=True)
    counts = torch.bincount(targets, minlength=distinct)
    starts = torch.cumsum(counts, 0) - counts
    lengths = counts[copy_of]
    first_of_each = torch.repeat_interleave(torch.cumsum(lengths, 0) - lengths, lengths)
    within = torch.arange(int(lengths.sum()), device=targets.device) - first_of_each
    edges = order[torch.repeat_interleave(starts[copy_of], lengths) + within]
    return edges, torch.repeat_interleave(torch.arange(copy_of.numel(), device=targets.device), lengths)


def with_repeated_typed_seeds(data, seeds: Tensor, layout, input_type: str):
    """`data`, a directional HeteroData batch sampled from the distinct seeds of `input_type`, with
    every seed in its place as `seeds` (type-local ids) gives them: the same placement as
    `with_repeated_seeds`, on the input type's nodes and on every edge type that reaches them
    (hop-1 edges into the seeds once per copy, every other index into the type renumbered)."""
    if any(kind == ADJ_T for keys in layout.edge_keys.values() for _, kind in keys):
        raise ConveyorError("a HeteroData batch holds a seed more than once, which conveyor's loader places for "
                            "edge_index but not for adj_t; give each seed once, or the edge types as edge_index.")
    store = data[input_type]
    distinct = int(store.batch_size)
    copy_of = place_in(store.n_id[:distinct], seeds.to(store.n_id.device))
    rest = torch.arange(distinct, store.n_id.numel(), device=copy_of.device)
    node_order = torch.cat([copy_of, rest])
    new_place = torch.cat([first_places(copy_of, distinct), rest - distinct + seeds.numel()])
    for key, kind in layout.node_keys[input_type]:
        if kind in (X, NODE):
            store[key] = store[key][node_order.to(store[key].device)]
    if all(key != "n_id" for key, _ in layout.node_keys[input_type]):
        store.n_id = store.n_id[node_order]
    for edge_type in data.edge_types:
        if input_type in (edge_type[0], edge_type[-1]):
            renumber_edges(data[edge_type], layout.edge_keys[edge_type], edge_type, input_type, copy_of, distinct,
                           new_place)
    store.num_sampled_nodes = [seeds.numel()] + list(store.num_sampled_nodes[1:])
    store.batch_size = seeds.numel()
    return data


def renumber_edges(store, keys, edge_type, input_type: str, copy_of: Tensor, distinct: int, new_place: Tensor):
    """One edge type's edges with the input type's nodes in their new places (above)."""
    hop_one = int(store.num_sampled_edges[0]) if edge_type[-1] == input_type else 0
    order, targets = hop_one_copies(store.edge_index[1, :hop_one], copy_of, distinct)
    edges = torch.cat([order, torch.arange(hop_one, store.edge_index.size(1), device=order.device)])
    edge_index = store.edge_index[:, edges]
    if edge_type[0] == input_type:
        edge_index[0] = new_place[edge_index[0]]
    if edge_type[-1] == input_type:
        edge_index[1] = new_place[edge_index[1]]
        edge_index[1, :targets.numel()] = targets
    for key, kind in keys:
        if kind == EDGE:
            store[key] = store[key][edges.to(store[key].device)]
    if "e_id" in store and all(key != "e_id" for key, _ in keys):
        store.e_id = store.e_id[edges.to(store.e_id.device)]
    store.edge_index = edge_index
    first = targets.numel() if edge_type[-1] == input_type else int(store.num_sampled_edges[0])
    store.num_sampled_edges = [first] + list(store.num_sampled_edges[1:])
