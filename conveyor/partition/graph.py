"""`Graph`: a graph in CSC form (in-neighbours per node), the type every stage reads.

`indices[indptr[v]:indptr[v + 1]]` are the sources of the edges pointing into `v`, sorted by id.
Saved as one torch file that loads memory-mapped, so a products-scale graph opens in seconds and
several processes can share the pages of the same file; a graph larger than memory is a folder of
`.npy` files in the mapped layout (mapped.py), which `Graph.load` maps the same way.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Optional

import torch
from torch import Tensor

from conveyor.core.errors import ConveyorError
from conveyor.core.regular import check_regular
from conveyor.partition.mapped import is_mapped, read_mapped

TENSOR_FIELDS = ("indptr", "indices", "x", "y", "train_idx", "val_idx", "test_idx", "edge_ids")
SPLIT_NAMES = ("train", "val", "test")
DEGREE_CHUNK = 1 << 22  # entries of indices (or indptr) counted at once: bounded int64 temporaries
NODE, EDGE = "node.", "edge."  # how `tensors()` names the other attributes: node.year, edge.edge_attr


@dataclass
class Graph:
    PREFIXES = ()  # what else a subclass's `tensors()` names (TypedGraph: "typed.")
    indptr: Tensor
    indices: Tensor
    x: Optional[Tensor] = None
    y: Optional[Tensor] = None
    train_idx: Optional[Tensor] = None
    val_idx: Optional[Tensor] = None
    test_idx: Optional[Tensor] = None
    num_classes: Optional[int] = None
    name: str = "graph"
    # CSC position -> the edge's column in the edge_index the graph was built from (PyG's e_id);
    # None: the positions are the edges' ids (a dataset's own graph, or parallel edges merged).
    edge_ids: Optional[Tensor] = None
    # Every other node-level tensor ([num_nodes, ...]: a PyG Data's train_mask, year, ...), and every
    # edge-level one in CSC order ([num_edges, ...]: edge_attr, edge_weight), by name.
    node_attrs: Dict[str, Tensor] = field(default_factory=dict)
    edge_attrs: Dict[str, Tensor] = field(default_factory=dict)

    @property
    def num_nodes(self) -> int:
        return self.indptr.numel() - 1

    @property
    def num_edges(self) -> int:
        return self.indices.numel()

    def edge_id(self, positions: Tensor) -> Tensor:
        """The ids (PyG's e_id) of the edges at these CSC positions."""
        return positions if self.edge_ids is None else self.edge_ids.to(positions.device)[positions]

    def tensors(self) -> Dict[str, Tensor]:
        """Every tensor of the graph by name (the attributes as `node.<name>`, `edge.<name>`): what
        is saved, shared with the stage processes, and put back by `from_tensors`."""
        own = {f: getattr(self, f) for f in TENSOR_FIELDS if getattr(self, f) is not None}
        return {**own, **{NODE + k: v for k, v in self.node_attrs.items()},
                **{EDGE + k: v for k, v in self.edge_attrs.items()}}

    @classmethod
    def from_tensors(cls, tensors: Dict[str, Tensor], **meta) -> "Graph":
        """The graph `tensors()` took apart; `meta`: num_classes, name."""
        own = {k: v for k, v in tensors.items() if k in TENSOR_FIELDS}
        node = {k[len(NODE):]: v for k, v in tensors.items() if k.startswith(NODE)}
        edge = {k[len(EDGE):]: v for k, v in tensors.items() if k.startswith(EDGE)}
        return cls(**own, node_attrs=node, edge_attrs=edge, **meta)

    def meta(self) -> dict:  # what besides its tensors `from_tensors` takes (saved as JSON)
        return {"num_classes": self.num_classes, "name": self.name}

    def in_degree(self) -> Tensor:
        return self.indptr[1:] - self.indptr[:-1]

    def out_degree(self) -> Tensor:  # edges leaving each node: how often neighbours read its features
        return count_sources(self.indices, self.num_nodes)

    def edge_index(self) -> Tensor:
        """The `[2, E]` (source, destination) form, as PyG expects it."""
        dst = torch.repeat_interleave(torch.arange(self.num_nodes), self.in_degree())
        return torch.stack([self.indices.long(), dst])

    @classmethod
    def from_edge_index(cls, edge_index: Tensor, num_nodes: int, dedup: bool = True, **attrs) -> "Graph":
        """CSC from a `[2, E]` tensor (row 0 source, row 1 destination, as in PyG).

        `dedup` (the datasets' default) drops repeated edges: samplers draw distinct edges, so a
        repeated edge lets one neighbour be drawn twice. `dedup=False` keeps every edge, as PyG's
        loader does, and records in `edge_ids` each CSC position's column of `edge_index` (edges
        into one node in source order, ties in their given order); `edge_attrs` given in
        `edge_index`'s order are put in CSC order with it.
        """
        edge_index = torch.as_tensor(edge_index)
        if edge_index.dim() != 2 or edge_index.size(0) != 2:
            raise ConveyorError(
                f"edge_index must have shape [2, E] (row 0 sources, row 1 destinations), got "
                f"{tuple(edge_index.shape)}; transpose an [E, 2] array with `.t()`.")
        if edge_index.dtype.is_floating_point or edge_index.dtype == torch.bool:
            raise ConveyorError(f"edge_index must hold integer node ids, got dtype {edge_index.dtype}.")
        num_nodes = int(num_nodes)
        if num_nodes < 0:
            raise ConveyorError(f"num_nodes must be >= 0, got {num_nodes}.")
        edge_index = edge_index.long()
        if edge_index.numel() and (edge_index.min() < 0 or edge_index.max() >= num_nodes):
            raise ConveyorError(
                f"edge_index holds node ids in [{int(edge_index.min())}, {int(edge_index.max())}] "
                f"but the graph has {num_nodes} nodes (ids 0..{num_nodes - 1}); pass the right "
                f"num_nodes or remap the ids.")
        src, dst = edge_index
        key = dst * max(num_nodes, 1) + src  # sort by destination, then source
        if dedup:
            if attrs.get("edge_attrs"):
                raise ConveyorError("Graph.from_edge_index(dedup=True) merges repeated edges, so edge_attrs "
                                    "would not line up with them; pass dedup=False to keep every edge with its own.")
            key, order = torch.unique(key), None
        else:
            key, order = torch.sort(key, stable=True)
            attrs["edge_attrs"] = {k: v[order] for k, v in attrs.get("edge_attrs", {}).items()}
        dst, src = key // max(num_nodes, 1), key % max(num_nodes, 1)
        indptr = torch.zeros(num_nodes + 1, dtype=torch.long)
        indptr[1:] = torch.cumsum(torch.bincount(dst, minlength=num_nodes), 0)
        small = num_nodes < 2**31 - 1
        return cls(indptr=indptr, indices=src.to(torch.int32 if small else torch.long), edge_ids=order, **attrs)

    @classmethod
    def from_data(cls, data, name: str = "graph", num_classes: Optional[int] = None, dedup: bool = False) -> "Graph":
        """A Graph from a PyG `Data`: `edge_index`, and where present `x`, `y` and the splits as
        boolean masks (`train_mask`, `val_mask`, `test_mask`, as Planetoid has them) or node ids
        (`train_idx`, ...). `num_classes` defaults to `y.max() + 1` (class ids, int64; OGB's [N, 1]
        flattened) or C (float [N, C] multi-label targets, kept as they are; float class ids are
        kept too, for conveyor.fit to refuse). Every edge is kept, parallel ones too, with every
        edge-level tensor (`edge_weight`, `edge_attr`, ...) in `edge_attrs`, as PyG trains on them;
        `dedup` (a dataset's graph) merges parallel edges and keeps no edge attribute instead."""
        edge_index = getattr(data, "edge_index", None)
        if edge_index is None:
            raise ConveyorError(
                f"Graph.from_data needs a homogeneous PyG Data with an edge_index, got a "
                f"{type(data).__name__} without one; for a HeteroData pick one edge type first "
                f"(e.g. data.to_homogeneous()).")
        num_nodes = int(data.num_nodes)
        x, y = getattr(data, "x", None), getattr(data, "y", None)
        if y is not None and y.is_floating_point():
            num_classes = y.size(1) if num_classes is None and y.dim() == 2 else num_classes
        elif y is not None:
            y = y.reshape(-1).long() if y.dim() == 2 and y.size(1) == 1 else y.long()  # OGB: [N, 1]
            num_classes = int(y.max()) + 1 if num_classes is None and y.numel() and y.dim() == 1 else num_classes
        splits = {f"{split}_idx": _split_ids(data, split, num_nodes) for split in SPLIT_NAMES}
        edges = {key: torch.as_tensor(value) for key, value in data.items()
                 if key != "edge_index" and isinstance(value, Tensor) and data.is_edge_attr(key) and not dedup}
        x = None if x is None else torch.as_tensor(x).float()
        graph = cls.from_edge_index(edge_index, num_nodes, dedup=dedup, x=x, y=y, num_classes=num_classes,
                                    name=name, edge_attrs=edges, **splits)
        return graph.validate()

    def to_data(self):
        """This graph as a PyG `Data` (edge_index, x, y, and the splits as boolean masks)."""
        from torch_geometric.data import Data  # PyG is only needed here, not by the stages

        data = Data(edge_index=self.edge_index(), x=self.x, y=self.y, num_nodes=self.num_nodes)
        for split in SPLIT_NAMES:
            idx = getattr(self, f"{split}_idx")
            if idx is not None:
                mask = torch.zeros(self.num_nodes, dtype=torch.bool)
                mask[idx] = True
                data[f"{split}_mask"] = mask
        return data

    def validate(self) -> "Graph":
        """Check the invariants other stages rely on; raise a ConveyorError naming the broken one."""
        n = self.num_nodes
        if self.indptr.dtype != torch.long or self.indptr[0] != 0 or self.indptr[-1] != self.num_edges:
            raise ConveyorError("indptr must be int64, start at 0 and end at len(indices).")
        if self.num_edges and (int(self.indices.min()) < 0 or int(self.indices.max()) >= n):
            raise ConveyorError(f"indices hold node ids outside 0..{n - 1}.")
        for name in ("x", "y"):
            value = getattr(self, name)
            if value is not None and value.size(0) != n:
                raise ConveyorError(f"{name} has {value.size(0)} rows but the graph has {n} nodes.")
        for name in ("train_idx", "val_idx", "test_idx"):
            idx = getattr(self, name)
            if idx is not None and idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= n):
                raise ConveyorError(f"{name} holds node ids outside 0..{n - 1}.")
        return self

    # -- storage --------------------------------------------------------------------------------
    def save(self, directory: str | os.PathLike) -> None:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        tensors = self.tensors()
        tmp = directory / "graph.pt.tmp"
        torch.save({k: v.contiguous() for k, v in tensors.items()}, tmp)
        os.replace(tmp, directory / "graph.pt")  # atomic: a crash never leaves half a graph
        meta = {**self.meta(), "kind": type(self).__name__, "num_nodes": self.num_nodes, "num_edges": self.num_edges}
        (directory / "meta.json").write_text(json.dumps(meta, indent=1))

    @classmethod
    def load(cls, directory: str | os.PathLike, mmap: bool = True, rebuilt_from=None) -> "Graph":
        """The graph in `directory` (`save`'s, or the mapped layout's). `rebuilt_from`: the folder
        whose deletion makes conveyor build it again (default `directory`), named if it is damaged."""
        directory, rebuilt_from = Path(directory), Path(rebuilt_from or directory)
        if is_mapped(directory):
            return load_mapped(directory, rebuilt_from)
        if not (directory / "graph.pt").exists():
            raise ConveyorError(f"no saved graph in {directory} (expected graph.pt and meta.json).")
        tensors = load_saved(directory / "graph.pt", rebuilt_from, mmap)
        meta = load_saved(directory / "meta.json", rebuilt_from)
        kind = KINDS.get(meta.get("kind"), Graph) if isinstance(meta, dict) else Graph  # a TypedGraph's too
        known = lambda k: k in TENSOR_FIELDS or k.startswith((NODE, EDGE, *kind.PREFIXES))
        if not (isinstance(tensors, dict) and all(map(known, tensors)) and isinstance(meta, dict)):
            raise damaged(directory / "graph.pt", rebuilt_from, "unexpected contents")
        args = {k: v for k, v in meta.items() if k not in ("kind", "num_nodes", "num_edges")}
        return kind.from_tensors(tensors, **{"name": "graph", **args})

    def share_memory_(self) -> "Graph":
        for value in self.tensors().values():
            value.share_memory_()
        return self

    def __repr__(self) -> str:
        feats = None if self.x is None else tuple(self.x.shape)
        return (f"Graph({self.name}: {self.num_nodes:,} nodes, {self.num_edges:,} edges, x={feats}, "
                f"classes={self.num_classes})")


KINDS = {"Graph": Graph}  # a saved graph's class by its meta's "kind" (partition/hetero.py adds TypedGraph)


def load_mapped(directory: Path, rebuilt_from: Path) -> Graph:
    """The mapped layout's graph (mapped.py): every tensor a map of its file, nothing copied."""
    try:
        tensors, meta = read_mapped(directory)
    except (OSError, ValueError) as exc:
        raise damaged(directory, rebuilt_from, str(exc).splitlines()[0]) from exc
    kind = KINDS.get(meta.get("kind"), Graph)
    args = {k: meta[k] for k in ("num_classes", "name") if k in meta}
    return kind.from_tensors(tensors, **{"name": "graph", **args})


def count_sources(indices: Tensor, num_nodes: int) -> Tensor:
    """How often each node id occurs in `indices` (int64), DEGREE_CHUNK ids at a time: no int64
    copy of a memory-mapped structure."""
    counts = torch.zeros(num_nodes, dtype=torch.long)
    ones = torch.ones(min(DEGREE_CHUNK, indices.numel()), dtype=torch.long)
    for start in range(0, indices.numel(), DEGREE_CHUNK):
        part = indices[start:start + DEGREE_CHUNK]
        counts.index_add_(0, part, ones[:part.numel()])  # int32 ids index as they are
    return counts


def max_gap(indptr: Tensor) -> int:
    """The largest in-degree indptr gives (0 without nodes), a chunk at a time."""
    parts = (indptr[s:s + DEGREE_CHUNK + 1] for s in range(0, indptr.numel() - 1, DEGREE_CHUNK))
    return max((int((p[1:] - p[:-1]).max()) for p in parts), default=0)


def load_saved(path: Path, rebuilt_from: Path, mmap: bool = False):
    """A file conveyor saved: `.json`, or tensors read with `weights_only=True` (nothing in it can
    run code). A damaged one raises a ConveyorError naming it and what to delete."""
    check_regular(path, "saved file")
    try:
        if path.suffix == ".json":
            return json.loads(path.read_text())
        return torch.load(path, mmap=mmap, weights_only=True)
    except Exception as exc:  # truncated, overwritten, or planted
        raise damaged(path, rebuilt_from, str(exc).strip().splitlines()[0]) from exc


def damaged(path: Path, rebuilt_from: Path, reason: str) -> ConveyorError:
    return ConveyorError(f"cannot read {path} ({reason}): it is damaged or was not written by "
                         f"conveyor. It holds data conveyor derived: delete {rebuilt_from} to "
                         f"rebuild it.")


def _split_ids(data, split: str, num_nodes: int) -> Optional[Tensor]:
    """A PyG Data's `{split}_mask` (boolean, one per node) or `{split}_idx` as int64 node ids (a
    boolean `{split}_idx` read as the mask it is)."""
    mask, idx = getattr(data, f"{split}_mask", None), getattr(data, f"{split}_idx", None)
    idx = None if idx is None else torch.as_tensor(idx)
    if mask is None and idx is not None and idx.dtype == torch.bool:
        mask = idx
    elif mask is None and idx is not None:
        if idx.is_floating_point():
            raise ConveyorError(f"data.{split}_idx must hold integer node ids (or be a boolean mask), "
                                f"got dtype {idx.dtype}; pass idx.long() if they are whole numbers.")
        return idx.reshape(-1).long()
    if mask is None:
        return None
    if mask.dtype != torch.bool or mask.shape != (num_nodes,):
        raise ConveyorError(
            f"data.{split}_mask must be a boolean tensor of shape [{num_nodes}] (one entry per "
            f"node), got dtype {mask.dtype} and shape {tuple(mask.shape)}; for several splits "
            f"(shape [N, K]) pass one column, e.g. data.{split}_mask = data.{split}_mask[:, 0].")
    return mask.nonzero().reshape(-1)
