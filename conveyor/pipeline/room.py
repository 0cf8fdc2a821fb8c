"""How large a batch can be, bounded before it is sampled, and the room the pipeline's batches
take: in /dev/shm (the async pipeline's slots on the CPU, shm.py) and in memory (the host's or the
device's, core/memory.py), checked before each run, so that a batch too large for the machine
(`fanouts x batch`) is one paragraph, never the OOM killer.

A batch's size is bounded from the graph alone: hop h draws at most min(fanout, degree) in-edges
for each node within h - 1 hops (docs/design.md §2.2), at most what the nodes of the largest
in-degrees draw (`Degrees`, a histogram of the in-degrees), and reaches at most every node. The
async pipeline holds `pipeline.slots` ready slots (x, y) and `sampled_slots` sampled ones (n_id;
per hop the edges' two ends and their CSC positions), each buffer a quarter larger than the
largest batch it held (slots.py); the serial one holds one batch. A run's largest batch is its
training batch times `batch_ratio` (evaluation), and the layer-wise evaluation draws one hop of
every in-neighbour.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional

import torch
from torch import Tensor

from conveyor.core.memory import check_memory
from conveyor.pipeline.shm import check_shm_room, fixed_need

GROWTH = 1.25  # a slot's buffer grows to a quarter more than the batch that did not fit it (slots.py)
ID_BYTES = 8  # int64: n_id, an edge's two local ids, its CSC position
FIX = ("Lower the batch size or the fanouts (trainer.batch_size, trainer.eval_batch_size, sampler.fanouts; "
       "NeighborLoader's batch_size, num_neighbors).")


@dataclass(frozen=True)
class BatchBound:
    """The most nodes and edges (all hops) one batch of `seeds` seeds can hold."""
    seeds: int
    nodes: int
    edges: int


class Degrees:
    """The graph's in-degrees as (degree, how many nodes have it) pairs, for the most edges k nodes
    can draw: the k largest in-degrees, each capped at the fanout. Made a chunk of nodes at a
    time (a bincount where degrees are small, else a sort), so a papers100M-sized graph, or one
    with a hub of a billion in-edges, costs no node-sized or degree-sized tensor."""

    CHUNK = 1 << 22
    DENSE = 1 << 22  # the largest degree a chunk is counted with bincount (a tensor this long)

    def __init__(self, indptr: Tensor):
        values, counts = [torch.zeros(1, dtype=torch.long)], [torch.zeros(1, dtype=torch.long)]
        for start in range(0, max(indptr.numel() - 1, 0), self.CHUNK):
            part = indptr[start:start + self.CHUNK + 1]
            v, c = _distinct(part[1:] - part[:-1], self.DENSE)
            values.append(v)
            counts.append(c)
        degrees, where = torch.unique(torch.cat(values), return_inverse=True)
        nodes = torch.zeros(degrees.numel(), dtype=torch.long).scatter_add_(0, where, torch.cat(counts))
        self.ascending = degrees
        self.max_degree = int(degrees[-1])
        self.descending = degrees.flip(0)
        self.nodes_from_top = nodes.flip(0).cumsum(0)  # nodes of at least each degree, largest first
        self.edges_from_top = (nodes.flip(0) * self.descending).cumsum(0)

    def top_edges(self, k: int, fanout: int) -> int:
        """The most in-edges k distinct nodes draw at `fanout` (-1: all of them)."""
        cap = self.max_degree if fanout < 0 else min(int(fanout), self.max_degree)
        bands = self.ascending.numel() - int(torch.searchsorted(self.ascending, cap))  # degrees >= cap
        at_cap = int(self.nodes_from_top[bands - 1]) if bands else 0  # nodes whose draw the fanout caps
        if k <= at_cap:
            return k * cap
        return at_cap * cap + self._top_sum(k) - self._top_sum(at_cap)

    def _top_sum(self, k: int) -> int:
        """The sum of the k largest in-degrees."""
        i = int(torch.searchsorted(self.nodes_from_top, k))  # the first degree band reaching k nodes
        if i >= self.nodes_from_top.numel():
            return int(self.edges_from_top[-1])
        before_nodes = int(self.nodes_from_top[i - 1]) if i else 0
        before_edges = int(self.edges_from_top[i - 1]) if i else 0
        return before_edges + (k - before_nodes) * int(self.descending[i])


def _distinct(degrees: Tensor, dense: int) -> tuple[Tensor, Tensor]:
    """The distinct values of `degrees` and how often each occurs."""
    if degrees.numel() and int(degrees.max()) < dense:
        counts = torch.bincount(degrees)
        values = counts.nonzero().view(-1)
        return values, counts[values]
    return torch.unique(degrees, return_counts=True)


def batch_bound(seeds: int, fanouts: Iterable[int], num_nodes: int, degrees: Degrees,
                through_hops: bool = False) -> BatchBound:
    """Every node within h - 1 hops draws min(fanout, degree) in-edges at hop h (docs/design.md
    §2.2): at most what the nodes of the largest in-degrees draw; the nodes are the graph's (and
    the seeds, should they repeat). `through_hops` (sampler.draws=per_node): hop h's list holds
    the draws of hops 1..h, each at most its bound."""
    reached, edges, drawn = int(seeds), 0, 0
    most_nodes = max(reached, num_nodes)
    for fanout in fanouts:
        distinct = min(reached, num_nodes)
        hop = degrees.top_edges(distinct, fanout) + (reached - distinct) * degrees.top_edges(1, fanout)
        drawn += hop
        edges += drawn if through_hops else hop
        reached = min(reached + hop, most_nodes)
    return BatchBound(int(seeds), int(reached), int(edges))


@dataclass(frozen=True)
class SlotShapes:
    """What a batch's slots hold per node, edge and seed, and how many of them a pipeline keeps."""
    row_bytes: int  # a node's features in the slot (the feature source's dtype)
    label_bytes: int  # a seed's label
    node_extra: int = 0  # a node's other attributes the batch carries (partition.attributes)
    edge_extra: int = 0  # an edge's: its attributes and id
    ready_slots: int = 1  # serial: the one batch in hand
    sampled_slots: int = 1
    growth: float = 1.0  # async: GROWTH

    def bytes(self, bound: BatchBound, features: bool = True) -> int:
        """Every slot grown to hold a batch of `bound`."""
        ready = (bound.nodes * (self.row_bytes * features + self.node_extra) + bound.edges * self.edge_extra
                 + bound.seeds * self.label_bytes)
        sampled = ID_BYTES * (bound.nodes + 3 * bound.edges)
        return int(self.growth * (self.ready_slots * ready + self.sampled_slots * sampled))


@dataclass
class PipelineRoom:
    """The room a batch source's batches take (the async pipeline's slots, or the serial one's
    batch in hand), checked before each run for its largest batch (`check_run`): in /dev/shm
    where the slots are shared memory, and in the memory of the device they are on."""
    shapes: SlotShapes
    device: torch.device
    in_shm: bool  # the async pipeline on the CPU: its slots are in /dev/shm
    num_nodes: int
    degrees: Degrees
    fanouts: Optional[List[int]]  # the sampler's, when it names them (a spec, conveyor's samplers)
    batch_ratio: float = 1.0  # the run's largest batch over its training batch, in seeds
    through_hops: bool = False  # per-node draws: hop h's edges repeat hops 1..h (batch_bound)
    checked: int = 0  # the slot bytes checked so far

    @classmethod
    def of(cls, graph, sampler, features, device, settings=None, batch_ratio: float = 1.0,
           attributes=None) -> "PipelineRoom":
        """`settings`: the async pipeline's (its slot counts), or None for the serial one;
        `attributes`: what else a batch carries (an AttributeStore or its spec), or None."""
        device = torch.device(device)
        counts = (settings.slots, settings.sampled_slots, GROWTH) if settings is not None else ()
        shapes = SlotShapes(feature_row_bytes(features, graph), _row_bytes(graph.y),
                            *attribute_row_bytes(attributes, graph), *counts)
        fanouts = getattr(sampler, "fanouts", None)
        fanouts = [int(f) for f in fanouts] if isinstance(fanouts, (list, tuple)) else None
        through_hops = getattr(sampler, "draws", None) == "per_node" or getattr(sampler, "once", None) is True
        return cls(shapes, device, settings is not None and device.type == "cpu", graph.num_nodes,
                   Degrees(graph.indptr), fanouts, float(batch_ratio), through_hops)

    def slot_bytes(self, seeds: int, phase: str = "train") -> int:
        """The slots grown for a run of `phase` whose largest batch has `seeds` seeds (a training
        run's batches are followed by evaluation's, `batch_ratio` times larger); 0 when the
        sampler's fanouts are unknown (a sampler of one's own)."""
        fanouts = [-1] if phase.startswith("layerwise") else self.fanouts  # pipeline/phases.py
        if fanouts is None or seeds == 0:
            return 0
        largest = math.ceil(seeds * (self.batch_ratio if phase == "train" else 1.0))
        bound = batch_bound(largest, fanouts, self.num_nodes, self.degrees, self.through_hops and fanouts != [-1])
        return self.shapes.bytes(bound, features=phase != "layerwise-hidden")

    def start_need(self, batch_size: Optional[int] = None) -> Dict[str, int]:
        """What the async pipeline places in /dev/shm as it starts: the semaphores and control
        block, and with `batch_size` (seeds of a training batch) its slots for the whole run,
        whose room in memory is checked now too."""
        need = fixed_need()
        if batch_size:
            slots = self.slot_bytes(batch_size)
            self._check_memory(slots, self._slots_what(batch_size), held=0)
            need[self._slots_what(batch_size)] = slots * self.in_shm
            self.checked = slots
        return need

    def check_run(self, seed_batches, phase: str, held: int = 0) -> None:
        """Before a run: room for its seeds and for the slots its largest batch may grow to,
        beyond the `held` bytes the slots already take."""
        sizes = [int(s.numel()) for s in seed_batches]
        largest = max(sizes, default=0)
        slots, what = self.slot_bytes(largest, phase), self._slots_what(largest, phase)
        grows = slots > self.checked
        if self.in_shm:
            need = {"this run's seeds": ID_BYTES * sum(sizes), **({what: slots} if grows else {})}
            check_shm_room(need, held=held if grows else 0)
        if grows and (self.device.type == "cpu" or not self.checked):
            # On a GPU only before the first run: an auto cache then fills the device, leaving the
            # run's largest batch the room it measured (memory.py), which this bound would exceed.
            self._check_memory(slots, what, held)
        self.checked = max(self.checked, slots)

    def _check_memory(self, slots: int, what: str, held: int) -> None:
        check_memory(f"the pipeline's batches on {self.device}", {what: slots - held}, self.device, FIX)

    def _slots_what(self, seeds: int, phase: str = "train") -> str:
        ratio = f" (x{self.batch_ratio:g} for evaluation)" if phase == "train" and self.batch_ratio != 1 else ""
        held = (f"the slots of both queues ({self.shapes.ready_slots} + {self.shapes.sampled_slots})"
                if self.in_shm or self.shapes.growth != 1 else "a batch")
        return f"{held} for batches of {seeds:,} seeds{ratio} at most"


def check_batch_room(graph, fanouts, seeds: int, device, *, row_bytes: Optional[int] = None,
                     hidden: Optional[int] = None, what: Optional[str] = None, fix: str = FIX) -> None:
    """Refuse, in one paragraph, a batch of `seeds` seeds at `fanouts` that cannot fit on `device`
    (the host's or a GPU's memory): at its largest (`batch_bound`), its ids and edges, its features
    (`row_bytes` a node: the graph's x by default) and, with the model's `hidden` width, what a
    forward and backward over it take at least (each layer's messages along the edges at the
    wider of the two widths; every node's activations, twice). For a loader or trainer to call
    before its pipeline starts (`fix`: what to lower, in its own words)."""
    degrees = Degrees(graph.indptr)
    bound = batch_bound(seeds, fanouts, graph.num_nodes, degrees)
    row = _row_bytes(graph.x) if row_bytes is None else row_bytes
    need = {"for its ids and edges": ID_BYTES * (bound.nodes + 3 * bound.edges), "for its features": bound.nodes * row}
    if hidden:
        width, layers = max(row // 4, hidden), len(fanouts)
        need["for the model's messages and activations"] = 4 * (bound.edges * width + 2 * bound.nodes * hidden * layers)
    what = what or (f"a batch of {seeds:,} seeds at fanouts {list(fanouts)} (up to {bound.nodes:,} nodes and "
                    f"{bound.edges:,} edges)")
    check_memory(what, need, device, fix)


def feature_row_bytes(features, graph) -> int:
    """A node's features as the feature source gathers them into a slot: its own width and dtype,
    or (a recipe) the graph's width in the dtype the recipe converts to (cache.dtype), if any; 0
    without a feature source (batches without x)."""
    if features is None:
        return 0
    if hasattr(features, "feature_dim") and hasattr(features, "dtype"):
        return int(features.feature_dim) * _itemsize(features.dtype)
    if graph.x is None:
        return 0
    dtype = getattr(getattr(features, "settings", None), "dtype", None) or graph.x.dtype
    return _row_bytes(graph.x) // graph.x.element_size() * _itemsize(dtype)


def attribute_row_bytes(attributes, graph) -> tuple[int, int]:
    """(bytes a node, bytes an edge) of the other attributes a batch carries: a store's `fields()`,
    or what a spec names of the graph's (and 8 bytes an edge for its id)."""
    if attributes is None:
        return 0, 0
    if callable(getattr(attributes, "fields", None)):
        sizes = {kind: 0 for kind in ("node", "edge")}
        for kind, shape, dtype in attributes.fields().values():
            sizes[kind] = sizes.get(kind, 0) + math.prod(shape) * _itemsize(dtype)
        return sizes["node"], sizes["edge"]
    node = sum(_row_bytes(graph.node_attrs.get(n)) for n in getattr(attributes, "node", ()))
    edge = sum(_row_bytes(graph.edge_attrs.get(e)) for e in getattr(attributes, "edge", ()))
    return node, edge + ID_BYTES * bool(getattr(attributes, "e_id", False))


def _itemsize(dtype) -> int:
    if isinstance(dtype, torch.dtype):
        return dtype.itemsize
    return getattr(torch, str(dtype).removeprefix("torch."), torch.float32).itemsize


def _row_bytes(tensor: Optional[Tensor]) -> int:
    """Bytes of one row (one node's entry) of `tensor`."""
    return 0 if tensor is None else math.prod(tensor.shape[1:]) * tensor.element_size()
