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
from conveyor.partition.graph import Graph
from conveyor.partition.hetero import is_typed

PLANETOID = ("cora", "citeseer", "pubmed")
OGB = ("arxiv", "products", "papers100m")
TYPED = ("mag", "synthetic_mag", "synthetic_movielens")  # typed graphs (partition/hetero.py)
DATASETS = PLANETOID + OGB + ("synthetic", "synthetic_papers", "custom", "memory") + TYPED


def load_dataset(name: str, root: str | Path | None = None, **options) -> Graph:
    """Load dataset `name` (one of `DATASETS`) kept under the directory `root`; `options` are its
    loader's own keyword arguments (synthetic: scale, seed, ...; custom: path, ...)."""
    key = str(name).lower()
    if key not in DATASETS:
        raise ConveyorError(f"unknown dataset {name!r}; choose one of: {', '.join(DATASETS)}.")
    if key == "memory":
        check_options(key, options, ())
        raise ConveyorError("data=memory stands for a graph handed to conveyor.fit() in Python, so "
                            "there is nothing to load; on the command line choose a dataset "
                            "(e.g. data=cora) or your own arrays (data=custom data.path=DIR).")
    load = loader(key)
    check_options(key, options, tuple(p for p in inspect.signature(load).parameters if p not in ("name", "root")))
    if key == "custom":
        path = options.pop("path", None) or root
        return load(None if path is None else Path(path).expanduser(), **options)
    if root is None:
        raise ConveyorError(f"dataset {key!r} needs a root directory to keep its files in "
                            f"(data.root in the config).")
    root = check_root(root)
    return load(key, root) if key in PLANETOID + OGB else load(root, **options)  # mag: load(root)


def loader(key: str):
    """The function that loads dataset `key`; its keyword arguments are the dataset's options."""
    if key == "custom":
        from conveyor.partition.datasets.custom import load_custom
        return load_custom
    if key in PLANETOID:
        from conveyor.partition.datasets.planetoid import load_planetoid
        return load_planetoid
    if key in OGB:
        from conveyor.partition.datasets.ogbn import load_ogb
        return load_ogb
    if key == "mag":
        from conveyor.partition.datasets.mag import load_mag
        return load_mag
    if key == "synthetic_papers":
        from conveyor.partition.datasets.synthetic_papers import load_synthetic_papers
        return load_synthetic_papers
    if key == "synthetic_mag":
        from conveyor.partition.datasets.synthetic_mag import load_synthetic_mag
        return load_synthetic_mag
    if key == "synthetic_movielens":
        from conveyor.partition.datasets.synthetic_movielens import load_synthetic_movielens
        return load_synthetic_movielens
    from conveyor.partition.datasets.synthetic import load_synthetic
    return load_synthetic


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
    root = data.root_folder() if data.name != "custom" else None  # custom reads data.path
    graph = check_trainable(load_dataset(data.name, root=root, **data.options()), data.name)
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


__all__ = ["DATASETS", "check_trainable", "load_configured", "load_dataset"]
