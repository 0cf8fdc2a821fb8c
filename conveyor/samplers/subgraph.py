"""PyG's batch edges (`subgraph_type`), made from any sampler's batch where it is drawn.

conveyor's samplers may draw at hop h for every node reached so far (message-flow graphs: bsp,
fused). PyG's batch is one edge list in which every node draws once, at the hop after the one that
first reached it, hop 1's edges first, so that `trim_to_layer` can cut the last hops off as a
prefix. Keeping, at hop h, only the edges into the nodes first reached at hop h-1 gives exactly
that, whichever of the two the sampler drew (`pyg_edges`: PyG's `directional` subgraph). A node
reached only through a dropped edge stays in n_id without an edge to the seeds: it changes no
output.

`SubgraphSampler` makes PyG's two other subgraph types in the sampler's process, so that the edge
attributes the pipeline gathers afterwards follow the edges it keeps: `bidirectional`, the
directional edges and their reverses, each (source, target) pair once, sorted by target then
source, a reverse carrying the position (attributes, e_id) of the edge it mirrors (PyG's
`to_bidirectional`, whose `coalesce(reduce="any")` keeps one id per pair: here the first, the
drawn edge's); `induced`, every edge of the graph between the sampled nodes (PyG's torch_sparse
`directed=False`), by target then CSC order. Their batches keep the node counts per hop and hold
every edge in hop 1's list: the hop structure is gone, as in PyG, whose batches then have no
`num_sampled_nodes`/`num_sampled_edges`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List, Optional, Tuple

import torch
from torch import Tensor

from conveyor.core import ConveyorError
from conveyor.partition import Graph
from conveyor.samplers.batch import SampledBatch

SUBGRAPH_TYPES = ("directional", "bidirectional", "induced")


def hop_masks(batch: SampledBatch) -> List[Optional[Tensor]]:
    """Per hop, which of its edges PyG's batch keeps (None: all of them)."""
    counts = batch.num_nodes_per_hop.tolist()
    masks = []
    for h, edges in enumerate(batch.edge_index_per_hop, start=1):
        if h == 1:
            masks.append(None)
            continue
        target = edges[1]  # the nodes first reached at hop h-1 draw at hop h
        keep = (target >= counts[h - 2]) & (target < counts[h - 1])
        masks.append(None if bool(keep.all()) else keep)
    return masks


def pyg_edges(batch: SampledBatch) -> Tuple[Tensor, Optional[Tensor], Optional[Tensor], List[int]]:
    """PyG's one edge_index (hop 1's first), those edges' CSC positions (or None), the mask of the
    edges kept over every hop's edges in order (None: all kept), and each hop's count kept."""
    masks = hop_masks(batch)
    kept = [e if m is None else e[:, m] for e, m in zip(batch.edge_index_per_hop, masks)]
    edge_index = torch.cat(kept, dim=1).long() if kept else torch.empty(2, 0, dtype=torch.long)
    mask = None
    if any(m is not None for m in masks):
        mask = torch.cat([torch.ones(e.size(1), dtype=torch.bool, device=e.device) if m is None else m
                          for e, m in zip(batch.edge_index_per_hop, masks)])
    positions = None
    if batch.edge_pos_per_hop is not None:
        positions = torch.cat(batch.edge_pos_per_hop) if batch.edge_pos_per_hop else edge_index.new_empty(0)
        positions = positions if mask is None else positions[mask]
    return edge_index, positions, mask, [int(e.size(1)) for e in kept]


@dataclass(frozen=True)
class SubgraphSpec:
    """`kind`'s batches from the sampler (or spec) `sampler`: built where the sampler is."""
    sampler: Any
    kind: str

    def build(self, graph: Graph, device) -> "SubgraphSampler":
        inner = self.sampler.build(graph, device) if callable(getattr(self.sampler, "build", None)) else self.sampler
        return SubgraphSampler(inner, graph, self.kind, device)


class SubgraphSampler:
    """Draws with `sampler`, then makes each batch's edges PyG's `kind` subgraph (module doc)."""

    def __init__(self, sampler, graph: Graph, kind: str, device="cpu"):
        if kind not in SUBGRAPH_TYPES[1:]:
            raise ConveyorError(f"subgraph_type must be one of {', '.join(SUBGRAPH_TYPES)}, got {kind!r}.")
        self.sampler, self.kind, self.device = sampler, kind, torch.device(device)
        self.name = f"{getattr(sampler, 'name', type(sampler).__name__)}, {kind}"
        if kind == "induced":
            self.indptr, self.indices = graph.indptr.to(self.device), graph.indices.to(self.device)
            self.local = torch.full((graph.num_nodes,), -1, dtype=torch.long, device=self.device)

    def manual_seed(self, seed: int) -> None:
        if callable(getattr(self.sampler, "manual_seed", None)):
            self.sampler.manual_seed(seed)

    def sample(self, seeds) -> SampledBatch:
        batch = self.sampler.sample(seeds)
        if self.kind == "bidirectional":
            edges, positions = bidirectional(*pyg_edges(batch)[:2], batch.n_id.numel())
        else:
            edges, positions = self.induced(batch.n_id)
        empty = [edges.new_empty(2, 0)] * (batch.num_hops - 1)
        no_positions = [edges.new_empty(0)] * (batch.num_hops - 1)
        return SampledBatch(batch.n_id, batch.num_nodes_per_hop, [edges, *empty],
                            None if positions is None else [positions, *no_positions])

    def sample_many(self, seed_list):
        return [self.sample(s) for s in seed_list]

    def induced(self, n_id: Tensor) -> Tuple[Tensor, Tensor]:
        """Every edge of the graph whose two ends are in `n_id`, as local ids, and its positions."""
        n = n_id.numel()
        self.local.index_copy_(0, n_id, torch.arange(n, device=self.device))
        start = self.indptr.index_select(0, n_id)
        degree = self.indptr.index_select(0, n_id + 1) - start
        target = torch.repeat_interleave(torch.arange(n, device=self.device), degree)
        first = torch.cumsum(degree, 0) - degree
        positions = torch.arange(target.numel(), device=self.device) - first[target] + start[target]
        source = self.local.index_select(0, self.indices.index_select(0, positions).long())
        keep = source >= 0
        self.local.index_fill_(0, n_id, -1)  # O(batch) reset for the next call
        return torch.stack([source[keep], target[keep]]), positions[keep]


def bidirectional(edge_index: Tensor, positions: Optional[Tensor], num_nodes: int):
    """The edges and their reverses, each pair once (the first: the drawn edge), sorted by
    target then source; a reverse edge keeps its original's position."""
    both = torch.cat([edge_index, edge_index.flip(0)], dim=1)
    key = both[1] * max(num_nodes, 1) + both[0]
    key, order = torch.sort(key, stable=True)
    first = torch.ones_like(key, dtype=torch.bool)
    first[1:] = key[1:] != key[:-1]
    order = order[first]
    return both[:, order], None if positions is None else torch.cat([positions, positions])[order]
