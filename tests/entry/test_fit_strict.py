"""`conveyor.fit` is as strict as the command line on the same data (#29): the command line's own
checks of a dataset's arrays (partition/datasets/contents.py), what only Python can hand over
(x that requires grad, float labels, a class or a number as the model), the out_dir lock, and a
script without the `__main__` guard. Each refusal is one paragraph before any work."""
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from torch_geometric.nn import GraphSAGE

import conveyor
from conveyor.core import ConveyorError
from tests.helpers import REPO

FAST = ["trainer.progress=false"]


@pytest.fixture
def data(cora):
    # a fresh PyG Data each test, its tensors copied: to_data() shares the session's Cora tensors,
    # which these tests write into (y = -1)
    return cora.to_data().clone()


def refused(graph, *words, model=None, **kwargs):
    with pytest.raises(ConveyorError) as error:
        conveyor.fit(graph, model, fanouts=[5, 5], epochs=1, **kwargs)
    message = str(error.value)
    assert all(word in message for word in words), message
    assert "\n" not in message
    return message


@pytest.mark.parametrize("value, words", [
    (float("nan"), ["non-finite", "row 3, column 7", "np.nan_to_num"]),
    (float("inf"), ["non-finite", "row 3, column 7"]),
    (1e300, ["beyond float32's range", "row 3, column 7", "rescale"]),
])
def test_features_that_would_train_to_nan_are_refused(data, value, words, tmp_path):
    data.x = data.x.double()
    data.x[3, 7] = value
    refused(data, "x of the Data given to fit()", *words, out_dir=tmp_path / "run")
    assert not (tmp_path / "run").exists()  # before any work


def test_features_that_require_grad_are_refused(data, tmp_path):
    data.x = data.x.clone().requires_grad_()
    refused(data, "requires grad", "x.detach()", out_dir=tmp_path / "run")


def test_overlapping_splits_are_refused(data, tmp_path):
    data.val_mask[data.train_mask.nonzero()[:3, 0]] = True
    refused(data, "train_idx", "val_idx", "share 3 node(s)", "disjoint", out_dir=tmp_path / "run")


def test_a_stray_label_is_refused(data, tmp_path):
    data.y[0] = 99
    refused(data, "labels up to 99", "100 classes", "never occur", out_dir=tmp_path / "run")


@pytest.mark.parametrize("make, words", [
    (lambda y: y.float(), ["torch.float32", "shape (2708,)", "y.long()"]),
    (lambda y: torch.stack([y, y, y], 1), ["torch.int64", "shape (2708, 3)", "[N, C]", "y.float()"]),
    (lambda y: torch.stack([y, y], 1).float() * 2, ["(2708, 2)", "multi-label", "outside 0..1"]),
])
def test_labels_that_are_not_class_ids_or_targets_are_refused(data, make, words, tmp_path):
    data.y = make(data.y)
    refused(data, "y of the Data given to fit()", *words, out_dir=tmp_path / "run")


def test_unlabelled_nodes_are_refused_in_training_and_left_out_of_val(data, tmp_path):
    train = data.train_mask.nonzero()[:, 0]
    data.y[train[0]] = -1
    refused(data, "unlabelled", "train only on labelled nodes", out_dir=tmp_path / "run")
    data.y[train[0]] = 0
    val = data.val_mask.nonzero()[:, 0]
    data.y[val[:10]] = -1
    result = conveyor.fit(data, fanouts=[5, 5], epochs=1, out_dir=tmp_path / "ok", overrides=FAST)
    assert result.final["val_acc"] is not None  # over the 490 labelled validation nodes


@pytest.mark.parametrize("model, words", [
    (GraphSAGE, ["model=GraphSAGE is the class", "model=GraphSAGE(...)"]),
    (42, ["got 42 (a int)"]),
    (["sage"], ["got ['sage'] (a list)"]),
])
def test_a_model_that_is_not_none_a_name_or_a_module_is_refused(data, model, words, tmp_path):
    refused(data, "fit(model=...) takes None", "torch.nn.Module instance", *words, model=model,
            out_dir=tmp_path / "run")


def test_a_stock_model_of_other_shapes_is_refused_naming_both(data, tmp_path):
    model = GraphSAGE(data.x.size(1) + 1, 16, 3, 5)
    refused(data, "in_channels=1434", "[2708, 1433]", "out_channels=5", "class ids 0..6",
            "num_layers=3", "fanouts=[5, 5]", "GraphSAGE(1433, hidden_channels, 2, 7)", model=model,
            out_dir=tmp_path / "run")


def test_a_loss_that_is_not_callable_is_refused(data, tmp_path):
    refused(data, "fit(loss=...) takes a callable", "got a str", loss="bce", out_dir=tmp_path / "run")


def test_a_second_run_into_the_same_folder_is_refused(data, tmp_path):
    """Another process holds run.out_dir's lock, as a running fit() or command does."""
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        from conveyor.trainer.outputs.outdir import lock_out_dir
        lock_out_dir({str(tmp_path / 'run')!r}); print('locked', flush=True); time.sleep(60)""")],
        stdout=subprocess.PIPE, text=True, cwd=REPO)
    try:
        assert holder.stdout.readline().strip() == "locked"
        refused(data, "is in use by another run", f"process {holder.pid}", out_dir=tmp_path / "run")
        assert not (tmp_path / "run" / "metrics.json").exists()
    finally:
        holder.kill()
        holder.wait()
    result = conveyor.fit(data, fanouts=[5, 5], epochs=1, out_dir=tmp_path / "run", overrides=FAST)
    assert len(result.history) == 1  # the lock went with its process


SCRIPT = """\
import conveyor
from conveyor.partition.datasets import load_dataset

data = load_dataset("cora", root={root!r}).to_data()
{call}
"""
CALL = ("conveyor.fit(data, fanouts=[5, 5], epochs=1, out_dir={out!r}, "
        "overrides=['pipeline=async', 'trainer.progress=false'])")


@pytest.mark.parametrize("guarded", [False, True])
def test_a_script_trains_with_or_without_the_main_guard(guarded, data_root, tmp_path):
    """fit's stage processes get conveyor's own specs, so they start without running the script
    again (pipeline/guard.py): its top-level code runs once, guard or none."""
    call = CALL.format(out=str(tmp_path / "run")) + '\nprint("trained")'
    call = 'if __name__ == "__main__":\n' + "".join(f"    {line}\n" for line in call.splitlines()) if guarded else call
    script = tmp_path / "train.py"
    script.write_text('print("script runs")\n' + SCRIPT.format(root=str(data_root), call=call))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=600)
    assert done.returncode == 0 and "trained" in done.stdout, done.stderr[-3000:]
    assert done.stdout.count("script runs") == 1


def test_a_stage_process_rerunning_an_unguarded_script_exits_with_the_fix(tmp_path):
    """What fit() does first in a spawned process that is importing the script again (the check
    in the script's own process would have stopped an unguarded fit() call before that)."""
    script = tmp_path / "spawns.py"
    script.write_text(textwrap.dedent("""\
        import multiprocessing
        from conveyor.pipeline.guard import stop_if_reimported

        stop_if_reimported("conveyor.fit()")  # as fit() begins
        if multiprocessing.parent_process() is None:
            child = multiprocessing.get_context("spawn").Process(target=print)
            child.start()
            child.join()
            print("child exit", child.exitcode)
        """))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.stdout.strip() == "child exit 2", done.stderr
    assert done.stderr.strip().startswith("conveyor: error: conveyor.fit() starts its stage processes")
    assert f"{script} again" in done.stderr and "line 4" in done.stderr and "Traceback" not in done.stderr


def test_split_ids_that_are_a_mask_or_floats_are_read_as_such_or_refused(cora, tmp_path):
    data = cora.to_data()
    data.train_idx, data.train_mask = data.train_mask, None  # a mask under the ids' name
    result = conveyor.fit(data, fanouts=[5, 5], epochs=1, batch_size=70, out_dir=tmp_path / "ok",
                          overrides=FAST)
    assert result.history[0]["throughput_seeds_per_s"] * result.history[0]["epoch_time_s"] == pytest.approx(140)
    data.train_idx = cora.train_idx.float()
    refused(data, "data.train_idx must hold integer node ids", "torch.float32", out_dir=tmp_path / "run")
