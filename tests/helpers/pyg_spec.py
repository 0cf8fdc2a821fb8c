"""PyG's own loader tests (tests/data/pyg/), run with conveyor's loaders by changing only the import."""
from __future__ import annotations

import ast
import re

from tests.helpers.common import REPO

# -- PyG's own loader tests, with conveyor's loader ------------------------------------------------

PYG_TESTS = REPO / "tests" / "data" / "pyg"  # PyG's test files, verbatim (ORIGIN.md there)
SAMPLER_PACKAGES = {"pyg_lib", "pyg-lib", "torch_sparse", "torch-sparse"}
SAMPLER_FLAGS = ("WITH_PYG_LIB", "WITH_TORCH_SPARSE", "WITH_WEIGHTED_NEIGHBOR_SAMPLE", "WITH_EDGE_TIME_NEIGHBOR_SAMPLE")
PYG_LIB_SKIP = "'pyg-lib' does not support"  # the reason of PyG's skipif marks around pyg-lib-only features


def pyg_spec_tests(file: str, loaders: dict, pipeline: str, prefix: str) -> dict:
    """The test functions of PyG's own test file `file` (tests/data/pyg/), run with each loader of
    `loaders` (PyG's name -> conveyor's class) imported from conveyor instead of PyG: that import line
    is the one change to the file. PyG's gates on pyg-lib and torch_sparse are opened (conveyor needs
    neither): `withPackage` drops those two names, `onlyNeighborSampler` and the skipif marks built
    from the pyg-lib flags go, and the in-body flags are True in the module's namespace only (PyG's
    own sampler still reads the real ones). `pipeline` becomes the loaders' default pipeline. The
    functions come back under `prefix` + their name, for a test module's globals."""
    import types

    import torch_geometric.testing as pyg_testing
    import torch_geometric.testing.decorators as pyg_decorators

    source = (PYG_TESTS / file).read_text()
    for name in loaders:
        source = with_conveyors(source, name, file)
    module = types.ModuleType(f"pyg_spec_{pipeline}_{file[:-3]}")
    patches = {"withPackage": open_gate(pyg_decorators.withPackage), "onlyNeighborSampler": lambda f: f}
    saved = {m: {k: getattr(m, k) for k in patches} for m in (pyg_testing, pyg_decorators)}
    try:
        for m in saved:
            for k, v in patches.items():
                setattr(m, k, v)
        exec(compile(source, str(PYG_TESTS / file), "exec"), module.__dict__)
    finally:
        for m, values in saved.items():
            for k, v in values.items():
                setattr(m, k, v)
    module.__dict__.update({flag: True for flag in SAMPLER_FLAGS})
    module.__dict__.update({name: with_pipeline(cls, pipeline) for name, cls in loaders.items()})
    tests = {}
    for name, test in module.__dict__.items():
        if name.startswith("test_") and callable(test):
            test.pytestmark = [m for m in getattr(test, "pytestmark", [])
                               if not (m.name == "skipif" and PYG_LIB_SKIP in str(m.kwargs.get("reason", "")))]
            tests[prefix + name] = test
    return tests


def with_conveyors(source: str, name: str, file: str) -> str:
    """`source` importing `name` from conveyor instead of torch_geometric.loader: the import line
    replaced where it imports that name alone, else conveyor's import right after PyG's statement
    (which imports other names of torch_geometric.loader too), shadowing PyG's."""
    pyg_import = f"from torch_geometric.loader import {name}\n"
    if source.count(pyg_import) == 1:
        return source.replace(pyg_import, f"from conveyor import {name}\n")
    found = [node for node in ast.parse(source).body if isinstance(node, ast.ImportFrom)
             and node.module == "torch_geometric.loader" and any(a.name == name for a in node.names)]
    assert len(found) == 1, f"{file} no longer imports {name} from torch_geometric.loader as expected"
    lines = source.splitlines(keepends=True)
    lines.insert(found[0].end_lineno, f"from conveyor import {name}\n")
    return "".join(lines)


def open_gate(with_package):
    """PyG's withPackage without its checks for the samplers conveyor does not need."""
    def gate(*packages):
        rest = [p for p in packages if re.split(r"[<>=!~ ]", p, maxsplit=1)[0] not in SAMPLER_PACKAGES]
        return with_package(*rest) if rest else (lambda f: f)
    return gate


def pyg_get_dataset():
    """PyG's test/conftest.py `get_dataset` fixture's value, for the datasets PyG's tests here read
    (KarateClub: in the package, nothing downloaded)."""
    import functools

    def load_dataset(root: str, name: str, *args, **kwargs):
        assert "karate" in name.lower(), name
        from torch_geometric.datasets import KarateClub
        return KarateClub(*args, **kwargs)
    return functools.partial(load_dataset, "memory://pyg_test_datasets")


def with_pipeline(cls, pipeline: str):
    """`cls` under its own name, its `pipeline=` defaulting to `pipeline`."""
    return type(cls.__name__, (cls,), {"__init__": lambda self, *args, pipeline=pipeline, **kwargs:
                                       cls.__init__(self, *args, pipeline=pipeline, **kwargs)})
