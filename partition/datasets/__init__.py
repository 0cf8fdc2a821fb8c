"""Dataset loaders: `load_dataset(name, root, **options) -> Graph`.

Every loader returns a validated `Graph` with `x` float32, `y` int64 (1-D, -1 for unlabelled),
`train_idx`/`val_idx`/`test_idx` int64, and `num_classes` and `name` set.

- `cora`, `citeseer`, `pubmed`: Planetoid with its public split (planetoid.py). Offline, prepare
  them first: `python scripts/prepare_planetoid.py --root <root>`.
- `arxiv`, `products`, `papers100m`: OGB node property prediction with the official split (ogbn.py).
- `synthetic`: a products-shaped power-law graph of any size; options `scale` (1.0 = products'
  size), `seed`, `num_features`, `num_classes` (synthetic.py). Cached under `<root>/synthetic/`.
- `custom`: your own arrays in a directory; options `path`, `undirected`, `num_classes` (custom.py).
- `memory`: a graph handed over in Python (`conveyor.fit(graph_or_data)`); nothing to load.
"""
from __future__ import annotations

import os
from pathlib import Path

from omegaconf import OmegaConf

from ..errors import ConveyorError
from ..graph import Graph
from .common import check_options

PLANETOID = ("cora", "citeseer", "pubmed")
OGB = ("arxiv", "products", "papers100m")
DATASETS = PLANETOID + OGB + ("synthetic", "custom", "memory")
# The options each loader takes; every one is declared, with its meaning, in that dataset's YAML
# (conf/data/<name>.yaml; tests/test_config_keys.py checks it).
OPTIONS = {"synthetic": ("scale", "seed", "num_features", "num_classes"),
           "custom": ("path", "undirected", "num_classes")}


def load_dataset(name: str, root: str | Path | None = None, **options) -> Graph:
    """Load dataset `name` (one of `DATASETS`) kept under the directory `root`."""
    key = str(name).lower()
    if key not in DATASETS:
        raise ConveyorError(f"unknown dataset {name!r}; choose one of: {', '.join(DATASETS)}.")
    check_options(key, options, OPTIONS.get(key, ()))
    if key == "memory":
        raise ConveyorError("data=memory stands for a graph handed to conveyor.fit() in Python, so "
                            "there is nothing to load; on the command line choose a dataset "
                            "(e.g. data=cora) or your own arrays (data=custom data.path=DIR).")
    if key == "custom":
        from .custom import load_custom
        path = options.pop("path", None) or root
        return load_custom(None if path is None else Path(path).expanduser(), **options)
    if root is None:
        raise ConveyorError(f"dataset {key!r} needs a root directory to keep its files in "
                            f"(data.root in the config).")
    root = check_root(root)
    if key in PLANETOID:
        from .planetoid import load_planetoid
        return load_planetoid(key, root)
    if key in OGB:
        from .ogbn import load_ogb
        return load_ogb(key, root)
    from .synthetic import load_synthetic
    return load_synthetic(root, **options)


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


def load_configured(cfg_data) -> Graph:
    """The graph a run's `data` config describes (conf/data/*.yaml): `name`, `root`, the loader's
    options, and `normalize_features`; checked to have features, labels and training nodes.
    Training, `conveyor partition` and the comparison all load through here, so they agree on
    the graph (and a saved partitioning's fingerprint matches)."""
    options = {k: v for k, v in OmegaConf.to_container(cfg_data, resolve=True).items()
               if k not in ("name", "root", "normalize_features")}
    root = cfg_data.get("root")
    root = None if root is None else os.path.expanduser(str(root))
    graph = check_trainable(load_dataset(str(cfg_data.name), root=root, **options), str(cfg_data.name))
    if cfg_data.get("normalize_features", False):  # as PyG's NormalizeFeatures: rows sum to 1
        graph.x = graph.x / graph.x.sum(1, keepdim=True).clamp(min=1e-12)
    return graph


def check_trainable(graph: Graph, name: str) -> Graph:
    """The graph, once checked to have features, labels, a class count and training nodes."""
    if graph.x is None or graph.y is None:
        raise ConveyorError(f"dataset {name!r} has no node features or labels; training "
                            f"needs both (x and y).")
    if graph.num_classes is None:
        raise ConveyorError(f"dataset {name!r} does not say how many classes it has; set "
                            f"graph.num_classes.")
    if graph.train_idx is None or graph.train_idx.numel() == 0:
        raise ConveyorError(f"dataset {name!r} has an empty training split; give it "
                            f"training nodes (train_idx, or train_mask in a PyG Data) to train on.")
    return graph


__all__ = ["DATASETS", "check_trainable", "load_configured", "load_dataset"]
