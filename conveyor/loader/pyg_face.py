"""What PyG's own code reads off a loader, on conveyor's: `PyGFace`, the attributes and methods of
PyG's `NodeLoader`/`LinkLoader` and torch's `DataLoader` that consumers use (`BasicGNN.inference`,
`ZipLoader`, `CachedLoader`, `PrefetchLoader`, `PNAConv.get_degree_histogram`, PyTorch Lightning).

conveyor's loaders subclass PyG's (`isinstance(loader, torch_geometric.loader.NeighborLoader)` and
`torch.utils.data.DataLoader` hold, as PyG's code asserts) without running their `__init__`: that
would build PyG's sampler and torch's sampler over the data, work conveyor's pipeline does
instead. So every attribute PyG's `__init__` would set is set here (`describe`) with the value
that is true of conveyor's loader, and each method PyG's consumers call is conveyor's:

- `node_sampler` / `link_sampler`: a `PipelineSampler`, PyG's sampler's description (its
  `num_neighbors` as PyG's `NumNeighbors`, `replace`, `disjoint`, `subgraph_type`,
  `weight_attr`) and, as `sampler`, what draws (a name, or the user's object);
- `collate_fn(index)` samples a batch of seed positions (the `Data` before `transform`) and
  `filter_fn(out)` applies `transform`, as PyG splits the two (`ZipLoader` calls both);
- torch's `DataLoader` fields (`num_workers`, `batch_size`, `sampler`, `worker_init_fn`, ...);
- `enable_multithreading`, `enable_cpu_affinity`, `enable_memory_log` (PyG's mixins): each sets
  a picklable `worker_init_fn` the stage processes run (workers.py), before the pipeline starts.
"""
from __future__ import annotations

import logging
import os
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, List, Optional

import torch
from torch_geometric.sampler.base import NumNeighbors

from conveyor.core import ConveyorError

log = logging.getLogger("conveyor")
STAGE_PROCESSES = 2  # the sampler's and the feature loader's: PyG's workers here (worker ids 0 and 1)


@dataclass
class PipelineSampler:
    """What PyG's consumers read of `loader.node_sampler` (`link_sampler`): how it samples. The
    drawing itself happens in conveyor's pipeline, by `sampler` (a name or the user's object)."""
    sampler: Any
    num_neighbors: Optional[NumNeighbors]
    replace: bool = False
    disjoint: bool = False
    subgraph_type: str = "directional"
    weight_attr: Optional[str] = None
    edge_permutation: Any = None  # PyG's filter_fn reads it: conveyor's e_id are the data's own

    @property
    def is_hetero(self) -> bool:
        return self.num_neighbors is not None and isinstance(self.num_neighbors.values, dict)


def pipeline_sampler(sampler, num_neighbors, taken: dict, subgraph_type: str) -> PipelineSampler:
    fanouts = None if num_neighbors is None else NumNeighbors(
        dict(num_neighbors) if isinstance(num_neighbors, dict) else list(num_neighbors))
    return PipelineSampler(sampler, fanouts, bool(taken.get("replace", False)), bool(taken.get("disjoint", False)),
                           subgraph_type, taken.get("weight_attr"))


def describe(loader, taken: dict, sampler: Optional[Any], batch_sampler: Optional[Any]) -> None:
    """Set on `loader` the fields PyG's NodeLoader / LinkLoader and torch's DataLoader would have."""
    loader.num_workers = taken.get("num_workers", STAGE_PROCESSES if loader.asynchronous else 0)
    loader.sampler, loader.batch_sampler = sampler, batch_sampler
    loader.worker_init_fn = taken.get("worker_init_fn")
    loader.filter_per_worker = bool(taken.get("filter_per_worker") or False)
    loader.transform, loader.transform_sampler_output = taken.get("transform"), None
    loader.pin_memory, loader.pin_memory_device = bool(taken.get("pin_memory", False)), ""
    loader.timeout, loader.prefetch_factor = 0, loader.options.depth
    loader.persistent_workers, loader.in_order, loader.generator = True, True, None
    loader.multiprocessing_context, loader.custom_cls, loader.input_time = None, None, None


class PyGFace:
    """The methods PyG's loaders have that its consumers call (module doc); mixed in before PyG's
    class, so these are the ones found."""

    def collate_fn(self, index) -> Any:
        """PyG's first half of a batch: the sampled `Data` of these seed positions (filtered here
        already when `filter_per_worker`, as PyG's)."""
        out = self.sample(torch.as_tensor(index, dtype=torch.long))
        return self.filter_fn(out) if self.filter_per_worker else out

    def filter_fn(self, out) -> Any:
        """PyG's second half: the batch after `transform`."""
        return out if self.transform is None else self.transform(out)

    def __call__(self, index) -> Any:
        """The batch of these seed positions (PyG's NodeLoader.__call__ and LinkLoader.__call__)."""
        out = self.collate_fn(index)
        return out if self.filter_per_worker else self.filter_fn(out)

    def _get_iterator(self):
        """torch's DataLoader hook (PyG's mixins' tests call it): the workers started (here the
        pipeline's stage processes, which then run worker_init_fn), the next epoch's batches."""
        self.start()
        return iter(self)

    @contextmanager
    def enable_multithreading(self, worker_threads: Optional[int] = None):
        """PyG's MultithreadingMixin: `worker_threads` torch threads in each stage process."""
        from conveyor.loader.workers import ThreadsInit
        threads = worker_threads if worker_threads is not None else max(torch.get_num_threads() // STAGE_PROCESSES, 1)
        self._check_workers("enable_multithreading")
        if threads > torch.get_num_threads():
            raise ConveyorError(f"enable_multithreading's worker_threads should be at most the "
                                f"{torch.get_num_threads()} threads available, got {threads}.")
        with self._worker_init(ThreadsInit(threads, self.worker_init_fn)):
            yield

    @contextmanager
    def enable_cpu_affinity(self, loader_cores: Optional[List] = None):
        """PyG's AffinityMixin: each stage process on its cores (`loader_cores[worker_id]`; by
        default the first cores, one each)."""
        from conveyor.loader.workers import AffinityInit
        self._check_workers("enable_cpu_affinity")
        if loader_cores and len(loader_cores) != self.num_workers:
            raise ConveyorError(f"enable_cpu_affinity takes one core (or list of cores) per worker: got "
                                f"{len(loader_cores)} for num_workers={self.num_workers}.")
        cores = list(loader_cores) if loader_cores else list(range(min(STAGE_PROCESSES, os.cpu_count() or 1)))
        self.loader_cores = cores
        with self._worker_init(AffinityInit(cores, self.worker_init_fn)):
            yield

    @contextmanager
    def enable_memory_log(self):
        """PyG's LogMemoryMixin: each stage process logs its resident memory as it starts."""
        from conveyor.loader.workers import MemoryLogInit
        with self._worker_init(MemoryLogInit(self.worker_init_fn)):
            yield

    def _check_workers(self, what: str) -> None:
        if not self.asynchronous:
            raise ConveyorError(f"{what} needs worker processes: this loader samples in this process "
                                f"(num_workers=0 or pipeline='serial'); give num_workers >= 1 (conveyor's "
                                f"sampler and feature-loader processes).")

    @contextmanager
    def _worker_init(self, init: Callable):
        """`init` as worker_init_fn while the block runs; the stage processes run it as they start,
        so the pipeline must start inside the block."""
        if self._state["source"] is not None:
            raise ConveyorError("the loader's stage processes are already running (they start at the first "
                                "batch and persist): enter enable_multithreading / enable_cpu_affinity / "
                                "enable_memory_log before the first batch.")
        previous, self.worker_init_fn = self.worker_init_fn, init
        try:
            yield
        finally:
            self.worker_init_fn = previous
