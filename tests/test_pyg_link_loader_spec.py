"""PyG's own tests of its LinkNeighborLoader (tests/data/pyg/test_link_neighbor_loader.py, verbatim)
run with conveyor's: the one import changed, PyG's gates on pyg-lib and torch_sparse opened
(tests/helpers.py, `pyg_spec_tests`). Every test of the file runs and passes over the serial
pipeline: homogeneous and typed (HeteroData: issue 49), binary and triplet negatives (weighted
ones too), disjoint and temporal (PyG needs pyg-lib for those, conveyor does not). Over the async
pipeline a part runs, what its processes move: the links as a batch's extras, binary and triplet
negatives, e_id, typed links, temporal links with their times (each async loader starts two
processes, ~3-5 s). The narrowed parameters say what the async part leaves out."""
import pytest

from conveyor import LinkNeighborLoader
from tests.helpers import pyg_spec_tests

NOT_RUN = {}
SERIAL = {}
# Through the async pipeline's processes: binary negatives with edge attributes under both subgraph
# types, given labels, triplet negatives (disjoint, temporal), e_id, typed links and temporal ones
# (labels' dtypes: tests/test_link_loader.py, serial = async).
ASYNC = {"test_homo_link_neighbor_loader_basic": {"filter_per_worker,neg_sampling_ratio,subgraph_type": [
             (None, 1.0, "directional"), (False, None, "bidirectional")]},
         "test_homo_link_neighbor_loader_triplet": {"disjoint,temporal": [(False, False), (True, True)],
                                                    "amount": [2]},
         "test_link_neighbor_loader_mapping": {},
         "test_homo_link_neighbor_loader_no_edges": {},  # zero hops: the endpoints alone (issue #50)
         "test_hetero_link_neighbor_loader_basic": {"subgraph_type,neg_sampling_ratio": [("directional", 1.0)]},
         "test_hetero_link_neighbor_loader_triplet": {"disjoint,temporal": [(True, True)], "amount": [1]},
         "test_temporal_homo_link_neighbor_loader": {},
         "test_temporal_hetero_link_neighbor_loader": {}}


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
