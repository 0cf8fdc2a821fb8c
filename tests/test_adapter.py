"""Models by `model._target_`: PyG's BasicGNN family run hop by hop (trainer/models/adapter.py), GAT on
cora, and a user's own module through the same contract."""
import pytest
import torch
from torch_geometric.nn import GAT, GCN, GIN, GraphSAGE

import conveyor
from conveyor.core import ConveyorError
from conveyor.samplers import build_sampler
from conveyor.trainer.models.adapter import PerHopGNN
from conveyor.trainer.run import train
from tests.helpers import OwnModel, make_config

STOCK = {"sage": GraphSAGE, "gcn": GCN, "gat": GAT, "gin": GIN}




def stock(name, graph):
    torch.manual_seed(0)
    kwargs = {"heads": 4} if name == "gat" else {}
    return STOCK[name](graph.x.size(1), 32, 2, graph.num_classes, dropout=0.5, **kwargs).eval()


@pytest.mark.parametrize("name, seeds", [("sage", "some"), ("gat", "some"), ("gin", "some"),
                                         ("sage", "all"), ("gcn", "all"), ("gat", "all"), ("gin", "all")])
def test_hop_by_hop_equals_the_stock_full_forward(name, seeds, cora):
    """With every neighbour taken (fanout -1) the seeds' L-hop neighbourhoods are complete. GCN's
    normalisation reads the sources' degrees, complete only when every node is a seed."""
    gnn = stock(name, cora)
    ids = cora.train_idx[:64] if seeds == "some" else torch.arange(cora.num_nodes)
    batch = build_sampler("bsp", cora, [-1, -1], seed=0).sample(ids)
    with torch.no_grad():
        hop_by_hop = PerHopGNN(gnn)(cora.x[batch.n_id], batch.layers())
        full = gnn(cora.x, cora.edge_index())[ids]
    assert hop_by_hop.shape == full.shape
    assert torch.allclose(hop_by_hop, full, atol=1e-5), (hop_by_hop - full).abs().max()


def test_model_gat_trains_on_cora(tmp_path, data_root):
    cfg = make_config("data=cora", "model=gat", f"data.root={data_root}", f"run.out_dir={tmp_path / 'gat'}")
    result = train(cfg)
    assert isinstance(result.model, PerHopGNN) and isinstance(result.model.gnn, GAT)
    assert result.final["test_acc"] >= 0.75, result.final


def test_a_users_module_by_target_and_by_fit(tmp_path, data_root, cora):
    cfg = make_config("data=cora", f"data.root={data_root}", f"run.out_dir={tmp_path / 'own'}",
                      "trainer.epochs=10", "+model._target_=tests.test_adapter.OwnModel")
    by_target = train(cfg)
    assert type(by_target.model).__name__ == "OwnModel"  # Hydra imports the module again: not the same class object
    assert by_target.model.lins[0].out_features == 64  # model.hidden of cora.yaml, as hidden_channels
    torch.manual_seed(0)
    by_fit = conveyor.fit(cora, OwnModel(cora.x.size(1), cora.num_classes, 2), fanouts=[10, 10],
                          epochs=20, batch_size=64, lr=0.01, out_dir=str(tmp_path / "fit"),
                          overrides=["trainer.progress=false"])
    for result in (by_target, by_fit):
        assert result.history[-1]["loss"] < 0.9 * result.history[0]["loss"]
        assert result.final["test_acc"] >= 0.6, result.final


def test_a_target_that_cannot_be_built_says_so(tmp_path, data_root):
    cfg = make_config("data=cora", f"data.root={data_root}", f"run.out_dir={tmp_path / 'bad'}",
                      "+model._target_=torch_geometric.nn.GraphSAGE", "+model.no_such_argument=1")
    with pytest.raises(ConveyorError, match=r"cannot build model._target_=torch_geometric.nn.GraphSAGE: "
                                            r".*no_such_argument"):
        train(cfg)
