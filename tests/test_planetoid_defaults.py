"""Per-(dataset, model) defaults for the Planetoid sets (conf/data/planetoid/<data>_<model>.yaml,
Hydra's specializing configuration): chosen by the pair, overridden by the command line, absent
for other pairs, and each file names a real pair."""
import pytest

from conveyor.compose import CONF
from conveyor.usage import option_files
from tests.configs import make_config

PLANETOID = ("cora", "citeseer", "pubmed")


def test_every_file_names_a_dataset_and_a_model():
    files = sorted(path.stem for path in (CONF / "data" / "planetoid").glob("*.yaml"))
    expected = [f"{d}_{m}" for d in PLANETOID for m in ("gcn", "gat")] + ["citeseer_sage", "pubmed_sage"]
    assert files == sorted(expected)
    options = option_files()
    assert all(d in options["data"] for d in PLANETOID) and {"gcn", "gat", "sage"} <= set(options["model"])


@pytest.mark.parametrize("data", PLANETOID)
def test_gcn_is_kipf_and_welling_s(data):
    s = make_config(f"data={data}", "model=gcn")
    assert (s.model.hidden, s.model.dropout, s.model.input_dropout, s.model.gcn_degrees) == (16, 0.5, 0.5, "graph")
    assert (s.trainer.lr, s.trainer.weight_decay, s.trainer.epochs, s.trainer.eval_every) == (0.01, 5e-4, 200, 1)
    assert s.sampler.fanouts == [-1, -1]


@pytest.mark.parametrize("data, lr, weight_decay", [("cora", 0.005, 5e-4), ("citeseer", 0.005, 5e-4),
                                                    ("pubmed", 0.01, 1e-3)])
def test_gat_is_velickovic_et_al_s(data, lr, weight_decay):
    s = make_config(f"data={data}", "model=gat")
    assert (s.model.hidden, s.model.arguments, s.model.dropout, s.model.input_dropout) == (
        64, {"heads": 8, "act": "elu"}, 0.6, 0.6)
    assert (s.trainer.lr, s.trainer.weight_decay, s.trainer.epochs) == (lr, weight_decay, 200)


def test_the_command_line_wins_and_other_pairs_are_untouched():
    assert make_config("data=cora", "model=gcn", "model.hidden=32", "trainer.epochs=5").model.hidden == 32
    assert make_config("data=cora", "model=sage").sampler.fanouts == [10, 10]  # conf/data/cora.yaml's
    assert make_config("data=pubmed", "model=sage").sampler.fanouts == [25, 10]
    assert make_config("data=cora", "model=mlp").trainer.epochs == 50  # conf/data/cora.yaml's
    synthetic = make_config("model=gcn")
    assert synthetic.model.hidden == 256 and synthetic.model.gcn_degrees == "batch"
