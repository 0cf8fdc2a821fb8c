"""`conveyor.load` and `conveyor.predict` for every kind of run `fit` and the command line make:
node models (conveyor's sage and gcn, GAT, a PyG BasicGNN, a module of one's own), task=link
(dot and mlp decoders, an encoder of one's own), typed graphs (R-GCN, the built-in to_hetero
GraphSAGE, a to_hetero module of one's own). Each run trains one epoch on a tiny graph; the model
loaded back gives the trained model's outputs, and a tampered record is refused field by field."""
import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.nn import GraphSAGE, HeteroConv, SAGEConv, to_hetero

import conveyor
from conveyor.core import ConveyorError
from conveyor.partition.datasets.synthetic_mag import generate
from conveyor.trainer.models.decoder import LinkModel
from conveyor.trainer.models.hetero import TypedGNN
from conveyor.trainer.models.sampled import SampledGNN
from conveyor.trainer.run import train
from tests.helpers import EdgeIndexSAGE, make_config

FAST = ["trainer.progress=false", "pipeline=serial"]


class MySAGE(GraphSAGE):
    """A class of one's own (a subclass: conveyor does not rebuild it by name), layer-wise capable."""


class HeteroSAGE(torch.nn.Module):
    """A typed module of one's own with PyG's heterogeneous forward (run on each batch's subgraph)."""

    def __init__(self, metadata):
        super().__init__()
        self.conv = HeteroConv({e: SAGEConv((-1, -1), 4) for e in metadata[1]}, aggr="sum")

    def forward(self, x_dict, edge_index_dict):
        return self.conv(x_dict, edge_index_dict)


def fit(graph, model, out_dir, **keywords):
    torch.manual_seed(0)
    options = {"epochs": 1, "fanouts": [4, 4], "batch_size": 64, "out_dir": out_dir, **keywords}
    overrides = FAST + ["model.hidden=16"] + options.pop("overrides", [])
    return conveyor.fit(graph, model, overrides=overrides, **options).model


def last(out_dir):
    return out_dir / "checkpoints" / "last.pt"  # the model fit returns: the last epoch's


@pytest.fixture(scope="module")
def node_runs(cora, tmp_path_factory):
    root, features, classes = tmp_path_factory.mktemp("node"), cora.x.size(1), cora.num_classes
    models = {"sage": "sage", "gcn": "gcn", "gat": "gat", "pyg": GraphSAGE(features, 16, 2, classes),
              "own": EdgeIndexSAGE(features, classes)}
    return {name: (fit(cora, model, root / name, batch_size=512), root / name) for name, model in models.items()}


@pytest.mark.parametrize("name", ["sage", "gcn", "gat", "pyg"])
def test_a_node_run_comes_back_alone_with_its_outputs(node_runs, cora, name):
    trained, out = node_runs[name]
    loaded = conveyor.load(last(out))
    assert not loaded.training and (name not in ("sage", "gcn") or isinstance(loaded, SampledGNN))
    assert torch.equal(conveyor.predict(loaded, cora), conveyor.predict(trained, cora))


def test_a_node_model_of_ones_own_is_named_then_loaded_into(node_runs, cora):
    trained, out = node_runs["own"]
    with pytest.raises(ConveyorError, match=r"a EdgeIndexSAGE, which conveyor does not build again.*"
                                            r"model=EdgeIndexSAGE\(...\)"):
        conveyor.load(out)
    given = EdgeIndexSAGE(cora.x.size(1), cora.num_classes)
    assert conveyor.load(last(out), model=given) is given
    assert torch.equal(conveyor.predict(given, cora), conveyor.predict(trained, cora))


def communities(seed=0):
    """Eight communities of 25 nodes, linked only inside (test_link_task.py's)."""
    g = torch.Generator().manual_seed(seed)
    community = torch.arange(200) // 25
    src, dst = torch.randint(0, 25, (2, 1200), generator=g)
    base = torch.randint(0, 8, (1200,), generator=g) * 25
    edges = torch.stack([src + base, dst + base])
    x = torch.nn.functional.one_hot(community, 8).float() + 0.3 * torch.randn(200, 8, generator=g)
    return Data(x=x, edge_index=torch.cat([edges, edges.flip(0)], dim=1), num_nodes=200)


@pytest.fixture(scope="module")
def link_runs(tmp_path_factory):
    root, data = tmp_path_factory.mktemp("link"), communities()
    runs = {decoder: fit(data, None, root / decoder, task="link", batch_size=256,
                         overrides=[f"task.decoder={decoder}"]) for decoder in ("dot", "mlp")}
    own = MySAGE(8, 16, 2, 16)
    fit(data, own, root / "own", task="link", batch_size=256, overrides=["task.decoder=mlp"])
    return data, root, runs, own


@pytest.mark.parametrize("decoder", ["dot", "mlp"])
def test_a_link_run_comes_back_as_its_encoder_and_decoder(link_runs, decoder):
    data, root, runs, _ = link_runs
    trained, loaded = runs[decoder], conveyor.load(last(root / decoder))
    assert isinstance(loaded, LinkModel) and loaded.decoder_name == decoder
    assert loaded.state_dict().keys() == trained.state_dict().keys()
    assert all(torch.equal(v, trained.state_dict()[k]) for k, v in loaded.state_dict().items())
    pairs = torch.tensor([[0, 5, 30, 199], [1, 7, 180, 3]])
    embeddings = conveyor.predict(loaded, data)
    assert embeddings.shape == (200, 16) and torch.equal(embeddings, conveyor.predict(trained, data))
    scores = conveyor.predict(loaded, data, pairs=pairs)
    assert torch.equal(scores, conveyor.predict(trained, data, pairs=pairs))
    with torch.no_grad():  # the decoder's own score of the embeddings
        expected = trained.eval().score(embeddings, pairs)
    assert scores.shape == (4,) and torch.allclose(scores, expected, atol=1e-6)


def test_a_link_encoder_of_ones_own_is_named_then_loaded_into(link_runs):
    data, root, _, own = link_runs
    with pytest.raises(ConveyorError, match=r"a MySAGE \(the encoder of a task=link run\).*model=MySAGE\(\.\.\.\)\);"
                                            r" conveyor builds the decoder around it"):
        conveyor.load(root / "own")
    given = MySAGE(8, 16, 2, 16)
    loaded = conveyor.load(last(root / "own"), model=given)
    assert isinstance(loaded, LinkModel) and loaded.decoder_name == "mlp" and loaded.encoder.gnn is given
    assert all(torch.equal(v, own.state_dict()[k]) for k, v in given.state_dict().items())
    pairs = torch.tensor([[0, 50], [1, 60]])
    saved = torch.load(last(root / "own"), weights_only=True)["model"]  # the trainer's own keys
    assert all(torch.equal(v, saved[k]) for k, v in loaded.state_dict().items())
    assert conveyor.predict(loaded, data, pairs=pairs).shape == (2,)


@pytest.fixture(scope="module")
def typed_runs(tmp_path_factory):
    root, data = tmp_path_factory.mktemp("typed"), generate(0.0005, 0, num_classes=4).to_data()
    own = to_hetero(GraphSAGE((-1, -1), 16, 2, 4), data.metadata(), aggr="sum")
    models = {"rgcn": "rgcn", "sage": "sage", "own": own, "conv": HeteroSAGE(data.metadata())}
    return data, {name: (fit(data, model, root / name, batch_size=128, fanouts=[3] if name == "conv" else [3, 3]),
                         root / name) for name, model in models.items()}


@pytest.mark.parametrize("name", ["rgcn", "sage"])
def test_a_typed_built_in_comes_back_alone_with_its_outputs(typed_runs, name):
    data, runs = typed_runs
    trained, out = runs[name]
    loaded = conveyor.load(last(out))
    assert isinstance(loaded, TypedGNN) and loaded.schema == trained.schema and not loaded.training
    assert all(torch.equal(v, trained.state_dict()[k]) for k, v in loaded.state_dict().items())
    record = torch.load(last(out), weights_only=True)["module"]
    assert record["init"]["node_types"] == ["paper", "author", "institution", "field_of_study"]
    papers = conveyor.predict(loaded, data)  # the type it was trained to label
    assert papers.shape == (data["paper"].num_nodes, 4) and torch.equal(papers, conveyor.predict(trained, data))
    with torch.no_grad():  # PyG's heterogeneous forward of the model inside, on the whole graph
        whole = loaded.inner(data.x_dict, data.edge_index_dict)
    # float32 sums in another order: an error relative to the outputs' scale (here up to ~60), not 1e-5
    scale = whole["paper"].abs().max().item()
    torch.testing.assert_close(papers, whole["paper"], rtol=1e-5, atol=1e-6 * scale)
    authors = conveyor.predict(loaded, data, torch.arange(5), node_type="author", layers=1)
    assert authors.shape == (5, 16)


def test_a_to_hetero_module_of_ones_own_is_named_then_loaded_into(typed_runs):
    data, runs = typed_runs
    trained, out = runs["own"]
    with pytest.raises(ConveyorError, match=r"to_hetero \(a torch.fx GraphModule\).*model=to_hetero\(YourGNN"):
        conveyor.load(out)
    given = to_hetero(GraphSAGE((-1, -1), 16, 2, 4), data.metadata(), aggr="sum")  # built as trained, never run
    assert conveyor.load(last(out), model=given) is given
    assert given.state_dict().keys() == trained.state_dict().keys()
    assert all(torch.equal(v, trained.state_dict()[k]) for k, v in given.state_dict().items())
    assert torch.equal(conveyor.predict(given, data), conveyor.predict(trained, data))
    with pytest.raises(ConveyorError, match=r"do not fit the GraphModule given"):
        conveyor.load(out, model=to_hetero(GraphSAGE((-1, -1), 8, 2, 4), data.metadata(), aggr="sum"))


def test_a_record_of_an_earlier_conveyor_loads_into_the_users_module(typed_runs, tmp_path):
    """Before records kept their parts, a to_hetero run's weights were the wrapper's (inner.module.*)."""
    data, runs = typed_runs
    trained, out = runs["own"]

    def flat(record):
        state = torch.load(last(out), weights_only=True)["model"]
        record.clear()
        record.update({"library": None, "class": "TypedGNN", "init": None, "state": state})
    given = to_hetero(GraphSAGE((-1, -1), 16, 2, 4), data.metadata(), aggr="sum")
    conveyor.load(tampered(last(out), tmp_path, flat), model=given)
    assert all(torch.equal(v, trained.state_dict()[k]) for k, v in given.state_dict().items())


def test_a_heterodata_module_of_ones_own_is_named_then_loaded_into(typed_runs):
    data, runs = typed_runs
    trained, out = runs["conv"]
    with pytest.raises(ConveyorError, match=r"a HeteroSAGE, which conveyor does not build again.*model=HeteroSAGE"):
        conveyor.load(out)
    given = HeteroSAGE(data.metadata())
    assert conveyor.load(last(out), model=given) is given
    papers = conveyor.predict(given, data)  # its forward, once on the whole graph
    with torch.no_grad():
        assert torch.equal(papers, trained.eval()(data.x_dict, data.edge_index_dict)["paper"])


def test_a_command_line_typed_run_comes_back(data_root, tmp_path):
    out = tmp_path / "cli"
    result = train(make_config("data=synthetic_mag", "data.scale=0.0005", "data.num_classes=4",
                               f"data.root={data_root}",
                               "model=sage", "model.hidden=16", "pipeline=serial", "trainer.epochs=1",
                               "trainer.batch_size=128", "sampler.fanouts=[3,3]", f"run.out_dir={out}"))
    loaded = conveyor.load(last(out))
    assert isinstance(loaded, TypedGNN)
    graph = generate(0.0005, 0, num_classes=4)
    nodes = torch.arange(20)
    assert torch.equal(conveyor.predict(loaded, graph, nodes), conveyor.predict(result.model, graph, nodes))


def tampered(path, tmp_path, edit):
    state = torch.load(path, weights_only=True)
    edit(state["module"])
    torch.save(state, tmp_path / "tampered.pt")
    return tmp_path / "tampered.pt"


@pytest.mark.parametrize("edit, words", [
    (lambda r: r["init"].update(node_counts=[10**12, 1, 1, 1], widths={}), "embedded nodes"),
    (lambda r: r["init"].update(widths={"paper": "128"}), r"widths=\{'paper': '128'\}.*whole number"),
    (lambda r: r["init"].update(edge_types=[["a", "b", "c"]] * 10**4), "10,000 edge types"),
    (lambda r: r.pop("parts"), r"parts are \[\], where a TypedGNN holds \['inner'\]"),
    (lambda r: r["parts"]["inner"]["init"].update(hidden_channels=10**9), "hidden_channels=1,000,000,000"),
    (lambda r: r["parts"]["inner"].update(library="os"), "parts.inner.library is 'os'"),
    (lambda r: r["parts"]["inner"]["state"].update({"rel.0.author__writes__paper.weight": torch.zeros(3)}),
     "does not build its TypedGNN"),
    (lambda r: r["init"].update(target=torch.zeros(1)), "not a dict of plain values"),
])
def test_a_tampered_typed_record_is_refused_field_by_field(typed_runs, tmp_path, edit, words):
    _, runs = typed_runs
    with pytest.raises(ConveyorError, match=words):
        conveyor.load(tampered(last(runs["rgcn"][1]), tmp_path, edit))


def source(record):
    return record["parts"]["inner"]["parts"]["module"]["source"]  # the to_hetero'd BasicGNN's record


@pytest.mark.parametrize("edit, words", [
    (lambda r: source(r)["init"].update(hidden_channels=10**9), "hidden_channels=1,000,000,000"),
    (lambda r: source(r)["init"].update(in_channels=[-1, -7]), r"in_channels=\[-1, -7\].*whole number"),
    (lambda r: source(r).update(library="builtins"), "parts.inner.parts.module.source.library is 'builtins'"),
    (lambda r: r["parts"]["inner"]["parts"]["module"].pop("source"), "source is None, not a record"),
])
def test_a_tampered_to_hetero_record_is_refused_field_by_field(typed_runs, tmp_path, edit, words):
    _, runs = typed_runs
    with pytest.raises(ConveyorError, match=words):
        conveyor.load(tampered(last(runs["sage"][1]), tmp_path, edit))


@pytest.mark.parametrize("edit, words", [
    (lambda r: r["init"].update(width=10**9), "width=1,000,000,000"),
    (lambda r: r["parts"]["encoder"].update(parts={"x": {}}), r"parts.encoder.parts are \['x'\]"),
    (lambda r: r["parts"]["encoder"].update(state={"layers.0.lin_l.weight": 3}), "not a dict of tensors"),
    (lambda r: r["init"].update(decoder="mlp"), "does not build its LinkModel"),
])
def test_a_tampered_link_record_is_refused_field_by_field(link_runs, tmp_path, edit, words):
    _, root, _, _ = link_runs
    with pytest.raises(ConveyorError, match=words):
        conveyor.load(tampered(last(root / "dot"), tmp_path, edit))


def test_predict_refuses_pairs_and_types_that_do_not_fit(link_runs, typed_runs, node_runs, cora):
    data, root, runs, _ = link_runs
    with pytest.raises(ConveyorError, match=r"shape \[2, P\]"):
        conveyor.predict(runs["dot"], data, pairs=torch.tensor([0, 1]))
    with pytest.raises(ConveyorError, match="holds node id 200"):
        conveyor.predict(runs["dot"], data, pairs=torch.tensor([[0], [200]]))
    with pytest.raises(ConveyorError, match="a SampledGNN gives each node's output"):
        conveyor.predict(node_runs["sage"][0], cora, pairs=torch.tensor([[0], [1]]))
    hetero, typed = typed_runs
    with pytest.raises(ConveyorError, match=r"node_type='venue'\): name the node type"):
        conveyor.predict(typed["rgcn"][0], hetero, node_type="venue")
    del hetero["institution"].x
    with pytest.raises(ConveyorError, match="features of widths"):
        conveyor.predict(typed["rgcn"][0], hetero)
