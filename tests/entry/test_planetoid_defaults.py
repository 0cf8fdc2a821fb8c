"""Per-(dataset, model) defaults for the Planetoid sets (conf/data/planetoid/<data>_<model>.yaml,
Hydra's specializing configuration): chosen by the pair, overridden by the command line, absent
for other pairs, and each file names a real pair."""
import pytest

from conveyor.compose import CONF
from conveyor.trainer.models.sampled import build_model
from conveyor.usage import option_files
from tests.helpers import make_config

PLANETOID = ("cora", "citeseer", "pubmed")


def test_every_file_names_a_dataset_and_a_model():
    files = sorted(path.stem for path in (CONF / "data" / "planetoid").glob("*.yaml"))
    expected = [f"{d}_{m}" for d in PLANETOID for m in ("gcn", "gat")] + ["citeseer_sage", "pubmed_sage", "mag_rgcn"]
    assert files == sorted(expected)
    options = option_files()
    assert all(d in options["data"] for d in PLANETOID) and {"gcn", "gat", "sage"} <= set(options["model"])


@pytest.mark.parametrize("data", PLANETOID)
def test_gcn_is_kipf_and_welling_s(data):
    s = make_config(f"data={data}", "model=gcn")
    assert (s.model.hidden, s.model.dropout, s.model.input_dropout, s.model.gcn_degrees) == (16, 0.5, 0.5, "graph")
    assert (s.trainer.lr, s.trainer.weight_decay, s.trainer.epochs, s.trainer.eval_every) == (0.01, 5e-4, 200, 1)
    assert s.sampler.fanouts == [-1, -1]


@pytest.mark.parametrize("data, lr, weight_decay, epochs, out_heads", [
    ("cora", 0.005, 5e-4, 300, {"out_heads": 1}), ("citeseer", 0.005, 5e-4, 200, {}), ("pubmed", 0.01, 1e-3, 200, {})])
def test_gat_is_velickovic_et_al_s(data, lr, weight_decay, epochs, out_heads):
    s = make_config(f"data={data}", "model=gat")
    assert (s.model.hidden, s.model.arguments, s.model.dropout, s.model.input_dropout) == (
        64, {"heads": 8, **out_heads, "act": "elu"}, 0.6, 0.6)
    assert (s.trainer.lr, s.trainer.weight_decay, s.trainer.epochs) == (lr, weight_decay, epochs)
    assert s.model._target_ == "torch_geometric.nn.GAT"
    built = build_model(s.model, 100, 7, 2).gnn
    expected = "conveyor.trainer.models.gat" if out_heads else "torch_geometric.nn.models.basic_gnn"
    assert type(built).__module__ == expected
    assert built.convs[-1].heads == (1 if out_heads else 8)  # out_heads builds trainer/models/gat.py's GAT


def test_the_command_line_wins_and_other_pairs_are_untouched():
    assert make_config("data=cora", "model=gcn", "model.hidden=32", "trainer.epochs=5").model.hidden == 32
    assert make_config("data=cora", "model=sage").sampler.fanouts == [10, 10]  # conf/data/cora.yaml's
    assert make_config("data=pubmed", "model=sage").sampler.fanouts == [25, 10]
    assert make_config("data=cora", "model=mlp").trainer.epochs == 50  # conf/data/cora.yaml's
    synthetic = make_config("model=gcn")
    assert synthetic.model.hidden == 256 and synthetic.model.gcn_degrees == "batch"


def test_the_one_head_gat_is_pygs_but_its_output_layer():
    """conveyor.trainer.models.gat.GAT: PyG's GAT (its parameters but the last layer's, by name and shape)
    with one output head, its output width out_channels."""
    import torch
    from torch_geometric.nn import GAT as PyGGAT

    from conveyor.trainer.models.gat import GAT
    ours, pygs = GAT(20, 64, 2, 7, heads=8, dropout=0.6), PyGGAT(20, 64, 2, 7, heads=8, dropout=0.6)
    shapes = lambda m: {k: tuple(v.shape) for k, v in m.state_dict().items()}  # noqa: E731
    assert {k: v for k, v in shapes(ours).items() if k.startswith("convs.0")} == \
        {k: v for k, v in shapes(pygs).items() if k.startswith("convs.0")}
    assert (ours.convs[-1].heads, ours.convs[-1].concat, pygs.convs[-1].heads) == (1, False, 8)
    assert ours.convs[-1].dropout == 0.6 and shapes(ours)["convs.1.lin.weight"] == (7, 64)
    assert ours(torch.randn(5, 20), torch.tensor([[0, 1], [1, 2]])).shape == (5, 7)


def test_rgcn_on_mag_is_ogbs_example():
    s = make_config("data=mag", "model=rgcn")
    assert (s.model.hidden, s.model.dropout, s.trainer.lr, s.trainer.epochs, s.trainer.batch_size) == (64, 0.5, 0.01, 3,
                                                                                                         1024)
    assert s.sampler.fanouts == [25, 20] and make_config("data=synthetic_mag", "model=rgcn").sampler.fanouts != [25, 20]
