"""A checkpoint records the data it was trained on (trainer/outputs/fingerprint.py): resuming on other
data is refused by name, before training; a checkpoint from before fingerprints (or without a
config) resumes with warnings that reach run.log."""
import os

import numpy as np
import pytest
import torch

from conveyor.core import ConveyorError
from conveyor.trainer.outputs.checkpoint import CHECKPOINT
from conveyor.trainer.run import train
from tests.helpers import make_config, write_custom


def custom_graph(directory, num_nodes=200, seed=0):
    """A random custom dataset: 1,600 edges (the same for every seed), 8 features and labels
    drawn by `seed`, 3 classes, half the nodes training."""
    g = np.random.default_rng(seed)
    edges = np.random.default_rng(0).integers(0, num_nodes, (2, 1600))
    return write_custom(directory, edge_index=edges, x=g.standard_normal((num_nodes, 8)).astype(np.float32),
                        y=g.integers(0, 3, num_nodes), train_idx=np.arange(0, num_nodes, 2),
                        val_idx=np.arange(1, num_nodes, 4), test_idx=np.arange(3, num_nodes, 4))


@pytest.fixture
def custom_run(tmp_path):
    """A one-epoch run on a custom dataset, and a config maker for resuming it."""
    data = custom_graph(tmp_path / "data")

    def config(*overrides):
        return make_config("data=custom", f"data.path={data}", f"data.root={tmp_path / 'root'}",
                           f"run.out_dir={tmp_path / 'run'}", "sampler.fanouts=[4,4]", *overrides)
    train(config("trainer.epochs=1"))
    return tmp_path / "run", data, config


def test_resume_on_the_same_data_goes_on(custom_run):
    out, _, config = custom_run
    assert train(config("trainer.epochs=2", "run.resume=true")).final["epochs"] == 2
    state = torch.load(out / CHECKPOINT, weights_only=True)
    assert {k: state["data"][k] for k in ("nodes", "feature_width", "feature_dtype", "classes")} == \
        {"nodes": 200, "feature_width": 8, "feature_dtype": "float32", "classes": 3}


@pytest.mark.parametrize("replacement, words", [
    (dict(seed=1), "the same shapes, but other contents: digest"),  # other features and labels
    (dict(num_nodes=220), "nodes 200 in the checkpoint, 220 now"),
])
def test_resume_on_other_data_under_the_same_path_is_refused(custom_run, replacement, words):
    out, data, config = custom_run
    custom_graph(data, **replacement)
    before = (out / CHECKPOINT).read_bytes()
    with pytest.raises(ConveyorError) as error:
        train(config("trainer.epochs=2", "run.resume=true"))
    message = str(error.value)
    assert words in message and f"the checkpoint {out / CHECKPOINT} was trained on other data" in message
    assert "another run.out_dir" in message and "\n" not in message
    assert (out / CHECKPOINT).read_bytes() == before


def test_an_older_checkpoint_resumes_with_its_warnings_in_the_run_log(custom_run):
    """No data fingerprint (before this check) and no config: both said in run.log, which the
    config check's warning once missed (logged before the log was open)."""
    out, _, config = custom_run
    state = torch.load(out / CHECKPOINT, weights_only=True)
    del state["data"], state["config"]
    torch.save(state, out / CHECKPOINT)
    assert train(config("trainer.epochs=2", "run.resume=true")).final["epochs"] == 2
    log = (out / "run.log").read_text()
    assert f"the checkpoint in {out} records no config: cannot check that it fits" in log
    assert f"the checkpoint {out / CHECKPOINT} records no data fingerprint" in log


def test_a_planted_run_log_link_or_fifo_is_refused(tmp_path, data_root):
    out = tmp_path / "run"
    out.mkdir()
    target = tmp_path / "precious"
    target.write_text("keep me")
    os.symlink(target, out / "run.log")
    config = make_config("data=cora", f"data.root={data_root}", f"run.out_dir={out}", "trainer.epochs=1")
    with pytest.raises(ConveyorError, match=r"run\.log is a symbolic link \(to .*precious\)"):
        train(config)
    assert target.read_text() == "keep me"
    (out / "run.log").unlink()
    os.mkfifo(out / "run.log")  # opened to write, it would wait for a reader forever
    with pytest.raises(ConveyorError, match=r"run\.log is not a regular file \(a FIFO"):
        train(config)
