"""`task=link`: the edges split as PyG's RandomLinkSplit (the same tensors, no leakage), ROC-AUC
and Hits@K as sklearn and OGB compute them, a GraphSAGE encoder with a dot-product decoder that
learns cora's links, its figures in metrics.json and TensorBoard, a resume and the async pipeline
replaying a serial run, `conveyor.fit(task="link")`, and bad settings refused.
Data-parallel link training: test_distributed.py."""
import json
import random

import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.transforms import RandomLinkSplit

import conveyor
from conveyor.core import ConveyorError
from conveyor.trainer.link_split import split_links
from conveyor.trainer.loop.link import hits_at_k, roc_auc
from conveyor.trainer.run import train
from tests.helpers import make_config

# Cora's links: 4488 training links, 256 a batch (cora's default), learnt fast enough for a test at
# lr 0.03 without weight decay or input dropout: two epochs reach a val and test AUC near 0.8
# (0.90 takes ~20 epochs: docs/accuracy.md).
CORA_LINK = ["task=link", "data=cora", "trainer.eval_every=1", "model.input_dropout=0", "trainer.weight_decay=0",
             "trainer.lr=0.03"]


def pairs(edge_index) -> set:
    return set(map(tuple, edge_index.t().tolist()))


def test_the_split_is_pygs_random_link_split_and_leaks_nothing(cora):
    split = split_links(cora, 0.05, 0.1, seed=3)
    data = Data(edge_index=cora.edge_index(), num_nodes=cora.num_nodes)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(3)
        random.seed(3)
        train_data, val_data, test_data = RandomLinkSplit(0.05, 0.1, is_undirected=True,
                                                          add_negative_train_samples=False)(data)
    assert torch.equal(split.train_links, train_data.edge_label_index)
    assert torch.equal(split.val_links, val_data.edge_label_index)
    assert torch.equal(split.test_links, test_data.edge_label_index)
    assert pairs(split.train_graph.edge_index()) == pairs(train_data.edge_index)
    assert pairs(split.test_graph.edge_index()) == pairs(test_data.edge_index)
    train_edges, graph_edges = pairs(split.train_graph.edge_index()), pairs(cora.edge_index())
    for links, labels, seen in ((split.val_links, split.val_labels, train_edges),
                                (split.test_links, split.test_labels, pairs(split.test_graph.edge_index()))):
        positives, negatives = pairs(links[:, labels == 1]), pairs(links[:, labels == 0])
        assert len(positives) == len(negatives) > 0
        assert positives <= graph_edges and not (positives | pairs(links[:, labels == 1].flip(0))) & seen
        assert not negatives & graph_edges  # negatives are no edge of the whole graph
    assert pairs(split.train_links) <= train_edges and len(train_edges) == 2 * split.train_links.size(1)
    assert torch.equal(split_links(cora, 0.05, 0.1, seed=3).val_links, split.val_links)
    assert not torch.equal(split_links(cora, 0.05, 0.1, seed=4).val_links, split.val_links)


def test_auc_and_hits_are_sklearns_and_ogbs():
    from ogb.linkproppred import Evaluator
    from sklearn.metrics import roc_auc_score

    g = torch.Generator().manual_seed(0)
    labels = (torch.rand(500, generator=g) < 0.4).float()
    scores = torch.randint(0, 40, (500,), generator=g).float() + labels * 5  # many ties
    assert roc_auc(scores, labels) == pytest.approx(roc_auc_score(labels.numpy(), scores.numpy()), abs=1e-12)
    evaluator = Evaluator(name="ogbl-ddi")  # Hits@20
    expected = evaluator.eval({"y_pred_pos": scores[labels == 1], "y_pred_neg": scores[labels == 0]})["hits@20"]
    assert hits_at_k(scores, labels, 20) == pytest.approx(expected)
    assert roc_auc(torch.tensor([0.1, 0.9]), torch.tensor([0.0, 1.0])) == 1.0


@pytest.fixture(scope="module")
def cora_runs(data_root, tmp_path_factory):
    """Two epochs straight through the async pipeline; one serial epoch, then a serial resume to two."""
    tmp = tmp_path_factory.mktemp("link_cora")
    common = [*CORA_LINK, f"data.root={data_root}", "trainer.epochs=2"]
    straight = train(make_config(*common, "pipeline=async", f"run.out_dir={tmp / 'straight'}"))
    train(make_config(*common, "pipeline=serial", "trainer.epochs=1", f"run.out_dir={tmp / 'resumed'}"))
    resumed = train(make_config(*common, "pipeline=serial", "run.resume=true", f"run.out_dir={tmp / 'resumed'}"))
    return {"straight": straight, "resumed": resumed, "dir": tmp}


def test_a_sage_encoder_learns_coras_links_and_reports_them(cora_runs):
    result, out = cora_runs["straight"], cora_runs["dir"] / "straight"
    final = result.final
    assert final["test_auc"] > 0.75 and final["val_auc"] > 0.75, final  # random scores: 0.5
    assert 0 < final["test_hits@20"] <= 1 and final["best_epoch"] in (1, 2)
    assert final["test_auc_at_best_val"] == result.history[final["best_epoch"] - 1]["test_auc"]
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["final"] == pytest.approx(final)
    first = metrics["epochs"][0]
    assert first["throughput_seeds_per_s"] * first["epoch_time_s"] == pytest.approx(2 * 4488)  # + 1 negative each
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    events = EventAccumulator(str(out)).Reload()
    assert [e.value for e in events.Scalars("epoch/test_auc")] == pytest.approx(
        [e["test_auc"] for e in result.history])
    assert (out / "checkpoints" / "best.pt").exists()


def test_a_resumed_serial_run_replays_the_uninterrupted_async_one(cora_runs):
    """The split, the batches' negatives and dropout come from the run's seed and streams, and the
    async pipeline draws the batches the serial one draws: the same batches, so the same figures up
    to the CPU kernels' float rounding (as tests/trainer/test_training.py)."""
    straight, resumed = cora_runs["straight"].history, cora_runs["resumed"].history
    assert len(straight) == len(resumed) == 2
    for one, two in zip(straight, resumed):
        for key in ("loss", "train_acc", "val_auc", "test_auc", "test_hits@20"):
            assert two[key] == pytest.approx(one[key], rel=1e-5, abs=1e-4), key


def test_fit_learns_the_links_of_a_pyg_data(tmp_path):
    """Eight communities of 25 nodes, linked only inside, features saying the community with noise:
    a GraphSAGE from fit(task="link") tells their held-out links from random pairs (an eighth of
    which fall inside a community: the best AUC is about 0.94)."""
    g = torch.Generator().manual_seed(0)
    community = torch.arange(200) // 25
    src, dst = torch.randint(0, 25, (2, 1200), generator=g)
    base = torch.randint(0, 8, (1200,), generator=g) * 25
    edges = torch.stack([src + base, dst + base])
    edges = torch.cat([edges, edges.flip(0)], dim=1)
    x = torch.nn.functional.one_hot(community, 8).float() + 0.3 * torch.randn(200, 8, generator=g)
    data = Data(x=x, edge_index=edges, num_nodes=200)
    result = conveyor.fit(data, task="link", epochs=4, fanouts=[5, 5], batch_size=128, out_dir=tmp_path,
                          overrides=["pipeline=serial", "model.hidden=16", "trainer.lr=0.01", "trainer.progress=false"])
    assert result.final["test_auc"] > 0.85, result.final


@pytest.mark.parametrize("overrides, words", [
    (["task.val_ratio=0.5", "task.test_ratio=0.5"], "leaving none to train on"),
    (["trainer.inference=sampled"], "trainer.inference=sampled is"),
    (["task=edge"], "unknown task option"),
])
def test_bad_link_settings_are_refused(data_root, tmp_path, overrides, words):
    with pytest.raises(ConveyorError, match=words):
        train(make_config(*CORA_LINK, f"data.root={data_root}", f"run.out_dir={tmp_path}", "trainer.epochs=1",
                          *overrides))


def test_fit_link_refuses_a_node_loss():
    with pytest.raises(ConveyorError, match="loss= is for node classification"):
        conveyor.fit(Data(x=torch.ones(3, 1), edge_index=torch.tensor([[0], [1]])), task="link",
                     loss=torch.nn.functional.mse_loss)
