"""Dataset loaders: `load_dataset(name, root, **options) -> Graph`.

Every loader returns a validated `Graph` with `x` float32, `y` int64 (1-D, -1 for unlabelled),
`train_idx`/`val_idx`/`test_idx` int64, and `num_classes` and `name` set.

- `cora`, `citeseer`, `pubmed`: Planetoid with its public split (planetoid.py). Offline, prepare
  them first: `python scripts/prepare_planetoid.py --root <root>`.
- `arxiv`, `products`, `papers100m`: OGB node property prediction with the official split (ogbn.py).
- `synthetic`: a products-shaped power-law graph of any size; options `scale` (1.0 = products'
  size), `seed`, `num_features`, `num_classes` (synthetic.py). Cached under `<root>/synthetic/`.
- `custom`: your own arrays in a directory; options `path`, `undirected`, `num_classes` (custom.py).
"""
from __future__ import annotations

from pathlib import Path

from ..errors import ConveyorError
from ..graph import Graph
from .common import check_options

PLANETOID = ("cora", "citeseer", "pubmed")
OGB = ("arxiv", "products", "papers100m")
DATASETS = PLANETOID + OGB + ("synthetic", "custom")
OPTIONS = {"synthetic": ("scale", "seed", "num_features", "num_classes"),
           "custom": ("path", "undirected", "num_classes")}


def load_dataset(name: str, root: str | Path | None = None, **options) -> Graph:
    """Load dataset `name` (one of `DATASETS`) kept under the directory `root`."""
    key = str(name).lower()
    if key not in DATASETS:
        raise ConveyorError(f"unknown dataset {name!r}; choose one of: {', '.join(DATASETS)}.")
    check_options(key, options, OPTIONS.get(key, ()))
    if key == "custom":
        from .custom import load_custom
        path = options.pop("path", None) or root
        return load_custom(None if path is None else Path(path).expanduser(), **options)
    if root is None:
        raise ConveyorError(f"dataset {key!r} needs a root directory to keep its files in "
                            f"(data.root in the config).")
    root = Path(root).expanduser()
    if key in PLANETOID:
        from .planetoid import load_planetoid
        return load_planetoid(key, root)
    if key in OGB:
        from .ogbn import load_ogb
        return load_ogb(key, root)
    from .synthetic import load_synthetic
    return load_synthetic(root, **options)


__all__ = ["DATASETS", "load_dataset"]
