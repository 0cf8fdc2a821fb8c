"""Layer-wise evaluation (trainer/loop/layerwise.py) is exact: for every model conveyor runs (its own
SAGE, GCN, GAT, MLP, PyG's GCN, GraphSAGE, GAT, GIN, a user's own), the logits it gives at the
val and test nodes of cora, in batches of 300 (so each layer takes several and most sources are
not targets of their batch), are a full-graph forward's of the same weights, to 1e-4. GCN needs the
whole graph's degrees for that (trainer/models/gcn.py); the others read only their targets' in-edges."""
import re
import sys

import pytest
import torch
import torch.nn.functional as F
from torch_geometric.nn import GAT, GCN, GIN, GraphSAGE

from conveyor.partition import Graph
from conveyor.partition.datasets import load_configured
from conveyor.trainer.loop.layerwise import layerwise_logits
from conveyor.trainer.models.adapter import PerHopGNN
from conveyor.trainer.models.gat import GAT as OneHeadGAT
from conveyor.trainer.models.sampled import build_model
from conveyor.trainer.run import train
from conveyor.trainer.settings import ModelSettings
from tests.helpers import OwnLayerwise, make_config

PYG = {"pyg_gcn": GCN, "pyg_sage": GraphSAGE, "pyg_gat": GAT, "pyg_gin": GIN, "one_head_gat": OneHeadGAT}
GAT_TARGET = {"_target_": "torch_geometric.nn.GAT", "arguments": {"heads": 8}}  # conf/model/gat.yaml


def make_model(name, graph):
    """The model as conveyor builds it, initialised with seed 0, in evaluation mode."""
    torch.manual_seed(0)
    dims = (graph.x.size(1), graph.num_classes)
    if name in PYG:
        return PerHopGNN(PYG[name](dims[0], 32, 2, dims[1], dropout=0.5)).eval()
    if name == "own":
        return OwnLayerwise(dims[0], dims[1], 2).eval()
    settings = ModelSettings(name=name, hidden=64, **(GAT_TARGET if name == "gat" else {}))
    return build_model(settings, dims[0], dims[1], num_layers=2).eval()


@torch.no_grad()
def full_graph_forward(model, graph):
    """Every node's logits from one forward over the whole graph, without layer-wise code: PyG's
    own `forward(x, edge_index)` for a PyG model, each conveyor layer over every edge for conveyor's."""
    x, edge_index = graph.x, graph.edge_index()
    if isinstance(model, PerHopGNN):
        return model.gnn(x, edge_index)
    if isinstance(model, OwnLayerwise):
        return model(x, [(edge_index, graph.num_nodes, graph.num_nodes)] * model.num_layers)
    for i, conv in enumerate(model.layers):
        x = conv(x) if model.kind == "mlp" else conv(x, edge_index)
        x = F.relu(x) if i < model.num_layers - 1 else x
    return x


@pytest.mark.parametrize("name", ["sage", "gcn", "gat", "mlp", "pyg_gcn", "pyg_sage", "pyg_gat", "pyg_gin",
                                  "one_head_gat", "own"])
def test_layerwise_gives_the_full_graph_logits(name, cora):
    model = make_model(name, cora)
    nodes = torch.cat([cora.val_idx, cora.test_idx])
    layerwise = layerwise_logits(model, cora, nodes, 300, torch.device("cpu"))
    full = full_graph_forward(model, cora)[nodes]
    assert full.abs().max() > 0.01  # real logits, not zeros
    torch.testing.assert_close(layerwise, full, atol=1e-4, rtol=0)


def test_a_bare_pyg_model_is_exact_too(cora):
    """mode=compare's reference hands layer-wise evaluation PyG's GCN itself, not wrapped."""
    gcn = make_model("pyg_gcn", cora).gnn
    layerwise = layerwise_logits(gcn, cora, cora.test_idx, 300, torch.device("cpu"))
    torch.testing.assert_close(layerwise, full_graph_forward(PerHopGNN(gcn), cora)[cora.test_idx], atol=1e-4, rtol=0)


def test_a_trained_gcn_scores_what_its_weights_score_on_the_whole_graph(tmp_path, data_root):
    """The issue's case: a cora GCN's reported val/test accuracy is its weights' on the whole graph
    (with the sources' degrees truncated it was 0.514 / 0.513 where the weights score 0.528 / 0.532)."""
    settings = make_config("data=cora", f"data.root={data_root}", "model=gcn", "trainer.epochs=3",
                           f"run.out_dir={tmp_path}")
    result = train(settings)
    assert result.final["inference"] == "layerwise"
    graph = load_configured(settings.data)  # its features normalised, as the run read them
    full = full_graph_forward(result.model.cpu().eval(), graph)
    for split in ("val", "test"):
        idx = getattr(graph, f"{split}_idx")
        assert result.final[f"{split}_acc"] == (full[idx].argmax(1) == graph.y[idx]).double().mean().item()


def test_a_kept_plan_gives_what_a_plan_drawn_each_time_gives(cora, monkeypatch):
    """trainer/loop/plan.py keeps the batches of a graph this small; a big graph's are drawn each time."""
    from conveyor.trainer.loop import plan
    model, nodes = make_model("gcn", cora), torch.cat([cora.val_idx, cora.test_idx])
    kept = plan.LayerwisePlan(cora, nodes, 2, 300)
    monkeypatch.setattr(plan, "KEEP_EDGES", 0)
    drawn = plan.LayerwisePlan(cora, nodes, 2, 300)
    first = layerwise_logits(model, cora, nodes, 300, torch.device("cpu"), plan=kept)
    assert kept.kept is not None and len(kept.kept) == len(kept) == len(drawn) == len(list(drawn))
    assert drawn.kept is None
    again = layerwise_logits(model, cora, nodes, 300, torch.device("cpu"), plan=kept)
    assert torch.equal(first, again)
    assert torch.equal(first, layerwise_logits(model, cora, nodes, 300, torch.device("cpu"), plan=drawn))


@pytest.mark.parametrize("name", ["gcn", "sage"])
def test_the_async_pipeline_draws_and_gathers_what_the_kept_plan_holds(name, cora):
    """`pipeline=async` hands the layer-wise batches to its stage processes (trainer/loop/plan.py's
    PipelinePlan): the same logits, bit for bit, as the plan drawn and kept in this process,
    and again on a second pass."""
    from conveyor.cache import CacheSettings, CacheSpec
    from conveyor.pipeline import PipelineSettings, batch_source
    from conveyor.samplers import SamplerSpec
    from conveyor.trainer.loop.plan import LayerwisePlan, PipelinePlan
    model, nodes = make_model(name, cora), torch.cat([cora.val_idx, cora.test_idx])
    kept = layerwise_logits(model, cora, nodes, 300, torch.device("cpu"), plan=LayerwisePlan(cora, nodes, 2, 300))
    with batch_source(cora, SamplerSpec("bsp", [5, 5]), CacheSpec(CacheSettings(policy="degree", capacity=0.3)),
                      "cpu", PipelineSettings(name="async", threads=1)) as source:
        plan = PipelinePlan(source, cora, nodes, 2, 300)
        for _ in range(2):
            assert torch.equal(layerwise_logits(model, cora, nodes, 300, torch.device("cpu"), plan=plan), kept)
        assert source.stats()["batches"] == 2 * len(plan)


def test_sage_sums_by_a_sparse_product_without_autograd_whatever_the_edge_order(cora):
    """trainer/models/adapter.py's bipartite_layer: evaluation's CSR product gives training's sums."""
    from torch_geometric.nn import SAGEConv

    from conveyor.trainer.models.adapter import bipartite_layer
    torch.manual_seed(0)
    conv, edge_index = SAGEConv(cora.x.size(1), 16), cora.edge_index()
    shuffled = edge_index[:, torch.randperm(edge_index.size(1))]
    targets = cora.num_nodes // 2  # sources beyond the targets, as in a batch
    kept = shuffled[:, shuffled[1] < targets]
    with torch.enable_grad():
        expected = bipartite_layer(conv, cora.x, kept, targets)
    with torch.no_grad():
        torch.testing.assert_close(bipartite_layer(conv, cora.x, kept, targets), expected.detach(), atol=1e-5, rtol=0)


@pytest.mark.parametrize("terminal", [True, False])
def test_evaluation_shows_its_progress_and_its_time(tmp_path, data_root, capsys, monkeypatch, terminal):
    """On a terminal, a tqdm bar over the layer-wise batches; elsewhere (a log file) none; the epoch
    line ends with the evaluation's time either way."""
    monkeypatch.setattr(sys.stderr, "isatty", lambda: terminal)  # tqdm(disable=None) asks the stream
    settings = make_config("data=cora", f"data.root={data_root}", "trainer.epochs=1", "trainer.progress=true",
                           f"run.out_dir={tmp_path}")
    train(settings)
    err = capsys.readouterr().err
    bar = "eval:   0%" in err and "/2 [" in err  # a bar over cora's 2 batches, one per layer
    assert bar == terminal and ("\r" in err) == terminal
    line = next(text for text in err.splitlines() if "epoch 1:" in text)
    assert re.search(r"\| [0-9.]+s \(sample .*\), eval [0-9.]+s$", line), line


def cora_with_edge_features(cora):
    """Cora with a positive weight and a 3-wide feature on every edge, in CSC order, and its edges
    as they were drawn (edge_ids: CSC position -> column), as Graph.from_data makes them."""
    g = torch.Generator().manual_seed(5)
    weight, attr = torch.rand(cora.num_edges, generator=g) + 0.1, torch.randn(cora.num_edges, 3, generator=g)
    return Graph(**{**cora.__dict__, "edge_attrs": {"edge_weight": weight, "edge_attr": attr}})


@pytest.mark.parametrize("name", ["pyg_gcn", "gcn", "pyg_gat_edges"])
def test_layerwise_is_exact_with_the_edge_features_the_model_takes(name, cora):
    """A stock GCN weighs its edges by edge_weight (conveyor's GCN too), a GAT with edge_dim reads
    edge_attr: layer-wise, with the whole graph's weighted degrees, gives the full-graph forward's
    logits with the same edge features; a model given other features than it takes ignores them."""
    graph = cora_with_edge_features(cora)
    torch.manual_seed(0)
    dims = (graph.x.size(1), graph.num_classes)
    if name == "pyg_gat_edges":
        model = PerHopGNN(GAT(dims[0], 32, 2, dims[1], edge_dim=3, heads=2)).eval()
    else:
        model = make_model(name, graph)
    nodes = torch.cat([graph.val_idx, graph.test_idx])
    layerwise = layerwise_logits(model, graph, nodes, 300, torch.device("cpu"))
    edge_index, weight, attr = graph.edge_index(), graph.edge_attrs["edge_weight"], graph.edge_attrs["edge_attr"]
    with torch.no_grad():
        if name == "pyg_gcn":
            full, plain = model.gnn(graph.x, edge_index, edge_weight=weight), model.gnn(graph.x, edge_index)
        elif name == "gcn":
            x = graph.x
            for i, conv in enumerate(model.layers):
                x = conv(x, edge_index, weight)
                x = F.relu(x) if i < model.num_layers - 1 else x
            full, plain = x, full_graph_forward(model, graph)
        else:
            full, plain = model.gnn(graph.x, edge_index, edge_attr=attr), model.gnn(graph.x, edge_index)
    assert (full - plain)[nodes].abs().max() > 1e-2  # the edge features change the logits
    torch.testing.assert_close(layerwise, full[nodes], atol=1e-4, rtol=0)


@pytest.mark.parametrize("pipeline", ["serial", "async"])
def test_fit_trains_a_gcn_on_its_edge_weights(tmp_path, cora, pipeline):
    """conveyor.fit on a PyG Data with edge_weight: the pipeline carries each batch's weights to the
    stock GCN's layers in training, and its evaluation reads them too (lr ~0: the test accuracy is
    the untrained weights' with the edge weights, not without)."""
    from torch_geometric.data import Data

    import conveyor
    graph = cora_with_edge_features(cora)
    test = torch.zeros(graph.num_nodes, dtype=torch.bool)
    test[graph.test_idx] = True
    data = Data(x=graph.x, y=graph.y, edge_index=graph.edge_index(), edge_weight=graph.edge_attrs["edge_weight"],
                train_mask=~test, test_mask=test)
    torch.manual_seed(0)
    model = GCN(graph.x.size(1), 16, 2, graph.num_classes, dropout=0.0)
    weights = []
    hook = model.convs[0].register_forward_pre_hook(  # how training calls the conv (trainer/models/gcn.py)
        lambda conv, args, kwargs: weights.append(args[2] if len(args) > 2 else kwargs.get("edge_weight")),
        with_kwargs=True)
    result = conveyor.fit(data, model, fanouts=[5, 5], batch_size=512, epochs=1, lr=1e-12, seed=0,
                          out_dir=tmp_path, overrides=[f"pipeline={pipeline}", "trainer.progress=false"])
    hook.remove()
    # 1708 training nodes: 4 batches, each with its edges' weights (before them, conveyor.load's
    # check that the model rebuilds calls it once on a small graph of its own, without)
    assert len(weights) == 5 and all(w is not None and w.numel() > 0 for w in weights[1:])
    with torch.no_grad():
        weighted, plain = (model(data.x, data.edge_index, edge_weight=w) for w in (data.edge_weight, None))
    accuracy = {name: float((out[test].argmax(1) == data.y[test]).float().mean())
                for name, out in (("weighted", weighted), ("plain", plain))}
    assert accuracy["weighted"] != accuracy["plain"]
    assert result.final["test_acc"] == pytest.approx(accuracy["weighted"], abs=1e-6)  # float32 mean
