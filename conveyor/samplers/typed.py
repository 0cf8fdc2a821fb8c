"""`bsp` on a typed graph (partition/hetero.py), as PyG's heterogeneous `NeighborLoader` samples:
at each hop every node draws, for each relation into its type, min(deg, fanout) distinct in-edges
of that relation, with that relation's fanout (`num_neighbors` per edge type, or one list for
all), uniformly (Floyd) or by weight, from the relation's own sub-row of its in-edges
(`relation_ptr`).

The draw is the untyped sampler's (`bsp.sample_positions`), vectorised over the (node, relation)
pairs of the hop instead of the nodes: one call per distinct fanout among the hop's relations
(one call when every relation has the same fanout, as with a list). Everything else is
`BSPSampler`'s: the new nodes of a hop deduplicated over global ids (one bitmap or sort serves
every node type, each type being its own id range), appended in ascending id order (so grouped by
type), the int32 global->local map, positions per edge, `once`. On a graph of one node type and
one relation it draws exactly the untyped sampler's batches (tested).
"""
from __future__ import annotations

from typing import List

import torch
from torch import Tensor

from conveyor.core import ConveyorError
from conveyor.partition.hetero import RELATION_PTR, Schema, TypedGraph
from conveyor.samplers.bsp import BSPSampler, sample_positions
from conveyor.samplers.validation import cap_fanouts, check_fanouts


def relation_fanouts(schema: Schema, fanouts, name: str = "num_neighbors") -> List[List[int]]:
    """Each relation's fanouts, hop 1 first: one list for every relation, or a dict by edge type
    ((src, rel, dst), or (src, dst) where one relation joins them) naming every relation, all with
    the same number of hops (PyG's NumNeighbors)."""
    if not isinstance(fanouts, dict):
        return [check_fanouts(fanouts, name)] * len(schema.edge_types)
    given = {}
    for key, value in fanouts.items():
        try:
            given[schema.relation(key)] = check_fanouts(value, f"{name}[{key!r}]")
        except ConveyorError as error:
            if "edge type" not in str(error):
                raise
            raise ConveyorError(f"Not all edge types specified in '{name}' exist in the graph: {key!r} is not "
                                f"one of {list(schema.edge_types)}.") from None
    missing = [schema.edge_types[r] for r in range(len(schema.edge_types)) if r not in given]
    if missing:
        raise ConveyorError(f"Missing number of neighbors for edge type {missing[0]!r}: a dict {name} names every "
                            f"edge type of the graph (or give one list for all of them).")
    hops = {len(v) for v in given.values()}
    if len(hops) > 1:
        raise ConveyorError(f"Number of hops must be the same across all edge types (got {len(hops)} different "
                            f"number of hops in {name}): give every edge type one fanout per hop.")
    return [given[r] for r in range(len(schema.edge_types))]


class TypedSampler(BSPSampler):
    """`BSPSampler` drawing each relation with its own fanouts (module doc)."""

    def __init__(self, graph: TypedGraph, fanouts, device="cpu", seed: int = 0, once: bool = False,
                 weight_attr: str | None = None, threads="auto"):
        table = relation_fanouts(graph.schema, fanouts)
        hops = len(table[0]) if table else 1  # a graph without edges draws nothing, in one hop
        super().__init__(graph, [-1] * hops, device, seed, once, weight_attr, threads)  # the hop count: `table` draws
        self.ptr = graph.typed[RELATION_PTR].to(self.device)
        self.ends = torch.tensor(graph.schema.offsets[1:], dtype=torch.long, device=self.device)
        self.slot_fanouts = slot_fanouts(graph, table, hops).to(self.device)  # [hops, types, K]

    def draw(self, nodes: Tensor, hop: int):
        """Hop `hop`'s draws for `nodes`, each relation's from its sub-rows (module doc)."""
        width = self.ptr.size(1)
        start = self.ptr.index_select(0, nodes)
        end = torch.cat([start[:, 1:], self.indptr.index_select(0, nodes + 1)[:, None]], 1)
        deg = (end - start).view(-1)
        fanout = self.slot_fanouts[hop].index_select(0, torch.bucketize(nodes, self.ends, right=True)).view(-1)
        positions, edges = [], []
        for value in torch.unique(fanout[deg > 0]).tolist():  # ascending: the same order every call
            if value == 0:
                continue
            pairs = ((fanout == value) & (deg > 0)).nonzero().squeeze(1)  # node by node, slot by slot
            pos, hop_edges = sample_positions(start.view(-1).index_select(0, pairs), deg.index_select(0, pairs),
                                              value, self.generator, self.keys)
            hop_edges[1] = pairs.index_select(0, hop_edges[1]).div_(width, rounding_mode="floor")
            positions.append(pos)
            edges.append(hop_edges)
        if not positions:
            return torch.empty(0, dtype=torch.long, device=self.device), torch.empty(2, 0, dtype=torch.long,
                                                                                   device=self.device)
        return torch.cat(positions), torch.cat(edges, 1)


def slot_fanouts(graph: TypedGraph, table: List[List[int]], hops: int) -> Tensor:
    """[hops, node types, K]: the fanout of each node type's k-th relation at each hop, capped at
    that relation's largest sub-row (-1: all of it); 0 where a type has no k-th relation."""
    schema, ptr = graph.schema, graph.typed[RELATION_PTR]
    ends = torch.cat([ptr[:, 1:], graph.indptr[1:, None]], 1) if ptr.size(1) else ptr
    deg = ends - ptr
    out = torch.zeros(hops, len(schema.node_types), ptr.size(1), dtype=torch.long)
    offsets = schema.offsets
    for t, relations in enumerate(schema.in_relations()):
        for k, r in enumerate(relations):
            rows = deg[offsets[t]:offsets[t + 1], k]
            out[:, t, k] = torch.tensor(cap_fanouts(table[r], int(rows.max()) if rows.numel() else 0))
    return out
