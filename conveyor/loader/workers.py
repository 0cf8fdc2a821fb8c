"""PyG's `worker_init_fn` in conveyor's stage processes.

PyG's loader runs `worker_init_fn(worker_id)` in each DataLoader worker as it starts. conveyor's
workers are its two stage processes: the sampler (worker 0) and the feature loader (worker 1).
Each builds its part of the pipeline from a recipe as it starts (pipeline/batch.py: `build`), so
the function rides on those recipes (`StartHook`): the sampler's, and the attribute store's
(which every loader has, with or without x). It runs in a stage process only, never in the
user's process (the serial pipeline and nested iterations build the same recipes there; PyG's
`num_workers=0` calls no worker_init_fn either), and it must be picklable, as for PyG with
`spawn`. `ThreadsInit`, `AffinityInit`, `MemoryLogInit` are PyG's three mixins' init functions.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass, replace
from typing import Any, Callable, List, Optional

import torch

from conveyor.pipeline.phases import with_threads

log = logging.getLogger("conveyor")
SAMPLER_WORKER, LOADER_WORKER = 0, 1


class StartHook:
    """A part's recipe (or the part itself) that runs `init(worker_id)` before it is built, in
    any process but the one that made it (`home`). Reads of the part's fields (the pipeline's room
    reads a spec's fanouts and attribute names) go to the part, and so does the pipeline's choice
    of sampling threads (pipeline/phases.py, `with_threads`)."""

    def __init__(self, part: Any, init: Callable, worker_id: int, home: int):
        self.part, self.init, self.worker_id, self.home = part, init, worker_id, home

    def build(self, graph, device):
        if os.getpid() != self.home:
            self.init(self.worker_id)
        build = getattr(self.part, "build", None)
        return build(graph, device) if callable(build) else self.part

    def __getattr__(self, name: str):
        if name.startswith("__") or name == "part":
            raise AttributeError(name)
        return getattr(self.part, name)

    @property
    def threads(self) -> int:
        threads = getattr(self.part, "threads", None)
        return threads if type(threads) is int else 0  # an int, so that with_threads hands its choice on

    @threads.setter
    def threads(self, value: int) -> None:
        self.part = with_threads(self.part, value)


def with_worker_init(parts, init: Optional[Callable]):
    """`parts` (a LoaderParts) whose stage processes run `init` as they start."""
    if init is None:
        return parts
    home = os.getpid()
    return replace(parts, sampler=StartHook(parts.sampler, init, SAMPLER_WORKER, home),
                   attributes=StartHook(parts.attributes, init, LOADER_WORKER, home))


@dataclass(frozen=True)
class ThreadsInit:
    """PyG's enable_multithreading: `threads` torch threads in the worker, then the user's init."""
    threads: int
    then: Optional[Callable] = None

    def __call__(self, worker_id: int) -> None:
        torch.set_num_threads(self.threads)
        if self.then is not None:
            self.then(worker_id)


@dataclass(frozen=True)
class AffinityInit:
    """PyG's enable_cpu_affinity: the worker on `cores[worker_id]` (an int or a list of them)."""
    cores: List
    then: Optional[Callable] = None

    def __call__(self, worker_id: int) -> None:
        mine = self.cores[worker_id % len(self.cores)]
        os.sched_setaffinity(0, mine if isinstance(mine, (list, tuple)) else [mine])
        if self.then is not None:
            self.then(worker_id)


@dataclass(frozen=True)
class MemoryLogInit:
    """PyG's enable_memory_log: the worker's resident memory, logged at debug level."""
    then: Optional[Callable] = None

    def __call__(self, worker_id: int) -> None:
        import psutil
        memory = psutil.Process(os.getpid()).memory_info().rss / 2**20
        log.debug("Worker %d @ PID %d: %.2f MB", worker_id, os.getpid(), memory)
        if self.then is not None:
            self.then(worker_id)
