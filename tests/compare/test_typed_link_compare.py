"""mode=compare task=link on a typed graph (compare/typed_link_reference.py): PyG's
LinkNeighborLoader on the HeteroData beside conveyor, the same split and the same model from the
same seed, evaluated by the same LinkTask figures (ROC-AUC, Hits@K, Recall@K)."""
import json

import pytest
import torch_geometric.typing as pyg_typing

from conveyor.compare.comparison import SYSTEMS
from conveyor.modes import run
from tests.helpers import make_config


def test_compare_trains_pygs_typed_link_loader_beside_conveyor(tmp_path):
    if not (pyg_typing.WITH_PYG_LIB or pyg_typing.WITH_TORCH_SPARSE):
        pytest.skip("needs torch_sparse or pyg-lib")
    result = run(make_config("mode=compare", "task=link", "data=synthetic_movielens", "data.scale=0.05",
                             "data.num_features=24", f"data.root={tmp_path / 'data'}",
                             f"run.out_dir={tmp_path / 'out'}",
                             "trainer.epochs=1", "trainer.batch_size=256", "sampler.fanouts=[5,5]", "model.hidden=16",
                             "trainer.lr=0.01", "compare.seeds=1", "compare.pyg_workers=0", "task.recall_k=10"))
    conveyor, pyg = result["setup"]["conveyor"], result["setup"]["pyg"]
    assert result["task"] == "link" and pyg["loader"] == "LinkNeighborLoader (HeteroData)"
    assert conveyor["model"] == "TypedGNN" and conveyor["parameters"] == pyg["parameters"]
    finals = {name: json.loads((tmp_path / "out" / name / "seed0" / "metrics.json").read_text())["final"]
              for name in SYSTEMS}
    for name, final in finals.items():
        assert 0.6 < final["val_auc"] <= 1 and 0.6 < final["test_auc"] <= 1, (name, final)
        assert 0 < final["test_recall@10"] <= 1 and 0 < final["val_hits@20"] <= 1, (name, final)
