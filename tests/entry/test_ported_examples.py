"""PyG's own examples ported by changing one import: `examples/reddit.py` and
`examples/ogbn_products_sage.py` (tests/data/pyg_examples/, as PyG ships them, with their origin and
licence), run with `from conveyor import NeighborLoader` in place of PyG's and nothing else
changed, by benchmarks/pyg_examples.py's harness. What the scripts would download is replaced, in
every process of the run, by a small synthetic dataset of the same shape
(tests/data/pyg_examples/synthetic_datasets.py, put on PYTHONPATH as sitecustomize.py). reddit.py
runs whole (10 epochs); ogbn_products_sage.py's 10 runs of 20 epochs are cut to one run of 8 by
handing the script a `range` that shortens exactly those two loops (by their bounds; every other
`range` call is the builtin's). tests/loader/test_ported_pyg_examples.py runs every example of
issue 48 for one epoch.

The accuracy each must reach is below what PyG's own NeighborLoader reaches with the unported
script on the same data and cut (measured with this harness, beside each threshold) by a margin
for another sampler's draws and the scripts' unseeded initialisation; the node's own features
alone give 0.37 (nearest class centroid), the mean of its in-neighbours' 0.92."""
from __future__ import annotations

import re

import pytest

from benchmarks.pyg_examples import run_examples

pytestmark = pytest.mark.slow


def run_whole(name: str, epochs: int) -> dict:
    record = run_examples([(name, epochs)], "conveyor", timeout=600, env={"OMP_NUM_THREADS": "1"})[0]
    assert record["error"] is None, record["stderr_tail"]
    assert record["loaders"][0]["class"] == "conveyor.loader.neighbor_loader.NeighborLoader"
    return record


def test_pyg_reddit_example_runs_with_conveyors_loader():
    out = run_whole("reddit", 10)["stdout"]
    assert len(re.findall(r"Epoch: \d\d, Train: ", out)) == 10 and "Median time per epoch" in out
    # PyG's own loader (torch_sparse), the unported script on the same data: test 0.948, 0.955, 0.958.
    assert float(re.findall(r"Epoch: 10, .*Test: (\d\.\d+)", out)[-1]) >= 0.9


def test_pyg_ogbn_products_example_runs_with_conveyors_loader():
    record = run_whole("ogbn_products_sage", 8)  # 1 of its 10 runs, 8 of its 20 epochs: evaluated from the 6th
    out = record["stdout"]
    assert len(re.findall(r"Epoch \d\d, Loss: ", out)) == 8 and len(re.findall(r"\nTrain: ", out)) == 3
    # PyG's own loader (torch_sparse), the unported script, same data and cut: 0.855, 0.898, 0.950, 0.955.
    assert record["metric"] >= 0.8
