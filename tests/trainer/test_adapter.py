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
                      "trainer.epochs=10", "+model._target_=tests.helpers.OwnModel")
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


class WeightedEdgeIndexModel(torch.nn.Module):
    """A user's module as PyG's loaders feed it, taking edge weights by name."""

    def __init__(self, gcn):
        super().__init__()
        self.gcn = gcn

    def forward(self, x, edge_index, edge_weight=None):
        return self.gcn(x, edge_index, edge_weight=edge_weight)


@pytest.mark.parametrize("adapter", ["per_hop", "edge_index"])
def test_edge_features_reach_the_layers_hop_by_hop_and_merged(adapter, cora):
    """Every neighbour, every node a seed, bsp drawing each hop anew (a node's edges repeat across
    hops, and a parallel edge sits beside its twin): hop by hop (a stock GAT with edge_dim: edge_attr
    per layer) and on the merged subgraph (a module with forward(x, edge_index, edge_weight): each
    edge once, by position) the output is the stock model's full-graph forward with the features."""
    from conveyor.pipeline.batch import BatchCost, PreparedBatch
    from conveyor.trainer.models.adapter import wrap_module
    from conveyor.trainer.models.edges import edge_inputs, model_edges
    edge_index = torch.cat([cora.edge_index(), cora.edge_index()[:, :50]], 1)  # 50 parallel edges
    g = torch.Generator().manual_seed(2)
    features = {"edge_weight": torch.rand(edge_index.size(1), generator=g) + 0.1,
                "edge_attr": torch.randn(edge_index.size(1), 3, generator=g)}
    graph = conveyor.Graph.from_edge_index(edge_index, cora.num_nodes, dedup=False, x=cora.x, edge_attrs=features)
    torch.manual_seed(0)
    if adapter == "per_hop":
        module = GAT(cora.x.size(1), 16, 2, cora.num_classes, edge_dim=3, heads=2).eval()
        full = module(cora.x, edge_index, edge_attr=features["edge_attr"])
    else:
        module = WeightedEdgeIndexModel(GCN(cora.x.size(1), 16, 2, cora.num_classes)).eval()
        full = module(cora.x, edge_index, features["edge_weight"])
    model = wrap_module(module)
    names = edge_inputs(model)
    batch = build_sampler("bsp", graph, [-1, -1], seed=0).sample(torch.arange(cora.num_nodes))
    positions = torch.cat(batch.edge_pos_per_hop)
    prepared = PreparedBatch(batch, graph.x[batch.n_id], None, BatchCost(),
                             edge_attrs={n: graph.edge_attrs[n][positions] for n in names})
    with torch.no_grad():
        out = model(prepared.x, batch.layers(), **model_edges(model, prepared))
    assert names == (("edge_attr",) if adapter == "per_hop" else ("edge_weight",))
    torch.testing.assert_close(out, full[batch.n_id], atol=1e-5, rtol=0)
