"""`checkpoints/best.pt` (the model at the best validation accuracy) and early stopping by
`trainer.patience`, checked against the run's own recorded history."""
import dataclasses

import pytest
import torch

import conveyor
from conveyor.core import ConveyorError
from conveyor.partition.datasets import load_configured
from conveyor.trainer.loop.layerwise import layerwise_logits
from conveyor.trainer.models.sampled import build_model
from conveyor.trainer.outputs.checkpoint import BEST, load_checkpoint
from tests.helpers import make_config, run


def best_record(epochs):
    """The first evaluated epoch with the highest val acc (later ties are not better)."""
    evaluated = [e for e in epochs if "val_acc" in e]
    return max(evaluated, key=lambda e: (e["val_acc"], -e["epoch"]))


def expected_stop(epochs, patience):
    """The epoch after which `patience` evaluations in a row were no better than the best."""
    best, since = None, 0
    for e in epochs:
        if "val_acc" not in e:
            continue
        best, since = (e["val_acc"], 0) if best is None or e["val_acc"] > best else (best, since + 1)
        if since >= patience:
            return e["epoch"]
    return None


def test_best_checkpoint_holds_the_model_of_the_best_epoch(tmp_path, data_root):
    # At 10x the default lr Cora's val acc peaks by epoch 9-13 and then wanders (seeds 0-2 alike), so
    # the best epoch comes before the last without resting on one seed's luck (at the default lr it
    # still climbs at epoch 20).
    final, metrics = run(tmp_path, "run", "data=cora", f"data.root={data_root}", "trainer.epochs=20",
                         "trainer.lr=0.03", "model.fast_dropout=false")
    best = best_record(metrics["epochs"])
    assert best["epoch"] < 20  # else last.pt would do: the test could not tell them apart
    state = load_checkpoint(tmp_path / "run", name=BEST)  # weights_only=True
    assert state["epoch"] == final["best_epoch"] == best["epoch"]
    assert state["best"]["val_acc"] == final["best_val_acc"] == best["val_acc"]
    assert final["test_acc_at_best_val"] == best["test_acc"]
    last = load_checkpoint(tmp_path / "run")  # the last epoch's: another model than best.pt's
    assert last["epoch"] == 20 and any(not torch.equal(a, b) for a, b in zip(state["model"].values(),
                                                                              last["model"].values()))

    cfg = make_config("data=cora", f"data.root={data_root}")
    graph = load_configured(cfg.data)
    model = build_model(cfg.model, graph.x.size(1), graph.num_classes, 2)
    model.load_state_dict(state["model"])
    nodes = torch.cat([graph.val_idx, graph.test_idx])
    out = layerwise_logits(model, graph, nodes, 4096, torch.device("cpu"))
    correct = out.argmax(1) == graph.y[nodes]
    assert correct[:500].double().mean().item() == best["val_acc"]
    assert correct[500:].double().mean().item() == best["test_acc"]


def test_early_stopping_stops_where_the_history_says(tmp_path, data_root):
    """Patience counts evaluations (every 2nd epoch here), not epochs."""
    common = ("data=cora", f"data.root={data_root}", "trainer.epochs=60", "trainer.eval_every=2",
              "trainer.patience=3")
    final, metrics = run(tmp_path, "run", *common)
    epochs = metrics["epochs"]
    stop = expected_stop(epochs, 3)
    assert stop is not None and stop < 60
    assert [e["epoch"] for e in epochs] == list(range(1, stop + 1))
    assert final["stopped_early"] is True and final["stopped_epoch"] == stop
    assert final["best_epoch"] == best_record(epochs)["epoch"] == stop - 2 * 3
    assert load_checkpoint(tmp_path / "run", name=BEST)["epoch"] == final["best_epoch"]

    # Resumed as it was, it has nothing left to do; with more patience it goes on.
    again, _ = run(tmp_path, "run", *common, "run.resume=true")
    assert again["epochs"] == stop and again["stopped_epoch"] == stop
    more, metrics = run(tmp_path, "run", *common, "run.resume=true", "trainer.patience=null",
                        f"trainer.epochs={stop + 1}")
    assert more["epochs"] == stop + 1 and more["stopped_early"] is False and more["stopped_epoch"] is None


def test_patience_without_validation_nodes_is_refused(tmp_path, cora):
    graph = dataclasses.replace(cora, val_idx=None)
    with pytest.raises(ConveyorError, match="trainer.patience=3 watch the validation accuracy, but the graph has no"):
        conveyor.fit(graph, out_dir=str(tmp_path / "run"), epochs=2,
                     overrides=["trainer.progress=false", "trainer.patience=3"])
    assert not (tmp_path / "run" / "metrics.json").exists()
