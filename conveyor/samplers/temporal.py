"""Temporal sampling as PyG defines it (pyg-lib's `neighbor_sample` with `node_time` or
`edge_time`), and disjoint sampling on typed graphs: `bsp`'s, seed by seed.

Every seed grows its own subgraph (samplers/disjoint.py: a node is the pair (seed index, id); PyG's
temporal sampling is always disjoint) and carries a time: the seed's own (`seed_time`, PyG's
`input_time` / `edge_label_time`), or, with node-level time and none given, its node's time. A
node of seed s's subgraph draws only among its in-edges that are not later than s's time:

- node-level time (`time_attr` a node attribute): edges whose source node's time <= s's time; on a
  typed graph, a node type without that attribute is never later (pyg-lib samples it freely);
- edge-level time (`time_attr` an edge attribute): edges whose own time <= s's time (the seeds'
  times must then be given).

When the sampler is built, every row of in-edges (a typed graph's: every relation's sub-row) is
sorted by time once (stable: ties keep their CSC order; `time_sorted_rows`), as PyG sorts its CSC
by time for pyg-lib, so the edges not later than a seed's time are a prefix of each row, found by
a binary search in every row of the frontier at once (`not_later`: searchsorted, right side).
`temporal_strategy="uniform"` draws min(valid, fanout) distinct edges of that prefix uniformly
(bsp's Floyd draws, `sample_positions`), `"last"` takes its `fanout` last (the latest; of tied
times the later CSC position), as pyg-lib does on its time-sorted rows; -1 takes them all. A drawn
position is mapped back through the sort (`order`), so positions, edge ids and edge attributes are
the graph's own. Without a time (`time_attr=None`) every in-edge is a candidate: a typed graph's
disjoint draws, uniform. A typed graph's node draws each relation into its type with that
relation's fanout (samplers/typed.py's table), from the relation's sub-row. A hop costs
O(rows x log(degree) + draws), no longer O(sum of the frontier's degrees); the sort costs
O(E log E) and two E-long tensors, once per sampler. Nothing here changes bsp's own draws; `fused`
and `pyg` refuse time (their registry entries: samplers/registry.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Tuple

import torch
from torch import Tensor

from conveyor.core import ConveyorError
from conveyor.core.cores import torch_threads
from conveyor.partition import Graph
from conveyor.partition.hetero import RELATION_PTR, is_typed
from conveyor.samplers.batch import SampledBatch
from conveyor.samplers.bsp import sample_positions
from conveyor.samplers.disjoint import DisjointSampler
from conveyor.samplers.typed import relation_fanouts, slot_fanouts
from conveyor.samplers.validation import check_fanouts, check_seeds

TEMPORAL_STRATEGIES = ("uniform", "last")
NODE_TIME, EDGE_TIME = "node", "edge"


@dataclass(frozen=True)
class TemporalSpec:
    """A `TemporalSampler` as a recipe, built where the sampler runs."""
    fanouts: Any  # one list, or (typed graph) a dict by edge type
    seed: int = 0
    time_attr: Optional[str] = None
    strategy: str = "uniform"
    threads: Any = "auto"

    def build(self, graph: Graph, device) -> "TemporalSampler":
        return TemporalSampler(graph, self.fanouts, device, self.seed, self.time_attr, self.strategy, self.threads)


def never_later(dtype: torch.dtype):
    """A time no seed's time is earlier than: what a typed node or edge without time holds."""
    return -float("inf") if dtype.is_floating_point else torch.iinfo(dtype).min


def checked_time(value: Tensor, rows: int, what: str) -> Tensor:
    if value.dim() != 1 or value.size(0) != rows or value.dtype == torch.bool or value.is_complex():
        raise ConveyorError(f"the time attribute {what} must hold one real number per row ({rows}), got "
                            f"{value.dtype} of shape {tuple(value.shape)}.")
    return value


def time_of(graph: Graph, time_attr: str) -> Tuple[str, Tensor]:
    """(`node` or `edge`, the times): one per node (global ids), or one per edge in CSC order; a
    ConveyorError naming the fix when the graph has no such attribute or it is of both levels."""
    if is_typed(graph):
        return typed_time_of(graph, time_attr)
    if time_attr in graph.node_attrs:
        return NODE_TIME, checked_time(graph.node_attrs[time_attr], graph.num_nodes, repr(time_attr))
    if time_attr in graph.edge_attrs:
        return EDGE_TIME, checked_time(graph.edge_attrs[time_attr], graph.num_edges, repr(time_attr))
    raise ConveyorError(f"The time attribute {time_attr!r} is neither a node-level nor an edge-level attribute of "
                        f"the data: set data.{time_attr} (one time per node or per edge), or name the one it has.")


def typed_time_of(graph, time_attr: str) -> Tuple[str, Tensor]:
    """A typed graph's times (node types or relations without the attribute: never later)."""
    schema = graph.schema
    nodes = {t: graph.typed[f"node.{t}.{time_attr}"] for t in range(len(schema.node_types))
             if f"node.{t}.{time_attr}" in graph.typed}
    edges = {r: graph.typed[f"edge.{r}.{time_attr}"] for r in range(len(schema.edge_types))
             if f"edge.{r}.{time_attr}" in graph.typed}
    if nodes and edges:
        raise ConveyorError(f"The time attribute {time_attr!r} holds both node-level and edge-level information; "
                            f"give it to the node types or to the edge types, not both.")
    if not nodes and not edges:
        raise ConveyorError(f"The time attribute {time_attr!r} is neither a node-level nor an edge-level attribute "
                            f"of any type of the data: set data[node_type].{time_attr} (or per edge type).")
    given, counts = (nodes, schema.node_counts) if nodes else (edges, schema.edge_counts)
    dtype = given[next(iter(given))].dtype
    for value in given.values():
        dtype = torch.promote_types(dtype, value.dtype)
    parts = [checked_time(given[i], n, f"{time_attr!r} of type {i}").to(dtype) if i in given
             else torch.full((n,), never_later(dtype), dtype=dtype) for i, n in enumerate(counts)]
    flat = torch.cat(parts) if parts else torch.empty(0, dtype=dtype)
    return (NODE_TIME, flat) if nodes else (EDGE_TIME, flat.index_select(0, graph.edge_ids))


class TemporalSampler(DisjointSampler):
    """Disjoint subgraphs whose draws respect each seed's time (module doc)."""
    name = "bsp"

    def __init__(self, graph: Graph, fanouts, device="cpu", seed: int = 0, time_attr: Optional[str] = None,
                 strategy: str = "uniform", threads="auto"):
        if strategy not in TEMPORAL_STRATEGIES:
            raise ConveyorError(f"temporal_strategy must be one of {', '.join(TEMPORAL_STRATEGIES)}, got {strategy!r}.")
        table = relation_fanouts(graph.schema, fanouts) if is_typed(graph) else [check_fanouts(fanouts)]
        hops = len(table[0]) if table else 1
        super().__init__(graph, [-1] * hops, device, seed, threads=threads)
        self.strategy = strategy
        self.kind, time = time_of(graph, time_attr) if time_attr is not None else (None, None)
        self.order, self.sorted_time = (None, None) if time is None else time_sorted_rows(graph, self.kind, time)
        self.time = None if time is None else time.to(self.device)
        if self.order is not None:
            self.order, self.sorted_time = self.order.to(self.device), self.sorted_time.to(self.device)
        if is_typed(graph):
            self.ptr = graph.typed[RELATION_PTR].to(self.device)
            self.ends = torch.tensor(graph.schema.offsets[1:], dtype=torch.long, device=self.device)
            self.slots = slot_fanouts(graph, table, hops).to(self.device)
        else:
            self.ptr, self.fanout_table = None, table[0]
        self.seed_time: Optional[Tensor] = None

    def sample(self, seeds) -> SampledBatch:
        return self.sample_at(seeds)

    def sample_many(self, seed_list):
        return [self.sample_at(s) for s in seed_list]

    def sample_at(self, seeds, seed_time: Optional[Tensor] = None) -> SampledBatch:
        """The batch of `seeds` (repeats allowed, each its own subgraph), each seed no later than its
        `seed_time` (None: its node's time, with node-level time)."""
        seeds = check_seeds(seeds, self.num_nodes, unique=False).to(self.device)
        self.seed_time = self.seed_times(seeds, seed_time)
        with torch_threads(self.threads):
            return self._sample(seeds)

    def seed_times(self, seeds: Tensor, seed_time: Optional[Tensor]) -> Optional[Tensor]:
        if self.kind is None:
            return None
        if seed_time is None:
            if self.kind == EDGE_TIME:
                raise ConveyorError("edge-level temporal sampling needs each seed's time: give input_time (or "
                                    "edge_label_time for links).")
            return self.time.index_select(0, seeds)
        seed_time = torch.as_tensor(seed_time).to(self.device)
        if seed_time.shape != seeds.shape:
            raise ConveyorError(f"seed times must be one per seed ({seeds.numel()}), got shape "
                                f"{tuple(seed_time.shape)}.")
        return seed_time

    def rows(self, nodes: Tensor, hop: int) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
        """The rows `nodes` draw from at `hop`: (first position, degree, fanout, index into nodes);
        a typed graph's node has one row per relation into its type."""
        start = self.indptr.index_select(0, nodes)
        if self.ptr is None:
            deg = self.indptr.index_select(0, nodes + 1).sub_(start)
            fanout = torch.full_like(deg, self.fanout_table[hop])
            return start, deg, fanout, torch.arange(nodes.numel(), device=self.device)
        width = self.ptr.size(1)
        first = self.ptr.index_select(0, nodes)
        end = torch.cat([first[:, 1:], self.indptr.index_select(0, nodes + 1)[:, None]], 1)
        types = torch.bucketize(nodes, self.ends, right=True)
        fanout = self.slots[hop].index_select(0, types).reshape(-1)
        deg = (end - first).reshape(-1).masked_fill_(fanout == 0, 0)
        owner = torch.arange(nodes.numel(), device=self.device).repeat_interleave(width)
        return first.reshape(-1), deg, fanout, owner

    def draw(self, nodes: Tensor, hop: int, owners: Optional[Tensor] = None):
        """Hop `hop`'s draws for `nodes` of the seeds `owners` (positions, edges as bsp's)."""
        start, deg, fanout, node_of_row = self.rows(nodes, hop)
        if self.kind is not None:  # each row's valid edges: the prefix not later than its seed's time
            limit = self.seed_time.index_select(0, owners.index_select(0, node_of_row))
            deg = self.not_later(start, deg, limit)
        if self.strategy == "last" and self.kind is not None:  # the prefix's last `fanout`
            take = torch.where(fanout < 0, deg, torch.minimum(deg, fanout.clamp(min=0)))
            pos, row = every_candidate(start + deg - take, take)
        else:
            pos, row = self.uniform(start, deg, fanout)
        edges = torch.empty(2, pos.numel(), dtype=torch.long, device=self.device)
        edges[1] = node_of_row.index_select(0, row)
        return (pos if self.order is None else self.order.index_select(0, pos)), edges

    def not_later(self, start: Tensor, deg: Tensor, limit: Tensor) -> Tensor:
        """How many of each row's edges (time-sorted) are not later than the row's `limit`: a binary
        search in every row at once (searchsorted, right side), log2(largest degree) steps."""
        low, high = torch.zeros_like(deg), deg.clone()
        last = max(self.sorted_time.numel() - 1, 0)
        while True:
            open_ = low < high
            if not bool(open_.any()):
                return low
            mid = (low + high) // 2
            early = self.sorted_time.index_select(0, (start + mid).clamp_(max=last)) <= limit
            low = torch.where(open_ & early, mid + 1, low)
            high = torch.where(open_ & ~early, mid, high)

    def uniform(self, start: Tensor, deg: Tensor, fanout: Tensor) -> Tuple[Tensor, Tensor]:
        """min(deg, fanout) distinct positions of each row (-1: all), uniformly: bsp's Floyd draws,
        one call per distinct fanout (a typed graph's relations may differ); (positions, row)."""
        picked, rows = [], []
        for value in torch.unique(fanout).tolist():
            which = (fanout == value).nonzero().squeeze(1)
            first, count = start.index_select(0, which), deg.index_select(0, which)
            width = int(count.max()) if value < 0 and count.numel() else max(value, 0)
            pos, edges = sample_positions(first, count, width, self.generator)
            picked.append(pos)
            rows.append(which.index_select(0, edges[1]))
        if not picked:
            return start.new_empty(0), start.new_empty(0)
        return torch.cat(picked), torch.cat(rows)


def every_candidate(start: Tensor, deg: Tensor) -> Tuple[Tensor, Tensor]:
    """Every edge position of the rows (`start`, `deg`), row by row, and the row of each."""
    row = torch.repeat_interleave(torch.arange(deg.numel(), device=deg.device), deg)
    first = torch.cumsum(deg, 0).sub_(deg)
    pos = (start - first).index_select(0, row).add_(torch.arange(row.numel(), device=deg.device))
    return pos, row


def time_sorted_rows(graph: Graph, kind: str, time: Tensor) -> Tuple[Tensor, Tensor]:
    """(order, sorted times): every row's in-edges (a typed graph's: every relation's sub-row) by
    time, ties in CSC order; `order[p]` is the CSC position of sorted position p, so a seed's valid
    edges are a prefix of each row. One stable sort by time, then one by row (rows stay in place)."""
    edge_time = time if kind == EDGE_TIME else time.index_select(0, graph.indices.long())
    row = torch.repeat_interleave(torch.arange(graph.num_nodes), torch.diff(graph.indptr))
    if is_typed(graph):  # in-edges are sorted by relation within a node: (node, relation) is a sub-row
        relations = max(len(graph.schema.edge_types), 1)
        row = row * relations + graph.edge_attrs["edge_type"].long()
    order = torch.argsort(edge_time, stable=True)
    order = order.index_select(0, torch.argsort(row.index_select(0, order), stable=True))
    return order, edge_time.index_select(0, order)


@dataclass(frozen=True)
class TimedSeedsSpec:
    """A temporal node loader's sampler: its seeds are positions in `nodes`, each seed drawn no
    later than its `times` entry (PyG's input_time; None: each node's own time)."""
    sampler: TemporalSpec
    nodes: Tensor
    times: Optional[Tensor] = None

    def build(self, graph: Graph, device) -> "TimedSeeds":
        return TimedSeeds(self.sampler.build(graph, device), self.nodes, self.times)


class TimedSeeds:
    """Positions in (nodes, times) in, the temporal sampler's batch of those seeds out."""

    def __init__(self, sampler: TemporalSampler, nodes: Tensor, times: Optional[Tensor]):
        self.sampler, self.nodes, self.times = sampler, nodes, times
        self.name = sampler.name

    def manual_seed(self, seed: int) -> None:
        self.sampler.manual_seed(seed)

    def sample(self, positions: Tensor) -> SampledBatch:
        positions = torch.as_tensor(positions).long().cpu()
        times = None if self.times is None else self.times.index_select(0, positions)
        return self.sampler.sample_at(self.nodes.index_select(0, positions), times)

    def sample_many(self, position_list):
        return [self.sample(p) for p in position_list]
