"""benchmarks/typed_link_examples.py: PyG's typed link examples changed by their one loader import
line only, and the stand-in datasets (tests/data/pyg_examples/synthetic_datasets.py) in the shape
of PyG's MovieLens and Taobao."""
import argparse
import importlib.util
import sys

import pytest
import torch

from benchmarks.typed_link_examples import EXAMPLES, EXAMPLES_DIR, example_names, script


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_only_the_loader_import_changes(name):
    pyg, ported = script(name, "pyg").splitlines(), script(name, "conveyor").splitlines()
    changed = [(a, b) for a, b in zip(pyg, ported, strict=True) if a != b]
    assert len(changed) == 1 and changed[0][1].startswith("from conveyor import LinkNeighborLoader")
    assert pyg == (EXAMPLES_DIR / name).read_text().splitlines()


@pytest.fixture(scope="module")
def stand_ins():
    spec = importlib.util.spec_from_file_location("stand_ins", EXAMPLES_DIR / "synthetic_datasets.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # also puts its import hook first on sys.meta_path: taken off below
    sys.meta_path[:] = [f for f in sys.meta_path if type(f).__name__ != "PatchOnImport"]
    return module


def test_movielens_stand_in_has_pygs_shape(stand_ins):
    (data,) = stand_ins.movielens("unused", model_name="all-MiniLM-L6-v2")
    rates = data["user", "rates", "movie"]
    assert data.node_types == ["movie", "user"] and data.edge_types == [("user", "rates", "movie")]
    assert data["movie"].x.shape == (974, 404) and data["user"].num_nodes == 61
    assert rates.edge_label.dtype == torch.long and set(rates.edge_label.unique().tolist()) <= set(range(6))
    assert rates.time.dtype == torch.long and rates.edge_index.size(1) == rates.time.numel() > 5000


def test_taobao_stand_in_has_pygs_shape(stand_ins):
    (data,) = stand_ins.taobao("unused")
    assert set(data.edge_types) == {("user", "to", "item"), ("item", "to", "category")}
    bought = data["user", "to", "item"]
    assert set(bought.behavior.unique().tolist()) <= {0, 1, 2, 3} and bought.time.numel() == bought.edge_index.size(1)
    assert int(data["item", "to", "category"].edge_index[1].max()) < data["category"].num_nodes == 20


def test_examples_are_named_with_or_without_their_suffix():
    assert example_names("recommender_system,bipartite_sage_unsup.py") == ["recommender_system.py",
                                                                           "bipartite_sage_unsup.py"]
    with pytest.raises(argparse.ArgumentTypeError, match="unknown example"):
        example_names("to_hetero_mag")
