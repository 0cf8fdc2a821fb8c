"""Dataset loaders: `load_dataset(name, root, **options) -> Graph`.

Every loader returns a validated `Graph` with `x` float32, `y` int64 (1-D, -1 for unlabelled),
`train_idx`/`val_idx`/`test_idx` int64, and `num_classes` and `name` set.

- `cora`, `citeseer`, `pubmed`: Planetoid with its public split (planetoid.py). Offline, prepare
  them first: `conveyor prepare planetoid --root <root>` (planetoid_files.py).
- `arxiv`, `products`, `papers100m`: OGB node property prediction with the official split (ogbn.py).
- `synthetic`: a products-shaped power-law graph of any size; options `scale` (1.0 = products'
  size), `seed`, `num_features`, `num_classes` (synthetic.py). Cached under `<root>/synthetic/`.
- `synthetic_papers`: an ogbn-papers100M-shaped graph built out of core into the mapped layout
  (partition/mapped.py); options `scale` (1.0 = papers100M's 111M nodes, 1.6B edges), `seed`
  (synthetic_papers.py). Cached under `<root>/synthetic_papers/`.
- `custom`: your own arrays in a directory; options `path`, `undirected`, `num_classes` (custom.py).
- `mag`: ogbn-mag through `ogb` (a typed graph: papers, authors, institutions, fields; mag.py).
- `synthetic_mag`: an ogbn-mag-shaped typed graph of any size; options `scale`, `seed`,
  `num_features`, `num_classes` (synthetic_mag.py). Typed graphs: partition/hetero.py.
- `synthetic_movielens`: a MovieLens-shaped typed graph of users, movies and timestamped ratings
  (the link task's recommender stand-in); options `scale`, `seed`, `num_features`
  (synthetic_movielens.py).
- `memory`: a graph handed over in Python (`conveyor.fit(graph_or_data)`); nothing to load.
"""
from __future__ import annotations

import inspect
from pathlib import Path

import torch

from conveyor.core.errors import ConveyorError
from conveyor.partition.datasets.common import check_options
from conveyor.partition.datasets.registry import REGISTRY, DatasetEntry, dataset_entry, register_dataset
from conveyor.partition.graph import Graph
from conveyor.partition.hetero import is_typed


def load_dataset(name: str, root: str | Path | None = None, target: str | None = None, **options) -> Graph:
    """Load dataset `name` (registered: `DATASETS`), or the one whose loader `target` names
    (data._target_), kept under the directory `root`; `options` are its loader's own keyword
    arguments (synthetic: scale, seed, ...; custom: path, ...)."""
    entry = dataset_entry(name, target)
    if entry.load is None:
        check_options(entry.name, options, ())
        raise ConveyorError("data=memory stands for a graph handed to conveyor.fit() in Python, so "
                            "there is nothing to load; on the command line choose a dataset "
                            "(e.g. data=cora) or your own arrays (data=custom data.path=DIR).")
    load = entry.loader()
    takes = tuple(p for p in inspect.signature(load).parameters if p not in ("name", "root"))
    check_options(entry.name, options, takes)
    if not entry.root:  # custom reads data.path (or the root given in its place), not a root
        path = options.pop("path", None) or root
        return load(path=None if path is None else Path(path).expanduser(), **options)
    if root is None:
        raise ConveyorError(f"dataset {entry.name!r} needs a root directory to keep its files in "
                            f"(data.root in the config).")
    root = check_root(root)
    return load(entry.name, root) if entry.by_name else load(root, **options)


def check_root(root: str | Path) -> Path:
    """The folder `root` (data.root) names; a ConveyorError if it, or the nearest part of it that
    exists, is a file (the loaders would report the dataset's files as missing under it)."""
    root = Path(root).expanduser()
    existing = next(p for p in (root, *root.absolute().parents) if p.exists())
    if not existing.is_dir():
        where = "is" if existing == root else f"lies in {existing}, which is"
        raise ConveyorError(f"data.root={root} {where} a file, not a folder; point data.root at "
                            f"the folder that holds the datasets (made if missing, e.g. "
                            f"data.root=~/.cache/conveyor/data), or move the file away.")
    return root


def load_configured(data) -> Graph:
    """The graph a run's data settings describe (`DataSettings`, partition/settings.py): `name`,
    `root`, the loader's options, and `normalize_features`; checked to have features, labels and
    training nodes. Training, `conveyor partition` and the comparison all load through here, so
    they agree on the graph (and a saved partitioning's fingerprint matches)."""
    entry = dataset_entry(data.name, data._target_)
    root = data.root_folder() if entry.root else None  # custom reads data.path
    graph = check_trainable(load_dataset(data.name, root=root, target=data._target_, **data.options()), data.name)
    if data.normalize_features:  # as PyG's NormalizeFeatures
        if is_typed(graph):
            graph.typed = {k: normalize(v) if k.startswith("x.") else v for k, v in graph.typed.items()}
        else:
            graph.x = normalize(graph.x)
    return graph


def normalize(x):
    """PyG's NormalizeFeatures, exactly: shifted to a minimum of 0 (so that no row sums to a
    negative or tiny number), then each row divided by its sum, or by 1 where that is below 1."""
    if not x.numel():
        return x
    x = x - x.min()
    return x / x.sum(-1, keepdim=True).clamp(min=1.0)


def check_trainable(graph: Graph, name: str) -> Graph:
    """The graph, once checked to have features, labels, a class count and training nodes."""
    if (graph.x is None and not is_typed(graph)) or graph.y is None:  # a typed graph's may be per type, or none
        raise ConveyorError(f"dataset {name!r} has no node features or labels; training "
                            f"needs both (x and y).")
    if graph.num_classes is None:
        raise ConveyorError(f"dataset {name!r} does not say how many classes it has; set "
                            f"graph.num_classes.")
    y = getattr(graph, "y", None)
    if isinstance(y, torch.Tensor) and y.dim() == 1 and int(graph.num_classes) < 2:  # not [N, 1] targets
        raise ConveyorError(f"dataset {name!r} has labels of one class only ({graph.num_classes} class): a "
                            f"classifier of one class is always right, and its accuracy says nothing. Give "
                            f"it labels of at least two classes (or set num_classes to their count).")
    if graph.train_idx is None or graph.train_idx.numel() == 0:
        raise ConveyorError(f"dataset {name!r} has an empty training split; give it "
                            f"training nodes (train_idx, or train_mask in a PyG Data) to train on.")
    return graph


# conveyor's own datasets: each its loader's module and its conf/data YAML, registered here by name;
# every question about one is asked of its entry (partition/datasets/registry.py).
HERE = "conveyor.partition.datasets"
for planetoid in ("cora", "citeseer", "pubmed"):
    register_dataset(planetoid, f"{HERE}.planetoid.load_planetoid", by_name=True,
                     widths=f"{HERE}.planetoid_files.known_widths")
for ogb in ("arxiv", "products", "papers100m"):
    register_dataset(ogb, f"{HERE}.ogbn.load_ogb", by_name=True, check=f"{HERE}.ogbn.check_settings")
register_dataset("synthetic", f"{HERE}.synthetic.load_synthetic", settings="conveyor.partition.settings.SyntheticData",
                 check=f"{HERE}.synthetic.check_settings")
register_dataset("synthetic_papers", f"{HERE}.synthetic_papers.load_synthetic_papers",
                 settings="conveyor.partition.settings.SyntheticPapersData")
register_dataset("custom", f"{HERE}.custom.load_custom", settings="conveyor.partition.settings.CustomData", root=False,
                 check=f"{HERE}.custom.check_settings", widths=f"{HERE}.custom.known_widths")
REGISTRY["memory"] = DatasetEntry("memory", None, root=False)  # a graph given to fit(): nothing to load
register_dataset("mag", f"{HERE}.mag.load_mag", typed=True)
register_dataset("synthetic_mag", f"{HERE}.synthetic_mag.load_synthetic_mag", typed=True,
                 settings="conveyor.partition.settings.SyntheticMagData", check=f"{HERE}.synthetic_mag.check_settings")
register_dataset("synthetic_movielens", f"{HERE}.synthetic_movielens.load_synthetic_movielens", typed=True,
                 settings="conveyor.partition.settings.SyntheticMovieLensData")
DATASETS = tuple(REGISTRY)  # the registered names (yours too, once registered)

__all__ = ["DATASETS", "REGISTRY", "DatasetEntry", "check_trainable", "dataset_entry", "load_configured",
           "load_dataset", "register_dataset"]
