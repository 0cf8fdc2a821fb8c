"""`conveyor.fit`: the README's and docs/usage.md's examples as written, a Graph in memory, and bad arguments."""
import json
import re

import pytest
import torch

import conveyor
from conveyor.core import ConveyorError
from tests.helpers import REPO, home_with_planetoid


def readme_example(tag: str = "fit-example") -> str:
    """The tagged block of the README (the guide) or of docs/usage.md (the reference), as written."""
    text = (REPO / "README.md").read_text() + (REPO / "docs" / "usage.md").read_text()
    return re.search(rf"<!-- {tag}[^>]*-->\n```python\n(.*?)```", text, re.S).group(1)


def run_readme_example(tag: str, tmp_path, monkeypatch, data_root) -> dict:
    """The block run as a script's main module would run it, in a folder, with the example's
    root (~/.cache/conveyor/data, prepare's default) prepared offline."""
    monkeypatch.chdir(tmp_path)
    home_with_planetoid(tmp_path, monkeypatch, data_root)
    scope = {"__name__": "__main__"}
    exec(compile(readme_example(tag), "README.md", "exec"), scope)
    return scope


def test_the_readme_example_trains_cora(tmp_path, monkeypatch, data_root):
    scope = run_readme_example("fit-example", tmp_path, monkeypatch, data_root)
    result = scope["result"]
    assert isinstance(scope["model"], torch.nn.Module) and len(result.history) == 30
    assert result.final["test_acc"] >= 0.78, result.final
    metrics = json.loads((tmp_path / "runs" / "cora_fit" / "metrics.json").read_text())
    assert metrics["final"] == result.final and metrics["config"]["data"]["name"] == "memory"


def test_the_readme_pyg_model_example_trains_cora(tmp_path, monkeypatch, data_root):
    from torch_geometric.nn import GraphSAGE
    scope = run_readme_example("fit-pyg-example", tmp_path, monkeypatch, data_root)
    result = scope["result"]
    assert type(result.model) is GraphSAGE and result.model is scope["model"]
    # The example as written (its model's initial weights unseeded): 8 seeds gave 0.733-0.783 (mean
    # 0.767), the draws before #51's 0.727-0.778 (0.757); 0.72 holds for any of them.
    assert len(result.history) == 20 and result.final["test_acc"] >= 0.72, result.final


def test_fit_takes_a_graph_and_the_keywords(tmp_path, cora):
    result = conveyor.fit(cora, model="gcn", fanouts=[5, 5], batch_size=64, epochs=2, seed=3,
                          out_dir=str(tmp_path / "run"), overrides=["trainer.progress=false"])
    config = json.loads((tmp_path / "run" / "metrics.json").read_text())["config"]
    assert config["sampler"]["fanouts"] == [5, 5] and config["trainer"]["batch_size"] == 64
    assert config["model"]["name"] == "gcn" and config["run"]["seed"] == 3
    assert [e["epoch"] for e in result.history] == [1, 2]
    assert 0 < result.final["test_acc"] <= 1


@pytest.mark.parametrize("call, words", [
    (lambda g: conveyor.fit(g, epocs=3), ["epocs", "overrides="]),
    (lambda g: conveyor.fit(g, overrides=["data=cora"]), ["data=", "the conveyor command"]),
    (lambda g: conveyor.fit(g, batch_size=0), ["trainer.batch_size", ">= 1"]),
    (lambda g: conveyor.fit(g.edge_index()), ["conveyor.Graph or a PyG Data", "Tensor"]),
])
def test_bad_arguments_say_what_to_change(call, words, cora):
    with pytest.raises(ConveyorError) as error:
        call(cora)
    assert all(word in str(error.value) for word in words), str(error.value)


def test_data_memory_from_the_command_line_says_what_to_do():
    from conveyor.partition import load_dataset
    with pytest.raises(ConveyorError, match=r"conveyor.fit\(\).*data=cora"):
        load_dataset("memory")
