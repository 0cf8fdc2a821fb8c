"""`trainer.lr_schedule` (trainer/loop/schedule.py): the lr each epoch's record holds follows the
schedule, a resumed run carries the schedule on, and resume refuses to change it."""
import math

import pytest

from conveyor.core import ConveyorError
from conveyor.trainer.run import train
from tests.helpers import make_config, run

LR = 0.01  # cora.yaml's


def cora(data_root, *overrides):
    return ("data=cora", f"data.root={data_root}", *overrides)


@pytest.mark.parametrize("schedule, overrides, expected", [
    ("none", [], lambda e: LR),
    ("cosine", ["trainer.lr_min=0.001"], lambda e: 0.001 + (LR - 0.001) * (1 + math.cos(math.pi * (e - 1) / 6)) / 2),
    ("step", ["trainer.lr_step_size=2", "trainer.lr_gamma=0.5"], lambda e: LR * 0.5 ** ((e - 1) // 2)),
])
def test_the_lr_of_each_epoch_follows_the_schedule(tmp_path, data_root, schedule, overrides, expected):
    _, metrics = run(tmp_path, schedule, *cora(data_root, "trainer.epochs=6", f"trainer.lr_schedule={schedule}",
                                               *overrides))
    lrs = [e["lr"] for e in metrics["epochs"]]
    assert lrs == pytest.approx([expected(e) for e in range(1, 7)], rel=1e-9)


def plateau_lrs(val_accs, lr, gamma, patience, lr_min):
    """The lr ReduceLROnPlateau(mode=max, threshold=0) gives each epoch, from the recorded val
    accuracies: it drops once more than `patience` evaluations in a row were no better."""
    best, bad, lrs = -math.inf, 0, []
    for acc in val_accs:
        lrs.append(lr)
        best, bad = (acc, 0) if acc > best else (best, bad + 1)
        if bad > patience:
            lr, bad = max(lr * gamma, lr_min), 0
    return lrs


def test_plateau_lowers_the_lr_after_evaluations_without_progress(tmp_path, data_root):
    _, metrics = run(tmp_path, "plateau", *cora(data_root, "trainer.epochs=25", "trainer.lr_schedule=plateau",
                                                "trainer.lr_patience=1", "trainer.lr_gamma=0.5",
                                                "trainer.lr_min=0.002"))
    epochs = metrics["epochs"]
    lrs = [e["lr"] for e in epochs]
    assert lrs == pytest.approx(plateau_lrs([e["val_acc"] for e in epochs], LR, 0.5, 1, 0.002), rel=1e-9)
    assert min(lrs) < LR  # the history had plateaus: the test saw the lr drop


@pytest.mark.parametrize("schedule, overrides, stop", [
    ("step", ["trainer.lr_step_size=2", "trainer.lr_gamma=0.5"], 3),
    # val acc falls after epoch 5 with F.dropout's draws (model.fast_dropout=false), which this seed was read with
    ("plateau", ["trainer.lr_patience=0", "trainer.lr_gamma=0.5", "model.fast_dropout=false"], 6),
])
def test_a_resumed_run_carries_the_schedule_on(tmp_path, data_root, schedule, overrides, stop):
    """`stop` epochs, then resumed to 8: the lrs (and so the losses) of one 8-epoch run."""
    common = cora(data_root, f"trainer.lr_schedule={schedule}", *overrides)
    _, whole = run(tmp_path, "whole", *common, "trainer.epochs=8")
    run(tmp_path, "resumed", *common, f"trainer.epochs={stop}")
    _, resumed = run(tmp_path, "resumed", *common, "trainer.epochs=8", "run.resume=true")
    lrs = [e["lr"] for e in whole["epochs"]]
    assert [e["lr"] for e in resumed["epochs"]] == lrs
    assert lrs[stop] < lrs[stop - 1] or lrs[stop + 1] < lrs[stop]  # it moves right at the resume
    assert [e["loss"] for e in resumed["epochs"]] == pytest.approx([e["loss"] for e in whole["epochs"]], rel=1e-5)


@pytest.mark.parametrize("schedule, change, key", [
    ("cosine", "trainer.epochs=3", "trainer.epochs"),
    ("cosine", "trainer.lr=0.005", "trainer.lr"),
    ("step", "trainer.lr_schedule=cosine", "trainer.lr_schedule"),
    ("none", "trainer.lr_schedule=step", "trainer.lr_schedule"),
    ("step", "trainer.lr_gamma=0.3", "trainer.lr_gamma"),
])
def test_resume_refuses_another_schedule(tmp_path, data_root, schedule, change, key):
    common = cora(data_root, f"run.out_dir={tmp_path}", f"trainer.lr_schedule={schedule}")
    train(make_config(*common, "trainer.epochs=2"))
    with pytest.raises(ConveyorError, match=f"{key}: .* in the checkpoint"):
        train(make_config(*common, "trainer.epochs=2", "run.resume=true", change))
