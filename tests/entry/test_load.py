"""`conveyor.load`: a run's model back from its folder or checkpoint, a PyG model as that PyG model
with PyG's keys; `conveyor.predict`: every node's output (or embedding) layer by layer."""
import pytest
import torch
from torch import nn
from torch_geometric.nn import GAT, GIN, GraphSAGE

import conveyor
from conveyor.core import ConveyorError
from conveyor.trainer.models.sampled import SampledGNN
from tests.helpers import EdgeIndexSAGE

FAST = ["trainer.progress=false"]


def trained(cora, model, out_dir, epochs=2):
    torch.manual_seed(0)
    return conveyor.fit(cora, model, fanouts=[5, 5], batch_size=64, epochs=epochs, lr=0.01,
                        out_dir=out_dir, overrides=FAST).model


@pytest.mark.parametrize("make", [
    lambda f, c: GraphSAGE(f, 16, 2, c, dropout=0.5),
    lambda f, c: GAT(f, 16, 2, c, heads=4, v2=True, dropout=0.3),
    lambda f, c: GIN(f, 16, 2, c, train_eps=True, norm="batch_norm"),
], ids=["sage", "gatv2", "gin"])
def test_a_pyg_model_comes_back_as_that_pyg_model_with_pyg_keys(make, cora, tmp_path):
    model = trained(cora, make(cora.x.size(1), cora.num_classes), tmp_path / "run")
    loaded = conveyor.load(tmp_path / "run" / "checkpoints" / "last.pt")  # fit's model: the last epoch's
    assert type(loaded) is type(model) and not loaded.training
    parameters = dict(loaded.named_parameters())  # GIN's trained eps is a parameter again
    assert parameters.keys() == dict(model.named_parameters()).keys()
    fresh = make(cora.x.size(1), cora.num_classes)  # PyG's own model, as its user builds it
    weights = torch.load(tmp_path / "run" / "checkpoints" / "last.pt", weights_only=True)["module"]["state"]
    fresh.load_state_dict(weights)  # strict: PyG's keys, every one
    everything = conveyor.predict(loaded, cora)
    with torch.no_grad():
        full = model.eval()(cora.x, cora.edge_index())
        again = fresh.eval()(cora.x, cora.edge_index())
    assert everything.shape == (cora.num_nodes, cora.num_classes)
    assert torch.allclose(everything, full, atol=1e-5) and torch.equal(again, full)


def test_the_best_checkpoint_is_the_one_loaded_from_a_run_folder(cora, tmp_path):
    trained(cora, "sage", tmp_path / "run", epochs=3)
    best = torch.load(tmp_path / "run" / "checkpoints" / "best.pt", weights_only=True)
    loaded = conveyor.load(tmp_path / "run")
    assert isinstance(loaded, SampledGNN) and loaded.kind == "sage"
    for key, value in loaded.state_dict().items():
        assert torch.equal(value, best["model"][key]), key
    last = conveyor.load(tmp_path / "run" / "checkpoints" / "last.pt")
    assert last.state_dict().keys() == loaded.state_dict().keys()


def test_predict_embeds_after_the_first_layers(cora, tmp_path):
    model = trained(cora, GraphSAGE(cora.x.size(1), 16, 2, cora.num_classes), tmp_path / "run")
    nodes = torch.tensor([5, 0, 2707])
    last = conveyor.load(tmp_path / "run" / "checkpoints" / "last.pt")  # fit's model (the folder's is best.pt)
    hidden = conveyor.predict(last, cora, nodes, layers=1, batch_size=100)
    with torch.no_grad():
        expected = model.eval().convs[0](cora.x, cora.edge_index()).relu()[nodes]
    assert hidden.shape == (3, 16) and torch.allclose(hidden, expected, atol=1e-5)
    with pytest.raises(ConveyorError, match=r"layers=3\): the model has 2 layers; pass 1..2"):
        conveyor.predict(model, cora, layers=3)


def test_a_class_of_ones_own_is_loaded_into_an_instance_given(cora, tmp_path):
    model = trained(cora, EdgeIndexSAGE(cora.x.size(1), cora.num_classes), tmp_path / "run")
    with pytest.raises(ConveyorError, match=r"a EdgeIndexSAGE, which conveyor does not build again .* "
                                            r"conveyor.load\(path, model=EdgeIndexSAGE\(...\)\)"):
        conveyor.load(tmp_path / "run")
    loaded = conveyor.load(tmp_path / "run", model=EdgeIndexSAGE(cora.x.size(1), cora.num_classes))
    out = conveyor.predict(loaded, cora, torch.arange(10))  # whole-graph forward(x, edge_index)
    with torch.no_grad():
        assert torch.allclose(out, model.eval()(cora.x, cora.edge_index())[:10], atol=1e-6)
    with pytest.raises(ConveyorError, match=r"do not fit the Linear given"):
        conveyor.load(tmp_path / "run", model=nn.Linear(3, 3))


def test_a_path_that_is_no_run_says_what_to_pass(tmp_path):
    with pytest.raises(ConveyorError, match=r"holds no checkpoints/best.pt or checkpoints/last.pt"):
        conveyor.load(tmp_path)
    with pytest.raises(ConveyorError, match=r"does not exist; pass a run's run.out_dir"):
        conveyor.load(tmp_path / "nothing")


def test_a_command_line_run_of_a_target_comes_back_as_its_class(data_root, cora, tmp_path):
    """cora's GAT default is conveyor.trainer.models.gat.GAT (PyG's, one output head): rebuilt as that."""
    from conveyor.trainer.models.gat import GAT as OneHeadGAT
    from conveyor.trainer.run import train
    from tests.helpers import make_config
    # five epochs: conf/data/planetoid/cora_gat.yaml trains at lr 0.005 with input dropout 0.6
    train(make_config("data=cora", "model=gat", f"data.root={data_root}", "trainer.epochs=5",
                      "sampler.fanouts=[5,5]", f"run.out_dir={tmp_path / 'gat'}"))
    model = conveyor.load(tmp_path / "gat")
    assert type(model) is OneHeadGAT and not model.training
    assert (model.convs[0].heads, model.convs[-1].heads) == (8, 1)  # conf/model/gat.yaml, cora_gat.yaml
    best = torch.load(tmp_path / "gat" / "checkpoints" / "best.pt", weights_only=True)
    assert all(key.startswith("gnn.") for key in best["model"])  # the trainer's own keys: PerHopGNN's
    assert best["module"]["state"].keys() == model.state_dict().keys()  # PyG's, without the prefix
    assert conveyor.predict(model, cora).argmax(1).eq(cora.y).float().mean() > 0.3
