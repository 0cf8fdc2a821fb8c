"""trainer/models/sparse.py: the built-in SAGE and GCN layers sum by a sparse-matrix product and
give what PyG's SAGEConv and GCNConv give, values and gradients, whatever the order of the edges,
with self-loops, parallel edges, weights and targets without in-edges; relu and dropout in one
(trainer/models/dropout.py) give relu-then-dropout's values and gradients from the same draws; a
kept layer-wise plan builds each batch's structure once; benchmarks/train_step.py runs small."""
import json
import statistics
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from torch_geometric.nn import GCN, GCNConv, GraphSAGE, SAGEConv

from conveyor.samplers import build_sampler
from conveyor.trainer.loop.layerwise import layerwise_logits
from conveyor.trainer.loop.plan import LayerwisePlan
from conveyor.trainer.models import sparse
from conveyor.trainer.models.adapter import PerHopGNN
from conveyor.trainer.models.dropout import dropout, relu_dropout
from conveyor.trainer.models.sampled import SampledGNN
from conveyor.trainer.models.sparse import adjacency, gcn_batch_layer, sage_layer
from tests.helpers import REPO

NUM_SRC, NUM_DST = 60, 25


def awkward_edges(order: str, seed: int = 0) -> torch.Tensor:
    """Edges into the first NUM_DST of NUM_SRC nodes: parallel edges, self-loops, targets 3 and 7
    without in-edges; `order`: by target ("sorted"), each target's run together but the runs out
    of order ("runs", as bsp lists a hop), or shuffled."""
    gen = torch.Generator().manual_seed(seed)
    dst = torch.randint(0, NUM_DST, (300,), generator=gen)
    dst = dst[(dst != 3) & (dst != 7)]
    src = torch.randint(0, NUM_SRC, (dst.numel(),), generator=gen)
    src[:10], dst[:10] = dst[:10], dst[:10]  # self-loops
    src, dst = torch.cat([src, src[10:20]]), torch.cat([dst, dst[10:20]])  # parallel edges
    by_target = torch.argsort(dst, stable=True)
    if order == "runs":
        targets = torch.randperm(NUM_DST, generator=gen)
        by_target = torch.argsort(torch.argsort(targets)[dst], stable=True)
    elif order == "shuffled":
        by_target = torch.randperm(dst.numel(), generator=gen)
    return torch.stack([src[by_target], dst[by_target]])


def grads(out: torch.Tensor, *tensors) -> list:
    weights = torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view_as(out)
    return torch.autograd.grad((out * weights).sum(), tensors)


@pytest.mark.parametrize("order", ["sorted", "runs", "shuffled"])
def test_the_structure_is_the_edges_grouped_by_target_in_their_order(order):
    """Grouped by target, each target's in-edges in the order given (what a stable sort gives)."""
    edge_index = awkward_edges(order)
    adj = adjacency(edge_index, NUM_DST, NUM_SRC)
    dst = edge_index[1]
    expected = torch.argsort(dst, stable=True)  # each target's in-edges, in the order given
    assert torch.equal(adj.in_slot_order(torch.arange(dst.numel())), expected)
    assert torch.equal(adj.col, edge_index[0][expected])
    assert torch.equal(adj.counts(), torch.bincount(dst, minlength=NUM_DST))
    assert torch.equal(adj.edge_index(), edge_index[:, expected])


@pytest.mark.parametrize("own_row", [False, True])
def test_own_entries_join_each_target(own_row):
    adj = adjacency(awkward_edges("runs"), NUM_DST, NUM_SRC)
    values = torch.rand(adj.col.numel(), dtype=torch.float64)
    own = torch.rand(NUM_DST, dtype=torch.float64)
    dense = torch.zeros(NUM_DST, NUM_SRC, dtype=torch.float64)
    dense.index_put_((adj.rows(), adj.col), values, accumulate=True)
    eye = torch.zeros(NUM_DST, NUM_SRC, dtype=torch.float64)
    eye[torch.arange(NUM_DST), torch.arange(NUM_DST)] = own
    got = adj.matrix(values, own, own_row=own_row).to_dense()
    expected = torch.stack([dense, eye], 1).view(2 * NUM_DST, NUM_SRC) if own_row else dense + eye
    torch.testing.assert_close(got, expected, rtol=0, atol=0)


@pytest.mark.parametrize("order", ["sorted", "runs", "shuffled"])
@pytest.mark.parametrize("in_dim,out_dim", [(8, 16), (16, 5)])  # widening: side by side; narrowing: lin_l first
def test_sage_layer_is_sageconvs(order, in_dim, out_dim):
    torch.manual_seed(0)
    conv = SAGEConv(in_dim, out_dim).double()
    x = torch.randn(NUM_SRC, in_dim, dtype=torch.float64, requires_grad=True)
    edge_index = awkward_edges(order)
    expected = conv((x, x[:NUM_DST]), edge_index)
    got = sage_layer(conv, x, edge_index, NUM_DST)
    torch.testing.assert_close(got, expected)
    params = (x, *conv.parameters())
    for a, b in zip(grads(got, *params), grads(expected, *params)):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("order", ["sorted", "runs", "shuffled"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("in_dim,out_dim", [(8, 16), (16, 5)])  # the product before or after lin
def test_gcn_batch_layer_is_gcnconvs_targets(order, weighted, in_dim, out_dim):
    torch.manual_seed(1)
    conv = GCNConv(in_dim, out_dim).double()
    x = torch.randn(NUM_SRC, in_dim, dtype=torch.float64, requires_grad=True)
    edge_index = awkward_edges(order)
    weight = torch.rand(edge_index.size(1), dtype=torch.float64) + 0.5 if weighted else None
    expected = conv(x, edge_index, weight)[:NUM_DST]
    got = gcn_batch_layer(conv, x, edge_index, NUM_DST, weight)
    torch.testing.assert_close(got, expected)
    params = (x, *conv.parameters())
    for a, b in zip(grads(got, *params), grads(expected, *params)):
        torch.testing.assert_close(a, b)


def test_a_conv_set_up_otherwise_runs_pygs_own_forward():
    """Sums this file does not cover (max aggregation, improved GCN) are PyG's, not a near miss."""
    torch.manual_seed(2)
    x, edge_index = torch.randn(NUM_SRC, 8), awkward_edges("runs")
    conv = SAGEConv(8, 4, aggr="max")
    torch.testing.assert_close(sage_layer(conv, x, edge_index, NUM_DST), conv((x, x[:NUM_DST]), edge_index))
    improved = GCNConv(8, 4, improved=True)
    torch.testing.assert_close(gcn_batch_layer(improved, x, edge_index, NUM_DST),
                               improved(x, edge_index)[:NUM_DST])


@pytest.mark.parametrize("name,stock", [("sage", GraphSAGE), ("gcn", GCN)])
def test_the_built_in_models_train_as_pygs_stock_layers_on_a_batch(name, stock, cora):
    """A bsp batch through conveyor's SampledGNN and PyG's GraphSAGE/GCN hop by hop, the same
    weights: the same loss and the same gradients (dropout off: its draws are tested below)."""
    torch.manual_seed(3)
    ours = SampledGNN(name, cora.x.size(1), 16, 7, 2, dropout=0.0).double()
    theirs = PerHopGNN(stock(cora.x.size(1), 16, 2, 7, dropout=0.0).double())
    theirs.gnn.convs.load_state_dict(ours.layers.state_dict())
    batch = build_sampler("bsp", cora, [10, 5], seed=0).sample(cora.train_idx)
    x, y = cora.x[batch.n_id].double(), cora.y[batch.n_id[:cora.train_idx.numel()]]
    losses = [F.cross_entropy(model(x, list(batch.layers())), y) for model in (ours, theirs)]
    torch.testing.assert_close(losses[0], losses[1])
    for a, b in zip(torch.autograd.grad(losses[0], list(ours.layers.parameters())),
                    torch.autograd.grad(losses[1], list(theirs.gnn.convs.parameters()))):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("p", [0.0, 0.3, 0.5, 1.0])
@pytest.mark.parametrize("training", [True, False])
def test_relu_dropout_is_relu_then_dropout_from_the_same_draws(p, training):
    x = torch.randn(300, 70, requires_grad=True)
    torch.manual_seed(4)
    got = relu_dropout(x, p, training)
    torch.manual_seed(4)
    expected = dropout(F.relu(x), p, training)
    assert torch.equal(got, expected)
    for a, b in zip(grads(got, x), grads(expected, x)):
        assert torch.equal(a, b)
    if training and 0 < p < 1:  # and a fair share dropped: the draws are dropout's
        dropped = ((x > 0) & (got == 0)).sum() / (x > 0).sum()
        assert abs(dropped.item() - p) < 0.02


def test_a_kept_plan_builds_each_batchs_structure_once(cora, monkeypatch):
    """Layer-wise evaluation's second pass over a kept plan reuses the structures of the first."""
    model = SampledGNN("sage", cora.x.size(1), 16, 7, 2).eval()
    nodes = torch.cat([cora.val_idx, cora.test_idx])
    plan = LayerwisePlan(cora, nodes, 2, 300)
    first = layerwise_logits(model, cora, nodes, 300, torch.device("cpu"), plan=plan)
    assert plan.kept and all(b.adjacency is not None and b.edge_index is None for b in plan.kept)
    built = []
    monkeypatch.setattr(sparse, "adjacency", lambda *a: built.append(a) or adjacency(*a))
    again = layerwise_logits(model, cora, nodes, 300, torch.device("cpu"), plan=plan)
    assert built == [] and torch.equal(first, again)


def test_train_step_benchmark(tmp_path, synthetic_small, data_root):
    out = tmp_path / "train_step.json"
    proc = subprocess.run([sys.executable, "-m", "benchmarks.train_step", "--data-root", str(data_root), "--scale",
                           "0.002", "--batch-size", "64", "--fanouts", "5,5", "--hidden", "16", "--batches", "2",
                           "--threads", "1", "--rounds", "3", "--out", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(out.read_text())
    assert [(r["model"], r["threads"]) for r in report["rows"]] == [("sage", 1), ("gcn", 1)]
    for row in report["rows"]:
        assert row["max_output_gap"] <= 1e-4 and len(row["ratios"]) == 3
        assert row["ratio"] == statistics.median(row["ratios"]) and "load_1min" in row
    assert report["meta"]["command"] in out.with_suffix(".md").read_text()
