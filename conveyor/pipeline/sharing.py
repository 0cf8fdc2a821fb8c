"""How the stage processes get the trainer's graph without copying it.

A graph loaded from disk (`Graph.load(dir, mmap=True)`, what every cached dataset returns) is a
memory map of `dir/graph.pt`: each stage process maps the same file again and the page cache holds
one copy for all of them. Any other tensor (built in memory, or converted after loading) is moved
to shared memory once, before the processes start, and travels as a file descriptor.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Optional, Sequence, Tuple

from torch import Tensor

from conveyor.core.file_maps import file_maps, file_offset
from conveyor.partition import Graph
from conveyor.pipeline.shm import check_shm_room, shared_bytes, shm_shortfall

SAVED_FILE = "graph.pt"


@dataclass
class GraphHandle:
    """What a stage process needs to open the trainer's graph (picklable, no graph data inside
    except file descriptors of shared-memory tensors)."""
    directory: Optional[str]  # a saved graph the `mapped` fields are read from
    mapped: Tuple[str, ...]
    shared: Dict[str, Tensor] = field(default_factory=dict)
    kind: type = Graph  # the graph's class (a TypedGraph: partition/hetero.py)
    meta: dict = field(default_factory=dict)  # the rest of it: graph.meta()

    @property
    def num_classes(self) -> Optional[int]:
        return self.meta.get("num_classes")

    def open(self) -> Graph:
        tensors = dict(self.shared)
        if self.mapped:
            saved = Graph.load(self.directory, mmap=True).tensors()
            tensors.update({f: saved[f] for f in self.mapped})
        return self.kind.from_tensors(tensors, **self.meta)


def share_graph(graph: Graph, need: Optional[Dict[str, int]] = None, carried: Sequence[Tensor] = ()) -> GraphHandle:
    """A handle to `graph` for other processes (moves the tensors that are not file-mapped into
    shared memory, in place), once /dev/shm has room for them, for the tensors of the objects
    that will be pickled into the stages (`carried`) and for what else the pipeline places there
    (`need`, bytes by what takes them: shm.py)."""
    maps, tensors = file_maps(), graph.tensors()
    directory, mapped = None, ()
    origin = file_offset(maps, graph.indptr)
    if origin is not None and Path(origin[0]).name == SAVED_FILE:
        directory = str(Path(origin[0]).parent)
        saved = Graph.load(directory, mmap=True).tensors()
        maps = file_maps()  # now with the second mapping of the file
        mapped = tuple(f for f, t in tensors.items() if _same_tensor(maps, t, saved.get(f)))
    moved = [f for f in tensors if f not in mapped]
    graph_bytes = shared_bytes(tensors[f] for f in moved)
    carried_bytes = shared_bytes([*(tensors[f] for f in moved), *carried]) - graph_bytes  # each storage once
    check_shm_room({"the graph's tensors not mapped from its file": graph_bytes,
                    "the sampler's and feature source's own tensors": carried_bytes, **(need or {})})
    try:
        shared = {f: tensors[f].share_memory_() for f in moved}
    except RuntimeError as error:  # filled by another process since the check
        paragraph = shm_shortfall(error)
        if paragraph is None:
            raise
        raise paragraph from None
    return GraphHandle(directory, mapped, shared, type(graph), graph.meta())


def _same_tensor(maps, a: Optional[Tensor], b: Optional[Tensor]) -> bool:
    """Whether `a` is exactly the tensor `b` the file holds: same bytes of the same file, read as
    the same shape and dtype."""
    if a is None or b is None or a.numel() == 0:
        return False
    where = file_offset(maps, a)
    return (where is not None and where == file_offset(maps, b) and a.dtype == b.dtype
            and a.shape == b.shape and a.stride() == b.stride())
