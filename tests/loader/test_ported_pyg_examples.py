"""Every PyG example of issue 48 (item 5) runs with only its loader import changed
(`from torch_geometric.loader import X` -> `from conveyor import X`): reddit.py, ogbn_train.py
(`--model sage`, and its default SGFormer on disjoint batches), hierarchical_sampling.py,
infomax_inductive.py, graph_sage_unsup.py, hetero/to_hetero_mag.py and hetero/hierarchical_sage.py,
each for one epoch on the offline stand-in data, all in one interpreter (one import of torch and
PyG) through benchmarks/pyg_examples.py's harness, which also times them beside PyG's loader.
hierarchical_sage.py's `--use-sparse-tensor` variant gives the loader a HeteroData of `adj_t`
(T.ToSparseTensor), which conveyor samples as PyG's loader does and its batches carry as `adj_t`
(issue 48 item 3; tests/loader/test_typed_adj_t.py checks them against PyG's own loader)."""
from __future__ import annotations

import difflib

import pytest

from benchmarks.pyg_examples import EXAMPLES, EXAMPLES_DIR, ported, run_examples

pytestmark = pytest.mark.slow
# One epoch's batches of each training loader: 1,200 training nodes (papers) in batches of 1024;
# infomax_inductive.py trains on all 2,000 nodes in batches of 256; graph_sage_unsup.py on Cora's
# 10,556 edges in batches of 256.
TRAIN_BATCHES = {"reddit": 2, "ogbn_train --model sage": 2, "ogbn_train (sgformer disjoint)": 2,
                 "hierarchical_sampling": 2, "infomax_inductive": 8, "graph_sage_unsup": 42,
                 "hetero/to_hetero_mag": 2, "hetero/hierarchical_sage": 2,
                 "hetero/hierarchical_sage --use-sparse-tensor": 2}
CONVEYOR_CLASSES = ("conveyor.loader.neighbor_loader.NeighborLoader",
                    "conveyor.loader.link_neighbor_loader.LinkNeighborLoader")


@pytest.fixture(scope="module")
def records():
    names = list(EXAMPLES)
    found = run_examples([(name, 1) for name in names], "conveyor", timeout=900, env={"OMP_NUM_THREADS": "1"})
    return dict(zip(names, found))


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_only_the_loader_import_changes(name):
    path = EXAMPLES[name].path
    original = (EXAMPLES_DIR / path).read_text().splitlines()
    changed = [line for line in difflib.ndiff(original, ported(path).splitlines()) if line[:2] in ("- ", "+ ")]
    assert len(changed) == 2 and changed[0].startswith("- from torch_geometric.loader import ")
    assert changed[1] == "+ from conveyor import " + changed[0][len("- from torch_geometric.loader import "):]


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_pyg_example_trains_an_epoch_on_conveyors_loader(records, name):
    record = records[name]
    assert record["error"] is None, record["stderr_tail"]
    assert record["loaders"] and all(loader["class"] in CONVEYOR_CLASSES for loader in record["loaders"])
    train_passes = [p for p in record["passes"] if p["loader"] == 0]
    expected_passes = 2 if name == "hierarchical_sampling" else 1  # it trains without, then with trimming
    assert [p["batches"] for p in train_passes] == [TRAIN_BATCHES[name]] * expected_passes
    assert 0.0 <= record["metric"] <= 1.0  # the script's own figure, printed (or the harness's, after it)

