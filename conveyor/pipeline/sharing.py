"""How the stage processes get the trainer's graph without copying it.

Every tensor of the graph that is a memory map of a file (a graph loaded from disk: graph.pt
through `torch.load(mmap=True)`, or the mapped layout's `.npy` files, partition/mapped.py; any
other file-mapped tensor too) travels as (file, byte offset, dtype, shape): each stage process maps
the same bytes of the same file again, and the page cache holds one copy for all of them. Nothing
mapped goes to /dev/shm. Any other tensor (built in memory, or converted after loading) is moved to
shared memory once, before the processes start, and travels as a file descriptor.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Optional, Sequence, Tuple

import numpy as np
import torch
from torch import Tensor

from conveyor.core.file_maps import file_maps, file_offset
from conveyor.partition import Graph
from conveyor.partition.mapped import read_only_tensor
from conveyor.pipeline.shm import check_shm_room, shared_bytes, shm_shortfall


@dataclass(frozen=True)
class FileSlice:
    """Where a file-mapped tensor's bytes are: mapped again, read-only, by `open` (a stage never
    writes its graph)."""
    path: str
    offset: int
    dtype: torch.dtype
    shape: Tuple[int, ...]

    def open(self) -> Tensor:
        count = int(np.prod(self.shape)) * self.dtype.itemsize
        raw = np.memmap(self.path, dtype=np.uint8, mode="r", offset=self.offset, shape=(count,))
        return read_only_tensor(raw).view(self.dtype).view(self.shape)


@dataclass
class GraphHandle:
    """What a stage process needs to open the trainer's graph (picklable, no graph data inside
    except file descriptors of shared-memory tensors)."""
    mapped: Dict[str, FileSlice]  # the file-mapped tensors, by name
    shared: Dict[str, Tensor] = field(default_factory=dict)
    kind: type = Graph  # the graph's class (a TypedGraph: partition/hetero.py)
    meta: dict = field(default_factory=dict)  # the rest of it: graph.meta()

    @property
    def num_classes(self) -> Optional[int]:
        return self.meta.get("num_classes")

    def open(self) -> Graph:
        tensors = {**self.shared, **{name: where.open() for name, where in self.mapped.items()}}
        return self.kind.from_tensors(tensors, **self.meta)


def share_graph(graph: Graph, need: Optional[Dict[str, int]] = None, carried: Sequence[Tensor] = ()) -> GraphHandle:
    """A handle to `graph` for other processes (moves the tensors that are not file-mapped into
    shared memory, in place), once /dev/shm has room for them, for the tensors of the objects
    that will be pickled into the stages (`carried`) and for what else the pipeline places there
    (`need`, bytes by what takes them: shm.py)."""
    maps, tensors = file_maps(), graph.tensors()
    mapped = {f: where for f, where in ((f, file_slice(maps, t)) for f, t in tensors.items()) if where}
    moved = [f for f in tensors if f not in mapped]
    graph_bytes = shared_bytes(tensors[f] for f in moved)
    carried_bytes = shared_bytes([*(tensors[f] for f in moved), *carried]) - graph_bytes  # each storage once
    check_shm_room({"the graph's tensors not mapped from its files": graph_bytes,
                    "the sampler's and feature source's own tensors": carried_bytes, **(need or {})})
    try:
        shared = {f: tensors[f].share_memory_() for f in moved}
    except RuntimeError as error:  # filled by another process since the check
        paragraph = shm_shortfall(error)
        if paragraph is None:
            raise
        raise paragraph from None
    return GraphHandle(mapped, shared, type(graph), graph.meta())


def file_slice(maps, tensor: Tensor) -> Optional[FileSlice]:
    """Where `tensor` lies in a file, if it is a contiguous memory map of one (else None: it is
    shared through /dev/shm). A map of a file in /dev/shm itself counts as not mapped."""
    where = file_offset(maps, tensor) if tensor.is_contiguous() else None
    if where is None or where[0].startswith("/dev/shm/"):
        return None
    end = tensor.data_ptr() + tensor.numel() * tensor.element_size() - 1
    if not any(start <= end < stop and path == where[0] for start, stop, _, path in maps):
        return None  # not all of it in that file's map (should not happen for a file's tensor)
    return FileSlice(where[0], where[1], tensor.dtype, tuple(tensor.shape))
