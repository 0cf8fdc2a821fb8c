"""Room in /dev/shm for the async pipeline, checked before its processes start and before each run.

CPU shared memory lives in /dev/shm, and Docker gives a container 64 MB there by default: a stage
would die on torch's "unable to allocate shared memory", a queue on `OSError: [Errno 28]`. So
what the pipeline will place there is estimated from what it really places there, and a
shortfall is refused in one paragraph with the fixes (`pipeline=serial`, `--shm-size`):

- the graph's tensors that are not mapped from its saved file (sharing.py moves them once; every
  attribute, `node_attrs` and `edge_attrs` too);
- a sampler or feature source handed over as an object, not a recipe: pickling it into its stage
  moves its tensors there (a memory-mapped one too);
- the queues' named semaphores and the control block, a page each;
- each run's seeds, which travel to the sampler as one shared tensor;
- the slots of both queues at their largest: `pipeline.slots` ready slots (x, y) and
  `sampled_slots` sampled ones (n_id; per hop the edges' two ends and their CSC positions), each
  buffer a quarter larger than the largest batch it held (slots.py). A batch's size is bounded
  before it is sampled: hop h draws at most min(fanout, the largest in-degree) edges for each node
  within h - 1 hops (docs/design.md §2.2), never more than the graph's edges, and reaches at most
  every node. The run's largest batch is its training batch times `batch_ratio` (evaluation), and
  the layer-wise evaluation draws one hop of every in-neighbour: the slots must hold both.
On a GPU the slots are device memory: they count nothing here.
"""
from __future__ import annotations

import errno
import math
import os
import shutil
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional

import torch
from torch import Tensor

from conveyor.core import ConveyorError

SHM = "/dev/shm"
GROWTH = 1.25  # a slot's buffer grows to a quarter more than the batch that did not fit it (slots.py)
PAGE = os.sysconf("SC_PAGE_SIZE")
SEMAPHORES = 6 * 3 + 2  # processes.py: six Queues (a read lock, a write lock, a counter) and a SimpleQueue
ID_BYTES = 8  # int64: n_id, an edge's two local ids, its CSC position
SHM_FAILURE = "unable to allocate shared memory"  # torch's words when /dev/shm is full


@dataclass(frozen=True)
class BatchBound:
    """The most nodes and edges (all hops) one batch of `seeds` seeds can hold."""
    seeds: int
    nodes: int
    edges: int


class Degrees:
    """The graph's in-degrees as a histogram (one count per degree, not per node: small, and made
    in chunks, so a papers100M-sized graph costs no node-sized tensor), for the most edges k nodes
    can draw: the k largest in-degrees, each capped at the fanout."""

    CHUNK = 1 << 22

    def __init__(self, indptr: Tensor):
        counts = torch.zeros(1, dtype=torch.long)
        for start in range(0, max(indptr.numel() - 1, 0), self.CHUNK):
            part = indptr[start:start + self.CHUNK + 1]
            hist = torch.bincount(part[1:] - part[:-1])
            if hist.numel() > counts.numel():
                counts = torch.cat([counts, counts.new_zeros(hist.numel() - counts.numel())])
            counts[:hist.numel()] += hist
        descending = counts.flip(0)  # degree max_degree first
        self.max_degree = counts.numel() - 1
        self.nodes_from_top = descending.cumsum(0)  # nodes of degree >= max_degree - i
        self.edges_from_top = (descending * torch.arange(self.max_degree, -1, -1)).cumsum(0)

    def top_edges(self, k: int, fanout: int) -> int:
        """The most in-edges k distinct nodes draw at `fanout` (-1: all of them)."""
        cap = self.max_degree if fanout < 0 else min(int(fanout), self.max_degree)
        at_cap = int(self.nodes_from_top[self.max_degree - cap])  # nodes whose draw the fanout caps
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
        return before_edges + (k - before_nodes) * (self.max_degree - i)


def batch_bound(seeds: int, fanouts: Iterable[int], num_nodes: int, degrees: Degrees) -> BatchBound:
    """Every node within h - 1 hops draws min(fanout, degree) in-edges at hop h (docs/design.md
    §2.2): at most what the nodes of the largest in-degrees draw; the nodes are the graph's (and
    the seeds, should they repeat)."""
    reached, edges = int(seeds), 0
    most_nodes = max(reached, num_nodes)
    for fanout in fanouts:
        distinct = min(reached, num_nodes)
        hop = degrees.top_edges(distinct, fanout) + (reached - distinct) * degrees.top_edges(1, fanout)
        edges += hop
        reached = min(reached + hop, most_nodes)
    return BatchBound(int(seeds), int(reached), int(edges))


@dataclass(frozen=True)
class SlotShapes:
    """What a batch's slots hold per node, edge and seed, and how many slots each queue has."""
    row_bytes: int  # a node's features in the slot (the feature source's dtype)
    label_bytes: int  # a seed's label
    ready_slots: int
    sampled_slots: int

    def bytes(self, bound: BatchBound, features: bool = True) -> int:
        """Both queues' slots, every one grown to hold a batch of `bound`."""
        ready = bound.nodes * self.row_bytes * features + bound.seeds * self.label_bytes
        sampled = ID_BYTES * (bound.nodes + 3 * bound.edges)
        return int(GROWTH * (self.ready_slots * ready + self.sampled_slots * sampled))


def shared_bytes(tensors: Iterable[Tensor]) -> int:
    """Bytes that sharing `tensors` moves into shared memory: the storages of the CPU ones not
    there already, each once (a view shares its whole storage)."""
    storages = {}
    for t in tensors:
        if isinstance(t, Tensor) and t.device.type == "cpu" and not t.is_shared():
            storage = t.untyped_storage()
            storages[storage.data_ptr()] = storage.nbytes()
    return sum(storages.values())


def object_tensors(obj, depth: int = 4) -> List[Tensor]:
    """The tensors pickling `obj` would carry: found through its attributes, dicts, lists and
    tuples (a sampler's graph, a feature cache's rows), `depth` levels down."""
    found, seen, todo = [], set(), [(obj, 0)]
    while todo:
        item, level = todo.pop()
        if id(item) in seen or level > depth:
            continue
        seen.add(id(item))
        if isinstance(item, Tensor):
            found.append(item)
        elif isinstance(item, dict):
            todo += [(v, level + 1) for v in item.values()]
        elif isinstance(item, (list, tuple)):
            todo += [(v, level + 1) for v in item]
        elif hasattr(item, "__dict__") and not isinstance(item, type):
            todo += [(v, level + 1) for v in vars(item).values()]
    return found


@dataclass
class PipelineRoom:
    """The async pipeline's room in /dev/shm: what it places there at its start (`start_need`),
    and before each run the slots that run's batches may grow (`check_run`)."""
    shapes: Optional[SlotShapes]  # None: the slots are device memory (a GPU)
    num_nodes: int
    degrees: Degrees
    fanouts: Optional[List[int]]  # the sampler's, when it names them (a spec, conveyor's samplers)
    batch_ratio: float = 1.0  # the run's largest batch over its training batch, in seeds
    checked: int = 0  # the slot bytes checked so far

    @classmethod
    def of(cls, graph, sampler, features, device, settings, batch_ratio: float = 1.0) -> "PipelineRoom":
        shapes = None
        if torch.device(device).type == "cpu":
            shapes = SlotShapes(feature_row_bytes(features, graph), _row_bytes(graph.y),
                                settings.slots, settings.sampled_slots)
        fanouts = getattr(sampler, "fanouts", None)
        fanouts = [int(f) for f in fanouts] if isinstance(fanouts, (list, tuple)) else None
        return cls(shapes, graph.num_nodes, Degrees(graph.indptr), fanouts, float(batch_ratio))

    def slot_bytes(self, seeds: int, phase: str = "train") -> int:
        """Both queues' slots grown for a run of `phase` whose largest batch has `seeds` seeds
        (a training run's batches are followed by evaluation's, `batch_ratio` times larger);
        0 when they are on a GPU or the sampler's fanouts are unknown (its own sampler)."""
        fanouts = [-1] if phase.startswith("layerwise") else self.fanouts  # pipeline/phases.py
        if self.shapes is None or fanouts is None or seeds == 0:
            return 0
        largest = math.ceil(seeds * (self.batch_ratio if phase == "train" else 1.0))
        bound = batch_bound(largest, fanouts, self.num_nodes, self.degrees)
        return self.shapes.bytes(bound, features=phase != "layerwise-hidden")

    def start_need(self, batch_size: Optional[int] = None) -> Dict[str, int]:
        """What the pipeline places there as it starts: the semaphores and control block, and
        with `batch_size` (seeds of a training batch) its slots for the whole run."""
        need = fixed_need()
        if batch_size:
            self.checked = self.slot_bytes(batch_size)
            need[self._slots_what(batch_size)] = self.checked
        return need

    def check_run(self, seed_batches, phase: str, held: int) -> None:
        """Before a run: room for its seeds and for the slots its largest batch may grow to,
        beyond the `held` bytes the slots already take."""
        sizes = [int(s.numel()) for s in seed_batches]
        largest = max(sizes, default=0)
        slots = self.slot_bytes(largest, phase)
        need = {"this run's seeds": ID_BYTES * sum(sizes)}
        if slots > self.checked:
            need[self._slots_what(largest, phase)] = slots
        check_shm_room(need, held=held if slots > self.checked else 0)
        self.checked = max(self.checked, slots)

    def _slots_what(self, seeds: int, phase: str = "train") -> str:
        ratio = f" (x{self.batch_ratio:g} for evaluation)" if phase == "train" and self.batch_ratio != 1 else ""
        return (f"the slots of both queues ({self.shapes.ready_slots} + {self.shapes.sampled_slots}) for batches "
                f"of {seeds:,} seeds{ratio} at most")


def feature_row_bytes(features, graph) -> int:
    """A node's features as the feature source gathers them into a slot: its own width and dtype,
    or (a recipe) the graph's width in the dtype the recipe converts to (cache.dtype), if any."""
    if hasattr(features, "feature_dim") and hasattr(features, "dtype"):
        return int(features.feature_dim) * _itemsize(features.dtype)
    if graph.x is None:
        return 0
    dtype = getattr(getattr(features, "settings", None), "dtype", None) or graph.x.dtype
    return _row_bytes(graph.x) // graph.x.element_size() * _itemsize(dtype)


def _itemsize(dtype) -> int:
    if isinstance(dtype, torch.dtype):
        return dtype.itemsize
    return getattr(torch, str(dtype).removeprefix("torch."), torch.float32).itemsize


def _row_bytes(tensor: Optional[Tensor]) -> int:
    """Bytes of one row (one node's entry) of `tensor`."""
    return 0 if tensor is None else math.prod(tensor.shape[1:]) * tensor.element_size()


def fixed_need() -> Dict[str, int]:
    """What every async pipeline holds there whatever its graph: semaphores and the control block."""
    return {"the queues' semaphores and control block": (SEMAPHORES + 1) * PAGE}


def check_shm_room(need: Dict[str, int], folder: str = SHM, held: int = 0) -> None:
    """Refuse, in one paragraph with the fixes, when `need` (bytes by what takes them) is more
    than `folder` has free plus `held`: what of it the pipeline already placed there."""
    total = sum(need.values())
    try:
        usage = shutil.disk_usage(folder)
    except OSError:  # no /dev/shm at all: torch falls back to its own; nothing to measure
        return
    if total - held <= usage.free:
        return
    parts = ", ".join(f"{what} {_mib(size)}" for what, size in need.items() if size >= 2**16)
    raise ConveyorError(
        f"the async pipeline may place up to {_mib(total)} in shared memory ({parts}), but {folder} has "
        f"{_mib(usage.free + held)} free for it (Docker's default is 64 MiB); its stage processes "
        f"would die on a full {folder}. {_fixes(folder, usage.total - usage.free + total - held)}")


def shm_shortfall(error: BaseException, folder: str = SHM) -> Optional[ConveyorError]:
    """The paragraph for an allocation in shared memory that failed all the same (another process
    filled /dev/shm since the check, or a sampler of one's own drew more than its bound), or None
    when `error` is something else: torch's words for it, or ENOSPC from a semaphore."""
    if not (getattr(error, "errno", None) == errno.ENOSPC or SHM_FAILURE in str(error)):
        return None
    try:
        usage = shutil.disk_usage(folder)
    except OSError:
        return None
    return ConveyorError(
        f"the async pipeline ran out of shared memory: {folder} has {_mib(usage.free)} free of "
        f"{_mib(usage.total)} (Docker's default is 64 MiB), and an allocation there failed "
        f"({str(error).strip().splitlines()[-1][:200]}). "
        f"{_fixes(folder, usage.total + 2**30)}")


def _fixes(folder: str, size: float) -> str:
    return (f"Run with pipeline=serial (NeighborLoader(..., pipeline=\"serial\")), which needs none, or "
            f"give the container more: `docker run --shm-size={math.ceil(size / 2**30 + 0.25)}g ...` (or "
            f"free space in {folder}; smaller batches or a smaller pipeline.depth need less).")


def _mib(size: float) -> str:
    return f"{size / 2**20:,.1f} MiB"
