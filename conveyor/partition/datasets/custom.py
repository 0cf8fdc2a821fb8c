"""A user's own graph from a directory of arrays: `load_dataset("custom", root=None, path=DIR)`.

The directory holds one file per array, each as `.npy` (numpy) or `.pt` (a torch tensor):

    edge_index  int, shape [2, E]: row 0 the source, row 1 the destination of each edge
                (messages flow source -> destination; pass `undirected=True` to add the reverse
                of every edge, e.g. for a citation graph stored one way)
    x           float (or int), shape [N, F]: node features; N, the number of nodes, is its rows
    y           int, shape [N]: class labels 0..C-1; -1 marks an unlabelled node
    train_idx   the training nodes: int node ids, or a bool mask of shape [N]   (required, non-empty)
    val_idx     the validation nodes, the same way                                (optional)
    test_idx    the test nodes, the same way                                      (optional)
    edge_weight float, shape [E]: a weight per edge, in edge_index's order             (optional)
    edge_attr   float, shape [E, D]: a feature vector per edge, the same way          (optional)

Any real float or integer dtype, in either byte order, is converted; complex, string, object,
sparse, meta or quantized arrays are refused naming the file and dtype (dtypes.py).
Node ids run 0..N-1. Duplicate edges are dropped, unless the edges have weights or features:
then every edge is kept (each its own row), as PyG trains on them, and a model that takes them
(a GCN: edge_weight; a GAT with edge_dim: edge_attr) gets them. A missing val/test split becomes an empty
index tensor. `num_classes` is `y.max() + 1` unless given as an option. The values are checked
too (contents.py): finite features, labels 0..C-1 that all occur, splits without repeated or
shared nodes; unlabelled val/test nodes are left out of accuracy.
"""
from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import torch

from conveyor.core.errors import ConveyorError
from conveyor.core.regular import check_regular
from conveyor.partition.datasets.common import finish, symmetrise
from conveyor.partition.datasets.contents import check_features, check_labels, check_splits
from conveyor.partition.datasets.dtypes import as_tensor
from conveyor.partition.graph import Graph

SPLITS = ("train_idx", "val_idx", "test_idx")
HOLDS = ("edge_index, x, y and train_idx (val_idx and test_idx optional), each as a .npy or .pt file "
         "(the format: docs/usage.md, 'Datasets', or partition/datasets/custom.py)")


def _read(directory: Path, name: str, required: bool = True) -> tuple[torch.Tensor | None, Path]:
    """The array `name` holds and the file it came from (`name`.npy when there is none)."""
    found = [p for p in (directory / f"{name}.npy", directory / f"{name}.pt") if p.exists()]
    if len(found) > 1:
        raise ConveyorError(f"{directory} holds both {name}.npy and {name}.pt; keep only one.")
    if not found:
        if required:
            raise ConveyorError(f"{directory} has no {name}.npy or {name}.pt; the custom dataset "
                                f"needs it (see partition/datasets/custom.py for the format).")
        return None, directory / f"{name}.npy"
    path = check_regular(found[0], f"custom array {name}")
    try:
        value = (np.load(path, allow_pickle=False) if path.suffix == ".npy"
                 else torch.load(path, map_location="cpu", weights_only=True))
    except Exception as err:  # torch's own message runs to many lines: the first, or the gist
        reason = ("it holds Python objects besides arrays and tensors, and nothing in it was run"
                  if isinstance(err, pickle.UnpicklingError) else str(err).strip().splitlines()[0])
        raise ConveyorError(f"cannot read {path} ({reason}). Save a plain array with np.save or "
                            f"a tensor with torch.save.") from err
    return as_tensor(value, path), path


def _node_ids(directory: Path, name: str, value: torch.Tensor, n: int) -> torch.Tensor:
    """A split as node ids, from ids or a boolean mask; checked against the node count."""
    if value.dtype == torch.bool:
        if value.shape != (n,):
            raise ConveyorError(f"{name} in {directory} is a boolean mask of shape "
                                f"{tuple(value.shape)}, but the graph has {n} nodes (x has {n} "
                                f"rows): a mask needs shape [{n}].")
        return value.nonzero().view(-1)
    if value.dtype.is_floating_point or value.dim() != 1:
        raise ConveyorError(f"{name} in {directory} must be a 1-D tensor of integer node ids or a "
                            f"boolean mask, got dtype {value.dtype} and shape {tuple(value.shape)}.")
    _check_range(directory, name, value, n)
    return value.long()


def _check_range(directory: Path, name: str, ids: torch.Tensor, n: int) -> None:
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= n):
        raise ConveyorError(f"{name} in {directory} holds node ids in [{int(ids.min())}, "
                            f"{int(ids.max())}], outside 0..{n - 1}: the graph has {n} nodes "
                            f"(the rows of x).")


def feature_width(path) -> int | None:
    """The width of x in the custom dataset at `path`, read from x.npy's header alone (None when
    it cannot be read so cheaply: a .pt file, no file, no regular file, a damaged one; loading says why)."""
    file = Path(path).expanduser() / "x.npy"
    if not file.is_file():  # a FIFO's header would be waited for forever: loading refuses it by name
        return None
    try:
        shape = np.load(file, mmap_mode="r", allow_pickle=False).shape
    except (OSError, ValueError, TypeError):
        return None
    return int(shape[1]) if len(shape) == 2 else None


def check_folder(path: str | Path | None) -> Path:
    """The folder `path` (data.path) names; a ConveyorError naming what it must hold if it is
    none. Run with the config check too, so that a wrong path ends before any work."""
    if path is None:
        raise ConveyorError(f"the custom dataset needs `path=DIR` (data.path in the config): the "
                            f"folder holding {HOLDS}.")
    directory = Path(path).expanduser()
    if not directory.is_dir():
        what = ("is a file, not a folder" if directory.is_file() else
                "is not a folder" if directory.exists() else "does not exist")
        raise ConveyorError(f"data.path={path} {what}; point data.path at the folder holding "
                            f"{HOLDS}.")
    return directory


def load_custom(path: str | Path | None, undirected: bool = False,
                num_classes: int | None = None) -> Graph:
    directory = check_folder(path)
    (edge_index, _), (x, x_path), (y, y_path) = (_read(directory, name) for name in ("edge_index", "x", "y"))
    if x.dim() != 2:
        raise ConveyorError(f"x in {directory} must have shape [N, F] (one row per node), got "
                            f"{tuple(x.shape)}; reshape a single feature to [N, 1].")
    x = check_features(x, x_path)
    n = x.size(0)
    if edge_index.dim() != 2 or edge_index.size(0) != 2:
        raise ConveyorError(f"edge_index in {directory} must have shape [2, E] (row 0 sources, "
                            f"row 1 destinations), got {tuple(edge_index.shape)}; transpose an "
                            f"[E, 2] array.")
    if edge_index.dtype.is_floating_point or edge_index.dtype == torch.bool:
        raise ConveyorError(f"edge_index in {directory} must hold integer node ids, got "
                            f"{edge_index.dtype}.")
    _check_range(directory, "edge_index", edge_index, n)
    if y.shape != (n,) or y.dtype.is_floating_point or y.dtype == torch.bool:
        raise ConveyorError(f"y in {directory} must be 1-D integer labels, one per node (shape "
                            f"[{n}], as x has {n} rows), got dtype {y.dtype} and shape "
                            f"{tuple(y.shape)}; flatten an [N, 1] array.")
    classes = check_labels(y.long(), None if num_classes is None else int(num_classes), y_path)

    splits, paths = {}, {}
    for name in SPLITS:
        value, paths[name] = _read(directory, name, required=name == "train_idx")
        splits[name] = (torch.empty(0, dtype=torch.long) if value is None
                        else _node_ids(directory, name, value, n))
    if splits["train_idx"].numel() == 0:
        raise ConveyorError(f"train_idx in {directory} selects no nodes; give at least one "
                            f"training node.")
    splits = check_splits(splits, y.long(), paths)

    edges = _edge_features(directory, edge_index.size(1))
    if undirected:
        edge_index = symmetrise(edge_index.long())
        edges = {k: torch.cat([v, v]) for k, v in edges.items()}  # a reverse edge has its original's
    graph = Graph.from_edge_index(edge_index, n, dedup=not edges, x=x, y=y, edge_attrs=edges, **splits)
    return finish(graph, "custom", classes)


def _edge_features(directory: Path, num_edges: int) -> dict:
    """The optional edge_weight ([E]) and edge_attr ([E, D]) arrays, float32, checked."""
    found = {}
    for name, dims in (("edge_weight", 1), ("edge_attr", 2)):
        value, path = _read(directory, name, required=False)
        if value is None:
            continue
        if value.dim() != dims or value.size(0) != num_edges or value.dtype == torch.bool:
            want = f"[{num_edges}]" if dims == 1 else f"[{num_edges}, D]"
            raise ConveyorError(f"{name} in {directory} must be a real array of shape {want} (one row per "
                                f"edge of edge_index), got dtype {value.dtype} and shape {tuple(value.shape)}.")
        found[name] = check_features(value.reshape(num_edges, -1), path).reshape(value.shape)
    return found


def check_settings(data) -> None:
    """Before any work (its registry entry's check): the folder data.path names."""
    check_folder(data.path)


def known_widths(data) -> tuple:
    """(classes, features) before loading: data.num_classes, and x.npy's width read from its header."""
    return data.num_classes, feature_width(data.path) if data.path else None
