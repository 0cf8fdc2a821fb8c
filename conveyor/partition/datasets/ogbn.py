"""ogbn-arxiv, ogbn-products and ogbn-papers100M through the `ogb` package, with the official split.

`root` holds the copies as ogb lays them out (`<root>/ogbn_products/{raw,processed,split}/...`).
The first load converts ogb's arrays into a `Graph` and saves it at `<root>/<ogbn_dir>/conveyor/`;
later loads open that memory-mapped, without ogb. arxiv and papers100M (citation graphs) are made
undirected, as in PyG's examples; products is used as given (ogb already stores both
directions). papers100M is converted from its raw files without ogb, streaming, into the mapped
layout (papers100m.py: a graph larger than memory); ogb only downloads it.
"""
from __future__ import annotations

import contextlib
import csv
import importlib.util
import os
import pickle
import shutil
from pathlib import Path

import numpy as np

from conveyor.core.errors import ConveyorError
from conveyor.core.extras import require_extra
from conveyor.partition.datasets.common import as_tensor, cached, finish, reachable, symmetrise
from conveyor.partition.datasets.papers100m import DATA, load_papers100m
from conveyor.partition.graph import Graph

# our name -> (ogb name, make undirected)
OGB_NAMES = {"arxiv": ("ogbn-arxiv", True), "products": ("ogbn-products", False),
             "papers100m": ("ogbn-papers100M", True)}


def _meta(ogb_name: str) -> dict[str, str]:
    """ogb's metadata row for a dataset (url, folder names, format), read from its master.csv.

    Located without importing `ogb.nodeproppred`, which pulls in PyG and pandas: the offline
    check must answer within seconds.
    """
    require_extra("ogb", f"the OGB dataset {ogb_name}")
    spec = importlib.util.find_spec("ogb")
    master = Path(spec.submodule_search_locations[0]) / "nodeproppred" / "master.csv"
    with open(master, newline="") as f:
        rows = list(csv.reader(f))
    column = rows[0].index(ogb_name)
    return {row[0]: row[column] for row in rows[1:]}


def _has_copy(folder: Path, meta) -> bool:
    """What ogb itself looks for before it decides to download."""
    raw = "data.npz" if meta["binary"] == "True" else "edge.csv.gz"
    return (folder / "processed" / "data_processed").exists() or (folder / "raw" / raw).exists()


# What ogb's own files (processed/data_processed, split_dict.pt) hold besides plain containers:
# numpy arrays and scalars. Allowed to `torch.load(weights_only=True)`, nothing else is.
NUMPY_GLOBALS = [np.ndarray, np.dtype, *(type(np.dtype(t)) for t in np.sctypeDict.values())]


def _numpy_loaders() -> list:
    from numpy._core import multiarray  # numpy >= 2; the pickles name this module
    return [multiarray._reconstruct, multiarray.scalar]


@contextlib.contextmanager
def _unattended_ogb():
    """Run ogb's loader with nobody at the keyboard, and without trusting its files.

    ogb asks with `input()` before a download over 1 GB and when a copy lacks its RELEASE file;
    we answer "download" (the caller already checked the host and asked for this dataset) and
    "keep the copy". ogb reads its processed file back with a bare `torch.load`: it stays a
    `weights_only` load (forced, whatever the environment says) that may build numpy arrays, so
    a file planted there cannot run code.
    """
    import ogb.nodeproppred.dataset as ogb_dataset
    import torch

    saved_decide = ogb_dataset.decide_download
    saved_env = os.environ.get("TORCH_FORCE_WEIGHTS_ONLY_LOAD")
    ogb_dataset.decide_download = lambda url: True
    ogb_dataset.input = lambda prompt="": "n"  # shadows the builtin inside ogb's module only
    os.environ["TORCH_FORCE_WEIGHTS_ONLY_LOAD"] = "1"
    try:
        with torch.serialization.safe_globals(NUMPY_GLOBALS + _numpy_loaders()):
            yield ogb_dataset.NodePropPredDataset
    finally:
        ogb_dataset.decide_download = saved_decide
        del ogb_dataset.input
        if saved_env is None:
            del os.environ["TORCH_FORCE_WEIGHTS_ONLY_LOAD"]
        else:
            os.environ["TORCH_FORCE_WEIGHTS_ONLY_LOAD"] = saved_env


def _build(name: str, root: Path, folder: Path) -> Graph:
    ogb_name, undirected = OGB_NAMES[name]
    if (folder / "raw").is_dir():  # ogb saves its processed copy there without creating it
        (folder / "processed").mkdir(exist_ok=True)
    processed = folder / "processed" / "data_processed"
    require_extra("ogb", f"the OGB dataset {ogb_name}")  # a conversion found damaged is rebuilt with ogb
    with _unattended_ogb() as NodePropPredDataset:
        try:
            dataset = NodePropPredDataset(name=ogb_name, root=str(root))
        except (pickle.UnpicklingError, RuntimeError, EOFError) as err:
            if not processed.exists():
                raise
            raise ConveyorError(
                f"cannot read ogb's processed copy {processed} ({str(err).splitlines()[0]}): it is "
                f"damaged or holds more than arrays, and nothing in it was run. Delete it to "
                f"rebuild it from {folder / 'raw'}.") from err
        try:
            split = dataset.get_idx_split()
        except FileNotFoundError as err:
            raise ConveyorError(f"the {ogb_name} copy in {folder} has no split files "
                                f"({err.filename}); unzip the complete archive again.") from err
    data, labels = dataset.graph, np.asarray(dataset.labels).reshape(-1)
    if labels.dtype.kind == "f":  # papers100M: NaN marks an unlabelled node
        labels = np.where(np.isnan(labels), -1, labels)
    edge_index = as_tensor(data["edge_index"]).long()
    if undirected:
        edge_index = symmetrise(edge_index)
    graph = Graph.from_edge_index(
        edge_index, int(data["num_nodes"]), x=as_tensor(data["node_feat"]),
        y=as_tensor(labels.astype(np.int64)), train_idx=as_tensor(split["train"]),
        val_idx=as_tensor(split["valid"]), test_idx=as_tensor(split["test"]))
    return finish(graph, name, dataset.num_classes)


def ogb_folder(name: str, root: str | Path) -> Path:
    ogb_name, _ = OGB_NAMES[name]
    return Path(root) / "_".join(ogb_name.split("-"))  # ogb's own folder name


def is_converted(name: str, root: str | Path) -> bool:
    """Whether `name` was converted once under `root`: it then loads without ogb."""
    return (ogb_folder(name, root) / "conveyor" / "stamp.txt").exists()


def check_ogb_installed(name: str, root: str | Path) -> None:
    """Name the `conveyor[ogb]` extra before any work where loading `name` would need it."""
    if not is_converted(name, root) and not (name == "papers100m" and (ogb_folder(name, root) / DATA).exists()):
        require_extra("ogb", f"the OGB dataset {OGB_NAMES[name][0]}")


def load_ogb(name: str, root: str | Path):
    ogb_name, _ = OGB_NAMES[name]
    folder = ogb_folder(name, root)
    if name == "papers100m":
        if not is_converted(name, root) and not (folder / DATA).exists():
            _download(ogb_name, _meta(ogb_name), Path(root), folder)
        return load_papers100m(folder)
    if not is_converted(name, root):
        meta = _meta(ogb_name)
        if not _has_copy(folder, meta) and not reachable(meta["url"]):
            raise _unreachable(ogb_name, folder, meta, Path(root))
    graph = cached(folder / "conveyor", lambda: _build(name, Path(root), folder), stamp=ogb_name)
    return finish(graph, name, graph.num_classes)


def _unreachable(ogb_name: str, folder: Path, meta: dict, root: Path) -> ConveyorError:
    return ConveyorError(
        f"{ogb_name} is not in {folder} and {meta['url']} is unreachable. Download that "
        f"zip elsewhere, unzip it into {root} and rename the folder it makes "
        f"('{meta['download_name']}') to {folder.name}, so that {folder / 'raw'} and "
        f"{folder / 'split'} exist; or point data.root at a directory that holds it.")


def _download(ogb_name: str, meta: dict, root: Path, folder: Path) -> None:
    """OGB's zip into `folder`, as ogb lays it out (only the download: papers100m.py converts it)."""
    if not reachable(meta["url"]):
        raise _unreachable(ogb_name, folder, meta, root)
    from ogb.utils.url import download_url, extract_zip

    root.mkdir(parents=True, exist_ok=True)
    path = download_url(meta["url"], str(root))
    extract_zip(path, str(root))
    os.unlink(path)
    shutil.rmtree(folder, ignore_errors=True)
    shutil.move(str(root / meta["download_name"]), str(folder))


def check_settings(data) -> None:
    """Before any work (its registry entry's check): the extra that reads OGB's files, where needed."""
    check_ogb_installed(data.name, data.root_folder())
