"""PyG's own tests of its NeighborLoader (tests/data/pyg/test_neighbor_loader.py, verbatim) run
with conveyor's: the one import changed, PyG's gates on pyg-lib and torch_sparse opened
(tests/helpers.py, `pyg_spec_tests`). Every test that PyG's loader passes, homogeneous and
heterogeneous (issue 38: every subgraph type, the weighted and sampled-info tests, typed stores),
temporal ones included (issue 49: node- and edge-level time, typed and not; PyG needs pyg-lib for
them, conveyor does not), passes here, over the serial pipeline in full and over the async one for
the tests that exercise what its processes move, the temporal ones among them (each async loader
starts two processes, ~3-5 s). `NOT_RUN` names the
tests left out, each with its reason (the README lists them too)."""
import pytest

from conveyor import NeighborLoader
from tests.helpers import pyg_get_dataset, pyg_spec_tests

NOT_RUN = {
    "test_pyg_lib_and_torch_sparse_homo_equality": "no loader: compares pyg-lib's and torch_sparse's kernels",
    "test_pyg_lib_and_torch_sparse_hetero_equality": "no loader: compares pyg-lib's and torch_sparse's kernels",
    "test_neighbor_loader_with_tensor_frame": "torch_frame is not installed (PyG skips it too)",
}
# What the async pipeline's processes move: edge weights and e_id (every subgraph type), a memmap x,
# stores, a graph without x, seeds with their times. The basic tests' attribute slicing runs serially.
ASYNC = ("test_homo_neighbor_loader_on_karate", "test_custom_neighbor_loader", "test_memmap_neighbor_loader",
         "test_neighbor_loader_mapping", "test_custom_hetero_neighbor_loader", "test_neighbor_loader_input_id",
         "test_temporal_hetero_neighbor_loader_on_karate", "test_temporal_custom_neighbor_loader_on_karate",
         "test_edge_level_temporal_homo_neighbor_loader", "test_temporal_neighbor_loader_single_link",
         "test_edge_level_temporal_hetero_neighbor_loader")


def chosen(pipeline: str, names=None) -> dict:
    tests = pyg_spec_tests("test_neighbor_loader.py", {"NeighborLoader": NeighborLoader}, pipeline,
                           f"test_{pipeline}__")
    return {k: t for k, t in tests.items() if k.split("__", 1)[1] not in NOT_RUN
            and (names is None or k.split("__", 1)[1] in names)}


globals().update(chosen("serial"))
globals().update(chosen("async", ASYNC))


@pytest.fixture(scope="session")
def get_dataset():
    return pyg_get_dataset()
