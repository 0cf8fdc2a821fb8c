"""Resuming continues the same run: model, data and sampling must be the checkpoint's; a changed
lr or weight decay is applied, logged and recorded."""
import json

import pytest
import torch

from conveyor.core import ConveyorError
from conveyor.trainer.outputs.checkpoint import CHECKPOINT
from conveyor.trainer.run import train
from tests.helpers import make_config


@pytest.fixture
def trained(tmp_path, data_root):
    """A one-epoch cora run to resume, and a config maker for its out_dir."""
    def config(*overrides):
        return make_config("data=cora", f"data.root={data_root}", f"run.out_dir={tmp_path / 'run'}",
                           *overrides)
    train(config("trainer.epochs=1"))
    return tmp_path / "run", config


@pytest.mark.parametrize("overrides, keys", [
    (["model.hidden=32", "sampler.fanouts=[5,5]"], ["model.hidden", "sampler.fanouts"]),
    (["run.seed=7"], ["run.seed"]),
    (["data=citeseer"], ["data.name"]),  # once a raw state_dict traceback
    (["model=gcn"], ["model.name"]),
])
def test_resume_refuses_another_model_data_or_sampling(trained, overrides, keys):
    out, config = trained
    before = (out / CHECKPOINT).read_bytes()
    with pytest.raises(ConveyorError) as error:
        train(config("trainer.epochs=2", "run.resume=true", *overrides))
    message = str(error.value)
    assert "run.resume=true" in message and "another run.out_dir" in message
    for key in keys:
        assert f"{key}:" in message, (key, message)
    assert (out / CHECKPOINT).read_bytes() == before


def test_resume_with_another_lr_uses_it_and_says_so(trained):
    out, config = trained
    train(config("trainer.epochs=2", "run.resume=true", "trainer.lr=0.002", "trainer.weight_decay=0.001"))
    log = (out / "run.log").read_text()
    assert "trainer.lr 0.01 -> 0.002" in log and "trainer.weight_decay 0.0005 -> 0.001" in log
    metrics = json.loads((out / "metrics.json").read_text())
    assert [e["lr"] for e in metrics["epochs"]] == [0.01, 0.002]
    assert metrics["config"]["trainer"]["lr"] == 0.002


def test_resume_with_other_epochs_and_pipeline_is_fine(trained):
    out, config = trained
    final = train(config("trainer.epochs=2", "run.resume=true", "pipeline=serial", "cache=none")).final
    assert final["epochs"] == 2


def test_resume_refuses_a_checkpoint_of_another_version_before_the_data_loads(trained, monkeypatch):
    """A last.pt without what a run restores (an older conveyor's, another program's) is named
    from its missing keys, before the dataset is read (here: a data root that would fail)."""
    out, config = trained
    torch.save({"epoch": 1, "model": {"w": torch.zeros(2)}}, out / CHECKPOINT)
    with pytest.raises(ConveyorError) as error:
        train(config("trainer.epochs=2", "run.resume=true", "data.root=/nonexistent"))
    message = str(error.value)
    assert f"cannot resume from checkpoint {out / CHECKPOINT}" in message, message
    assert "optimizer is missing; history is missing; best is missing" in message, message
    assert "Move it away to start afresh" in message and "\n" not in message


def test_resume_refuses_weights_that_do_not_fit_the_model(trained):
    out, config = trained
    state = torch.load(out / CHECKPOINT, weights_only=True)
    state["model"] = {"layers.0.weight": torch.zeros(3)}  # another version's parameter names
    torch.save(state, out / CHECKPOINT)
    with pytest.raises(ConveyorError) as error:
        train(config("trainer.epochs=2", "run.resume=true"))
    message = str(error.value)
    assert "its weights do not fit this SampledGNN" in message, message
    assert 'Unexpected key(s) in state_dict: "layers.0.weight"' in message and "\n" not in message


def test_resume_without_a_checkpoint_says_so_in_the_run_log(tmp_path, data_root):
    """The line was once logged before the run's log was open, so nobody saw it."""
    out = tmp_path / "fresh"
    final = train(make_config("data=cora", f"data.root={data_root}", f"run.out_dir={out}",
                              "trainer.epochs=1", "run.resume=true")).final
    assert final["epochs"] == 1
    assert f"run.resume=true but {out} has no checkpoint: starting from epoch 1" in (out / "run.log").read_text()


def test_a_checkpoint_that_recorded_fast_dropout_true_resumes_under_the_null_default(tmp_path):
    """Checkpoints from before model.fast_dropout's null default recorded true; for a built-in
    model null means true, so they resume; a _target_ model's null is false, so true is refused."""
    from conveyor.trainer.outputs.resume import check_resumable
    saved = {"model": {"name": "sage", "fast_dropout": True}}
    check_resumable(saved, {"model": {"name": "sage", "fast_dropout": None}}, tmp_path)
    with pytest.raises(ConveyorError, match="model.fast_dropout: True in the checkpoint, None now"):
        check_resumable({"model": {**saved["model"], "_target_": "m.M"}},
                        {"model": {"name": "sage", "_target_": "m.M", "fast_dropout": None}}, tmp_path)
    with pytest.raises(ConveyorError, match="model.fast_dropout: True in the checkpoint, False now"):
        check_resumable(saved, {"model": {"name": "sage", "fast_dropout": False}}, tmp_path)
