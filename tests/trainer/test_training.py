"""End-to-end training through the real config and trainer, on real (Planetoid) and synthetic data."""

import pytest

from conveyor.trainer.run import train
from tests.helpers import make_config, run, write_custom_dataset


def test_sage_on_cora_reaches_079(tmp_path, data_root):
    final, metrics = run(tmp_path, "cora", "data=cora", "model=sage", f"data.root={data_root}")
    assert final["test_acc"] >= 0.79, final
    assert final["inference"] == "layerwise"  # auto, for a model that can
    assert len(metrics["epochs"]) == 50


def test_metrics_and_checkpoints_record_which_conveyor_wrote_them(tmp_path, data_root):
    import importlib.metadata
    import subprocess

    import torch

    from tests.helpers import REPO
    _, metrics = run(tmp_path, "cora", "data=cora", f"data.root={data_root}", "trainer.epochs=1")
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True)
    assert metrics["conveyor"]["version"] == importlib.metadata.version("conveyor")
    assert metrics["conveyor"]["commit"] == (head.stdout.strip() if head.returncode == 0 else None)
    checkpoint = torch.load(tmp_path / "cora" / "checkpoints" / "last.pt", weights_only=True)
    assert checkpoint["conveyor"] == metrics["conveyor"]


@pytest.mark.parametrize("inference, least", [("sampled", 0.77), ("layerwise", 0.76)])
def test_gcn_on_pubmed_reaches_077(tmp_path, data_root, inference, least):
    """PubMed's GCN defaults (conf/data/planetoid/pubmed_gcn.yaml): full-batch GCN, every
    neighbour and the whole graph's degrees in training and in both evaluations."""
    # One seed's figure, met with F.dropout's draws (model.fast_dropout=false); the default dropout's
    # accuracy over 10 seeds, both ways: benchmarks/results/dropout_accuracy_cpu.md.
    final, _ = run(tmp_path, "pubmed", "data=pubmed", "model=gcn", f"data.root={data_root}",
                   f"trainer.inference={inference}", "model.fast_dropout=false")
    assert final["test_acc"] >= least, final


def test_sage_beats_mlp_on_synthetic(tmp_path, data_root):
    common = ("data=synthetic", f"data.root={data_root}", "data.scale=0.01", "trainer.epochs=5",
              "trainer.batch_size=256", "trainer.eval_every=5")
    sage, _ = run(tmp_path, "sage", "model=sage", *common)
    mlp, _ = run(tmp_path, "mlp", "model=mlp", *common)
    assert sage["test_acc"] >= mlp["test_acc"] + 0.15, (sage["test_acc"], mlp["test_acc"])


def test_degree_cache_changes_nothing_but_hits(tmp_path, data_root):
    """The cache only moves where features come from: same seed, same losses and accuracies."""
    common = ("data=cora", f"data.root={data_root}", "trainer.epochs=5")
    _, cached = run(tmp_path, "degree", "cache=degree", "cache.capacity=0.3", *common)
    _, plain = run(tmp_path, "none", "cache=none", *common)
    for a, b in zip(cached["epochs"], plain["epochs"]):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5, abs=1e-6)
        assert a["val_acc"] == b["val_acc"] and a["test_acc"] == b["test_acc"]
    assert all(0.3 < e["cache_hit_ratio"] < 1 for e in cached["epochs"])
    assert all(e["cache_hit_ratio"] == 0 for e in plain["epochs"])
    assert cached["epochs"][0]["bytes_from_host"] < plain["epochs"][0]["bytes_from_host"]


def test_metrics_and_tensorboard(tmp_path, data_root):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    final, metrics = run(tmp_path, "tb", "data=synthetic", f"data.root={data_root}", "data.scale=0.005",
                         "trainer.epochs=3")
    assert [e["epoch"] for e in metrics["epochs"]] == [1, 2, 3]
    assert 0 <= metrics["final"]["test_acc"] <= 1 and metrics["final"] == final
    assert all(e["epoch_time_s"] > 0 and e["sampled_edges_per_s"] > 0 for e in metrics["epochs"])
    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    tags = events.Tags()["scalars"]
    for tag in ("epoch/loss", "epoch/val_acc", "epoch/test_acc", "epoch/epoch_time_s", "epoch/sample_s",
                "epoch/sampled_edges_per_s", "epoch/cache_hit_ratio", "batch/loss"):
        assert tag in tags, tag
    assert [s.step for s in events.Scalars("epoch/loss")] == [1, 2, 3]
    assert [s.value for s in events.Scalars("epoch/loss")] == pytest.approx([e["loss"] for e in metrics["epochs"]])


def test_same_seed_same_run_and_other_seed_differs(tmp_path, data_root):
    common = ("data=cora", f"data.root={data_root}", "trainer.epochs=3")
    _, a = run(tmp_path, "a", *common)
    _, b = run(tmp_path, "b", *common)
    _, c = run(tmp_path, "c", "run.seed=1", *common)
    assert [e["loss"] for e in a["epochs"]] == [e["loss"] for e in b["epochs"]]
    assert [e["loss"] for e in a["epochs"]] != [e["loss"] for e in c["epochs"]]


def test_out_dir_with_a_run_is_not_overwritten(tmp_path, data_root):
    from conveyor.core import ConveyorError
    run(tmp_path, "once", "data=cora", f"data.root={data_root}", "trainer.epochs=1")
    before = (tmp_path / "once" / "checkpoints" / "last.pt").read_bytes()
    with pytest.raises(ConveyorError, match="run.resume=true"):
        run(tmp_path, "once", "data=cora", f"data.root={data_root}", "trainer.epochs=1")
    assert (tmp_path / "once" / "checkpoints" / "last.pt").read_bytes() == before


def test_fused_sampler_trains_like_bsp_on_cora(tmp_path, data_root):
    """The fused Triton kernel (under the interpreter here) reaches bsp's accuracy within a point.
    Evaluated once, at the end, to keep interpreter launches few."""
    # One seed's figure, met with F.dropout's draws (model.fast_dropout=false); the default dropout's
    # accuracy over 10 seeds, both ways: benchmarks/results/dropout_accuracy_cpu.md.
    common = ("data=cora", f"data.root={data_root}", "trainer.eval_every=50", "model.fast_dropout=false")
    fused, _ = run(tmp_path, "fused", "sampler=fused", *common)
    bsp, _ = run(tmp_path, "bsp", "sampler=bsp", "sampler.draws=per_hop", *common)  # fused draws per hop
    assert fused["test_acc"] >= 0.79, fused
    assert abs(fused["test_acc"] - bsp["test_acc"]) <= 0.01, (fused["test_acc"], bsp["test_acc"])


def test_without_a_validation_split_no_best_val_is_claimed(tmp_path):
    data = write_custom_dataset(tmp_path / "graph", num_nodes=60, train_idx=range(40),
                                test_idx=range(40, 60))
    final, metrics = run(tmp_path, "noval", "data=custom", f"data.path={data}", "trainer.epochs=2",
                         "pipeline=serial")
    assert final["best_val_acc"] is None and final["best_epoch"] is None
    log = (tmp_path / "noval" / "run.log").read_text()
    assert "no validation split" in log and "-1.0000" not in log


def test_console_shows_the_summary_and_epochs_and_tensorboard_steps_each_phase(tmp_path, data_root, capfd):
    """INFO on the console: the start-up summary, one line per epoch, the end; the pipeline's
    internals (pids, per-run queue summaries, pace decisions) only in run.log (DEBUG). TensorBoard:
    training batches' pipeline/ scalars step with the training batches (as batch/loss),
    evaluation batches' under pipeline_eval/ with their own steps; the learning rate per epoch."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    out = tmp_path / "run"
    train(make_config("data=synthetic", f"data.root={data_root}", "data.scale=0.005", "trainer.epochs=2",
                      "trainer.batch_size=256", "pipeline=async", "trainer.progress=true",
                      "trainer.log_every=1", "trainer.inference=sampled", f"run.out_dir={out}"))
    console = [line for line in capfd.readouterr().err.splitlines() if line.startswith("[")]
    assert sum("] epoch " in line for line in console) == 2
    assert not any(word in line for line in console for word in ("pid", "pace:", "batches; queue")), console
    assert len(console) <= 9, console  # device, graph, evaluation, sampling, MPS, 2 epochs, pipeline, done
    log = (out / "run.log").read_text()
    assert "processes started" in log and "ready after" in log
    events = EventAccumulator(str(out))
    events.Reload()
    losses = [e.step for e in events.Scalars("batch/loss")]
    assert [e.step for e in events.Scalars("pipeline/queue/ready")] == losses == list(range(len(losses)))
    eval_steps = [e.step for e in events.Scalars("pipeline_eval/queue/ready")]
    assert eval_steps == list(range(len(eval_steps))) and eval_steps
    assert [e.value for e in events.Scalars("epoch/lr")] == pytest.approx([0.003, 0.003])


def test_tensorboard_has_the_lr_the_val_loss_and_the_hparams(tmp_path, data_root):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2
    final, metrics = run(tmp_path, "tb", "data=cora", f"data.root={data_root}", "trainer.epochs=4",
                         "trainer.eval_every=2", "trainer.lr_schedule=step", "trainer.lr_step_size=1",
                         "trainer.lr_gamma=0.5")
    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    lr = [(s.step, s.value) for s in events.Scalars("epoch/lr")]
    assert lr == [(1, pytest.approx(0.01)), (2, pytest.approx(0.005)), (3, pytest.approx(0.0025)),
                  (4, pytest.approx(0.00125))]
    val_loss = [(s.step, s.value) for s in events.Scalars("epoch/val_loss")]
    assert val_loss == [(e["epoch"], pytest.approx(e["val_loss"])) for e in metrics["epochs"] if "val_loss" in e]
    assert [step for step, _ in val_loss] == [2, 4]

    content = events.PluginTagToContent("hparams")
    start = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_start_info"])
    hparams = start.session_start_info.hparams
    assert hparams["trainer.lr_schedule"].string_value == "step"
    assert hparams["trainer.lr"].number_value == pytest.approx(0.01)
    assert hparams["sampler.fanouts"].string_value == "[10, 10]"
    experiment = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/experiment"]).experiment
    assert {"hparam/test_acc", "hparam/best_val_acc"} <= {m.name.tag for m in experiment.metric_infos}
    for key in ("test_acc", "best_val_acc", "test_acc_at_best_val"):
        assert events.Scalars(f"hparam/{key}")[0].value == pytest.approx(final[key])
