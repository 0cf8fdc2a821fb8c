"""The batches of a layer-wise pass (trainer/loop/layerwise.py): drawn and gathered by the async
pipeline's stage processes (PipelinePlan), or, with `pipeline=serial`, sampled in this process
once and kept for the run (LayerwisePlan).

Every evaluation of a run walks the same nodes through the same batches: the targets of each layer
(the nodes within L - i hops of the evaluated ones) and, for each batch of them, all their
in-edges, relabelled to the batch's own ids. Relabelling (a `unique` over each batch's sources)
was half of an evaluation's time on the default run; a kept plan pays it once, at the first
evaluation (drawn as it goes), and keeps each batch's CSR structure, so that the layers' sparse
products (trainer/models/sparse.py) reuse it at every evaluation. A plan is kept when its edges fit
`KEEP_EDGES` (on the host: 8 bytes an edge, 16 once a SAGE or GCN layer has added each target's own
entry; 400-800 MB at the limit); a bigger one (ogbn-products, papers100m) is drawn again each time.

A model that computes a whole layer at once (`runs_whole_layers`: the built-in SAGE, on the CPU)
gets a WholeLayerPlan instead, under the same size limit, serial or async: one CSR structure per
layer over all its targets, its columns the rows of the previous layer's output, built once from
the graph's CSC. No batch then gathers its sources' rows (with a mean degree of 50, every batch of
4,096 targets read nearly every row of the layer below: most of an evaluation's time), no plan is
drawn through the pipeline's stages, and each layer's matrices are made once for the run.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, List, Optional

import torch
from torch import Tensor

from conveyor.partition import Graph
from conveyor.partition.expansion import in_neighbour_chunks
from conveyor.samplers import build_sampler
from conveyor.trainer.models.sparse import Adjacency
from conveyor.trainer.models.sparse import adjacency as sparse_adjacency

KEEP_EDGES = 50_000_000  # graph edges x layers


@dataclass
class LayerBatch:
    layer: int
    start: int  # the first target's position among the layer's targets
    n_id: Tensor  # global ids of the batch's nodes, its targets first
    rows: Tensor  # each node's row in the layer's input: n_id on layer 0, else its position among the previous targets
    edge_index: Tensor  # local ids, row 0 sources, row 1 targets
    num_dst: int
    x: Optional[Tensor] = None  # layer 0: n_id's features as the pipeline gathered them (else read by rows)
    positions: Optional[Tensor] = None  # the edges' CSC positions: their attributes' rows (edge_weight, edge_attr)
    adjacency: Optional[Adjacency] = None  # edge_index's CSR structure, where the plan keeps it


def reached_nodes(graph: Graph, nodes: Tensor, hops: int) -> List[Tensor]:
    """[nodes within `hops` hops of `nodes` (along in-edges), ..., within 1 hop, `nodes`], each
    ascending: the targets of each layer when the last layer's targets are `nodes`."""
    inside = torch.zeros(graph.num_nodes, dtype=torch.bool)
    inside[nodes] = True
    sets, frontier = [inside.nonzero().flatten()], nodes
    for _ in range(hops):
        before = inside.clone()
        for neighbours, _ in in_neighbour_chunks(graph, frontier):
            inside[neighbours] = True
        frontier = (inside & ~before).nonzero().flatten()  # only new nodes have unread in-edges
        sets.append(inside.nonzero().flatten())
    return sets[::-1]


def batch_count(targets: List[Tensor], batch_size: int) -> int:
    """The batches of a layer-wise pass: each layer's targets in batches of `batch_size`."""
    return sum(-(-wanted.numel() // batch_size) for wanted in targets)


class LayerwisePlan:
    """The targets of each layer for `nodes` and their batches of `batch_size` targets; iterating
    gives the LayerBatches in order, layer by layer."""

    def __init__(self, graph: Graph, nodes: Tensor, num_layers: int, batch_size: int):
        self.graph, self.nodes, self.batch_size = graph, nodes, batch_size
        self.targets = reached_nodes(graph, torch.unique(nodes), num_layers - 1)
        self.keep = graph.num_edges * num_layers <= KEEP_EDGES
        self.kept: List[LayerBatch] | None = None  # after the first whole pass, when self.keep

    def __len__(self) -> int:
        return batch_count(self.targets, self.batch_size)

    def __iter__(self) -> Iterator[LayerBatch]:
        if self.kept is None:
            return self.draw_and_keep() if self.keep else self.draw()
        return (LayerBatch(b.layer, b.start, b.n_id, b.rows, b.adjacency.edge_index(), b.num_dst, None,
                           b.positions, b.adjacency) for b in self.kept)

    def draw_and_keep(self) -> Iterator[LayerBatch]:
        """The first pass draws the batches as it goes (its progress bar counts the drawing too)."""
        kept = []
        for batch in self.draw():
            kept.append(self.compact(batch))
            yield batch
        self.kept = kept

    def draw(self) -> Iterator[LayerBatch]:
        full = build_sampler("bsp", self.graph, [-1])  # one hop, every in-neighbour: no random draws
        for layer, wanted in enumerate(self.targets):
            for start in range(0, wanted.numel(), self.batch_size):
                batch = full.sample(wanted[start:start + self.batch_size])
                (edge_index, _num_src, num_dst), = batch.layers()
                rows = batch.n_id if layer == 0 else torch.searchsorted(self.targets[layer - 1], batch.n_id)
                yield LayerBatch(layer, start, batch.n_id, rows, edge_index, num_dst, None, batch.edge_pos_per_hop[0])

    @staticmethod
    def compact(batch: LayerBatch) -> LayerBatch:
        """Kept as the CSR structure the layers' sparse products read (trainer/models/sparse.py),
        built once: no more memory than the edge list it replaces, which is rebuilt from it (in
        its slot order, the positions with it)."""
        adjacency = sparse_adjacency(batch.edge_index, batch.num_dst, batch.n_id.numel())
        positions = None if batch.positions is None else adjacency.in_slot_order(batch.positions)
        adjacency.order = None  # the rebuilt edge list is in slot order
        return LayerBatch(batch.layer, batch.start, batch.n_id, batch.rows, None, batch.num_dst, None, positions,
                          adjacency)


class WholeLayerPlan:
    """Each layer's targets for `nodes` (as LayerwisePlan's) and, made at the first use and kept,
    each layer's Adjacency over all of them: in-edges in CSC order (the order every-neighbour
    sampling gives them), columns the sources' rows in the previous layer's targets (layer 0: the
    node ids, rows of x), `own_col` each target's own row there."""

    def __init__(self, graph: Graph, nodes: Tensor, num_layers: int, batch_size: int):
        self.graph, self.nodes, self.batch_size = graph, nodes, batch_size
        self.targets = reached_nodes(graph, torch.unique(nodes), num_layers - 1)
        self.adjacencies: List[Adjacency | None] = [None] * len(self.targets)

    def __len__(self) -> int:
        return len(self.targets)

    def adjacency(self, layer: int) -> Adjacency:
        if self.adjacencies[layer] is None:
            self.adjacencies[layer] = self.layer_adjacency(layer)
        return self.adjacencies[layer]

    def layer_adjacency(self, layer: int) -> Adjacency:
        wanted, graph = self.targets[layer], self.graph
        if layer == 0:
            row_of, num_src = None, graph.num_nodes
        else:  # a node's row in the previous layer's output
            previous = self.targets[layer - 1]
            row_of, num_src = torch.full((graph.num_nodes,), -1, dtype=torch.long), previous.numel()
            row_of[previous] = torch.arange(previous.numel())
        counts = graph.indptr[wanted + 1] - graph.indptr[wanted]
        crow = torch.zeros(wanted.numel() + 1, dtype=torch.long)
        torch.cumsum(counts, 0, out=crow[1:])
        col = torch.empty(int(crow[-1]), dtype=torch.long)
        done = 0
        for neighbours, _ in in_neighbour_chunks(graph, wanted):  # in CSC order, a bounded slice at a time
            col[done:done + neighbours.numel()] = neighbours if row_of is None else row_of.index_select(0, neighbours)
            done += neighbours.numel()
        own = wanted if row_of is None else row_of.index_select(0, wanted)
        return Adjacency(crow, col, None, num_src, own_col=own, kept={})


class PipelinePlan:
    """The same batches as LayerwisePlan, drawn and gathered by the run's async batch source while
    this process computes (pipeline/phases.py: its stage processes take every in-neighbour of
    each batch's targets, one hop, and gather layer 0's features through the cache). The targets
    are found once, here; the batches are drawn again each pass, off this process."""

    def __init__(self, source, graph: Graph, nodes: Tensor, num_layers: int, batch_size: int):
        self.source, self.batch_size = source, batch_size
        self.targets = reached_nodes(graph, torch.unique(nodes), num_layers - 1)

    def __len__(self) -> int:
        return batch_count(self.targets, self.batch_size)

    def __iter__(self) -> Iterator[LayerBatch]:
        for layer, wanted in enumerate(self.targets):
            seeds = list(wanted.split(self.batch_size))
            prepared = self.source.run(seeds, 0, "layerwise" if layer == 0 else "layerwise-hidden")
            for index, batch in enumerate(prepared):  # to its end: the source counts each batch done
                (edge_index, _num_src, num_dst), = batch.batch.layers()
                n_id = batch.batch.n_id.cpu()
                rows = n_id if layer == 0 else torch.searchsorted(self.targets[layer - 1], n_id)
                positions = batch.batch.edge_pos_per_hop
                yield LayerBatch(layer, index * self.batch_size, n_id, rows, edge_index, num_dst,
                                 batch.x if layer == 0 else None, None if positions is None else positions[0])

