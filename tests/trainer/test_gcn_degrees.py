"""model.gcn_degrees=graph (trainer/models/gcn.py): with every neighbour, conveyor's GCN trains exactly as
full-batch GCN (Kipf and Welling's, PyG's examples/gcn.py) over the whole graph: the same loss every
epoch, from the same initial weights (dropout off, so that no random mask differs)."""
import pytest
import torch
import torch.nn.functional as F

from conveyor.core import ConveyorError
from conveyor.partition.datasets import load_configured
from conveyor.trainer.models.sampled import build_model
from conveyor.trainer.run import train
from tests.helpers import make_config

GCN_FULL = ("data=cora", "model=gcn", "trainer.epochs=5", "model.dropout=0", "model.input_dropout=0")


def full_batch_losses(settings, graph, epochs):
    """Full-batch GCN over the whole graph, PyG's own GCNConv forward, initialised as conveyor's run."""
    torch.manual_seed(settings.run.seed)
    model = build_model(settings.model, graph.x.size(1), int(graph.num_classes), 2)
    optimizer = torch.optim.Adam(model.parameters(), lr=settings.trainer.lr, weight_decay=settings.trainer.weight_decay)
    edge_index, losses = graph.edge_index(), []
    for _ in range(epochs):
        x = F.relu(model.layers[0](graph.x, edge_index))
        loss = F.cross_entropy(model.layers[1](x, edge_index)[graph.train_idx], graph.y[graph.train_idx].long())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def test_gcn_with_graph_degrees_trains_as_full_batch_gcn(tmp_path, data_root):
    settings = make_config(*GCN_FULL, f"data.root={data_root}", f"run.out_dir={tmp_path}")
    assert settings.model.gcn_degrees == "graph" and settings.sampler.fanouts == [-1, -1]  # the cora_gcn defaults
    history = train(settings).history
    expected = full_batch_losses(settings, load_configured(settings.data), 5)
    assert [e["loss"] for e in history] == pytest.approx(expected, rel=1e-5)


def test_batch_degrees_do_not(tmp_path, data_root):
    """The default elsewhere: GCNConv's own normalisation over the batch's edges, whose outer sources
    count only the edges into them that the batch holds."""
    settings = make_config(*GCN_FULL, "model.gcn_degrees=batch", f"data.root={data_root}", f"run.out_dir={tmp_path}")
    history = train(settings).history
    expected = full_batch_losses(settings, load_configured(settings.data), 5)
    assert abs(history[-1]["loss"] - expected[-1]) > 1e-3


def test_graph_degrees_need_a_gcn(tmp_path, data_root):
    with pytest.raises(ConveyorError, match="model.gcn_degrees=graph .* model=sage is no GCN; use model=gcn"):
        make_config("data=cora", "model=sage", "model.gcn_degrees=graph")
    settings = make_config("data=cora", "model._target_=torch_geometric.nn.GAT", "model.gcn_degrees=graph",
                           f"data.root={data_root}", f"run.out_dir={tmp_path}")
    with pytest.raises(ConveyorError, match="model.gcn_degrees=graph .* has no GCNConv"):
        train(settings)
