"""PyG's own tests of its LinkNeighborLoader (tests/data/pyg/test_link_neighbor_loader.py, verbatim)
run with conveyor's: the one import changed, PyG's gates on pyg-lib and torch_sparse opened
(tests/helpers/pyg_spec.py, `pyg_spec_tests`). Every homogeneous, non-temporal test that PyG's loader
passes passes here (the 17 items of /work/notes' research note: the basic test's 12, edge_label,
no_edges, triplet at amount 1 and 2, mapping; and the triplet test's disjoint ones, issue 48; PyG
needs pyg-lib for those, conveyor does not), over the serial pipeline in full and
over the async one for a few that exercise what its processes move (the links as a batch's
extras, binary and triplet negatives, e_id; each async loader starts two processes, ~3-5 s).
`NOT_RUN` names the tests left out, each with its reason; `TRIPLET` the parameters kept of the
test that also runs what conveyor refuses (temporal)."""
import pytest

from conveyor import LinkNeighborLoader
from tests.helpers import pyg_spec_tests

NOT_RUN = {
    "test_hetero_link_neighbor_loader_basic": "heterogeneous graphs (issue #38)",
    "test_hetero_link_neighbor_loader_loop": "heterogeneous graphs (issue #38)",
    "test_custom_hetero_link_neighbor_loader": "heterogeneous graphs (issue #38)",
    "test_hetero_link_neighbor_loader_no_edges": "heterogeneous graphs (issue #38)",
    "test_hetero_link_neighbor_loader_triplet": "heterogeneous graphs (issue #38)",
    "test_temporal_homo_link_neighbor_loader": "temporal sampling (PyG's needs pyg-lib and disjoint too)",
    "test_temporal_hetero_link_neighbor_loader": "temporal sampling and heterogeneous graphs",
}
# The triplet test's temporal=True items ask for temporal sampling (refused by name) or, with
# disjoint=False, return before building a loader, so they test nothing; disjoint runs (issue 48).
TRIPLET = {"disjoint": [False, True], "temporal": [False]}
SERIAL = {"test_homo_link_neighbor_loader_triplet": TRIPLET}
# Through the async pipeline's processes: binary negatives with edge attributes under both subgraph
# types, given labels, triplet negatives, e_id (labels' dtypes: tests/loader/test_link_loader.py, serial = async).
ASYNC = {"test_homo_link_neighbor_loader_basic": {"filter_per_worker,neg_sampling_ratio,subgraph_type": [
             (None, 1.0, "directional"), (False, None, "bidirectional")]},
         "test_homo_link_neighbor_loader_triplet": {**TRIPLET, "amount": [2]},
         "test_link_neighbor_loader_mapping": {},
         "test_homo_link_neighbor_loader_no_edges": {}}  # zero hops: the endpoints alone (issue #50)


def narrowed(test, keep: dict):
    """`test` with the parametrize marks of the arguments `keep` names replaced by `keep`'s values
    ("a,b": [(a, b), ...] for chosen combinations; its other marks kept)."""
    names = {name for key in keep for name in key.split(",")}
    marks = [m for m in getattr(test, "pytestmark", []) if not (m.name == "parametrize" and m.args[0] in names)]
    test.pytestmark = marks + [pytest.mark.parametrize(key, values).mark for key, values in keep.items()]
    return test


def chosen(pipeline: str, only: dict = None) -> dict:
    """The tests to run over `pipeline`: all but NOT_RUN, narrowed by SERIAL; or those `only` names,
    narrowed by it."""
    tests = pyg_spec_tests("test_link_neighbor_loader.py", {"LinkNeighborLoader": LinkNeighborLoader}, pipeline,
                           f"test_{pipeline}__")
    picked = {}
    for key, test in tests.items():
        name = key.split("__", 1)[1]
        if name not in NOT_RUN and (only is None or name in only):
            picked[key] = narrowed(test, (only or SERIAL).get(name, {}))
    return picked


globals().update(chosen("serial"))
globals().update(chosen("async", ASYNC))
