"""PyG's own tests of the code that consumes a loader (issue 48), with conveyor's NeighborLoader:
PyG 2.8's files under tests/data/pyg/ (verbatim, ORIGIN.md), the import of `NeighborLoader`
changed and nothing else, PyG's gates on pyg-lib and torch_sparse opened (tests/helpers/pyg_spec.py,
`pyg_spec_tests`). Only the tests that build a loader are taken (`LOADER_TESTS`): layer-wise
`BasicGNN.inference` with and without `cache=True`, `trim_to_layer` over a batch, `ZipLoader`,
`ImbalancedSampler` as `sampler=`, `CachedLoader`, `PNAConv.get_degree_histogram`. All of them
run over the serial pipeline; the ones whose batches cross the async pipeline's processes and are
held or drawn by a torch sampler run over it too (each async loader starts two processes).
`NOT_RUN` says which loader tests are left out and why."""

from conveyor import NeighborLoader
from tests.helpers import pyg_spec_tests

LOADER_TESTS = {
    "test_basic_gnn.py": ("test_basic_gnn_inference", "test_trim_to_layer", "test_basic_gnn_cache"),
    "test_zip_loader.py": ("test_zip_loader",),
    "test_imbalanced_sampler.py": ("test_neighbor_loader_with_imbalanced_sampler",
                                   "test_hetero_neighbor_loader_with_imbalanced_sampler"),
    "test_cache.py": ("test_cached_loader", "test_cached_loader_transform"),
    "test_pna_conv.py": ("test_pna_conv_get_degree_histogram_neighbor_loader",),
    "test_trim_to_layer.py": ("test_trim_to_layer_with_neighbor_loader",),
}
NOT_RUN = {
    "test_mixin.py::test_cpu_affinity_neighbor_loader": "PyG marks it xfail; it reads torch's worker internals "
                                                        "(iterator._workers); tests/loader/test_pyg_consumers.py "
                                                        "checks "
                                                        "enable_cpu_affinity on conveyor's stage processes",
    "test_mixin.py::test_multithreading_neighbor_loader": "its worker_init_fn lives in the test module, which the "
                                                          "stage processes cannot import (PyG's runs as an importable "
                                                          "module); tests/loader/test_pyg_consumers.py runs the "
                                                          "same check "
                                                          "with an importable one",
}
ASYNC = ("test_basic_gnn_inference", "test_basic_gnn_cache", "test_neighbor_loader_with_imbalanced_sampler",
         "test_cached_loader")


def chosen(pipeline: str, only=None) -> dict:
    picked = {}
    for file, names in LOADER_TESTS.items():
        tests = pyg_spec_tests(file, {"NeighborLoader": NeighborLoader}, pipeline, f"test_{pipeline}__{file[5:-3]}__")
        for key, test in tests.items():
            name = key.rsplit("__", 1)[1]
            if name in names and (only is None or name in only):
                picked[key] = test
    return picked


globals().update(chosen("serial"))
globals().update(chosen("async", ASYNC))

