"""`python launch.py ...` as a user runs it: clear errors, --help, and kill-then-resume."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.helpers import REPO, assert_clear_error, launch, make_config, write_custom_dataset


def test_products_offline_fails_fast_with_where_to_put_it(tmp_path):
    result = launch("data=products", f"data.root={tmp_path / 'data'}", f"run.out_dir={tmp_path / 'run'}")
    assert_clear_error(result, "ogbn", str(tmp_path / "data"))


@pytest.mark.parametrize("override, words", [
    ("sampler.fanouts=[5,-2]", ["fanouts", "integers >= 0"]),
    ("trainer.batch_size=0", ["trainer.batch_size"]),
    ("model.name=transformer", ["model.name", "sage"]),
    ("data.name=imagenet", ["imagenet"]),
])
def test_bad_config_values_give_one_clear_paragraph(tmp_path, override, words):
    assert_clear_error(launch(override, f"run.out_dir={tmp_path / 'run'}"), *words)


def test_unknown_group_option_lists_the_choices(tmp_path):
    result = launch("model=transformer", f"run.out_dir={tmp_path / 'run'}")
    assert result.returncode != 0
    assert "transformer" in result.stderr and "sage" in result.stderr and "Traceback" not in result.stderr


def test_empty_train_split(tmp_path):
    graph_dir = write_custom_dataset(tmp_path / "g", train_idx=[], val_idx=range(10), test_idx=range(10, 50))
    result = launch("data=custom", f"data.path={graph_dir}", f"run.out_dir={tmp_path / 'run'}")
    assert_clear_error(result, "train")


def test_help_lists_groups_and_keys():
    result = launch("--help")
    assert result.returncode == 0
    for word in ("model:", "sage", "gcn", "data:", "synthetic", "products", "sampler:", "fused", "bsp",
                 "cache:", "degree", "pipeline:", "trainer:", "fanouts", "out_dir"):
        assert word in result.stdout, word


def line_of(text: str, start: str) -> str:
    return next(line for line in text.splitlines() if line.strip().startswith(start))


def test_help_gives_each_key_its_default_and_meaning():
    """The meanings are the YAML comments; the defaults follow the options given with --help."""
    shown = launch("data=cora", "--help").stdout
    assert "batches between reads of the loss" in line_of(shown, "trainer.log_every=50")
    assert "neighbours drawn per node" in line_of(shown, "sampler.fanouts=[10,10]")
    assert "Adam's learning rate" in line_of(shown, "trainer.lr=0.01")  # cora's own default
    assert "PyG's NormalizeFeatures" in line_of(shown, "data.normalize_features=true")
    assert "Device memory auto leaves free" in line_of(shown, "cache.reserve=1GiB")
    assert line_of(shown, "* cora").split()[2:4] == ["Planetoid", "cora,"]
    assert "serial where they cannot" in line_of(shown, "* auto")  # pipeline=auto: serial on cora
    assert "conveyor: error:" in launch("model=gatv3", "--help").stderr


def test_killed_run_resumes_from_its_last_checkpoint(tmp_path, data_root):
    """SIGKILL mid-run, rerun with run.resume=true: the run finishes and its curve equals an
    uninterrupted run's, because every random stream derives from (seed, epoch)."""
    out = tmp_path / "run"
    args = ["data=synthetic", f"data.root={data_root}", "data.scale=0.005", "trainer.epochs=4",
            "trainer.batch_size=64", "trainer.eval_every=4", f"run.out_dir={out}", "trainer.progress=false",
            "run.device=cpu"]
    proc = subprocess.Popen([sys.executable, str(REPO / "launch.py"), *args], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    checkpoint = out / "checkpoints" / "last.pt"
    deadline = time.time() + 240
    while not checkpoint.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None, "the run ended before it could be killed: " + proc.stderr.read().decode()[-2000:]
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    done = len(json.loads((out / "metrics.json").read_text())["epochs"])
    assert 1 <= done < 4

    resumed = launch(*args, "run.resume=true", timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    metrics = json.loads((out / "metrics.json").read_text())
    assert [e["epoch"] for e in metrics["epochs"]] == [1, 2, 3, 4]

    from conveyor.trainer.run import train
    reference_dir = tmp_path / "reference"
    train(make_config(*[a for a in args if not a.startswith("run.out_dir")], f"run.out_dir={reference_dir}"))
    reference = json.loads((reference_dir / "metrics.json").read_text())
    assert [e["loss"] for e in metrics["epochs"]] == pytest.approx([e["loss"] for e in reference["epochs"]], rel=1e-5)
    assert metrics["final"]["test_acc"] == pytest.approx(reference["final"]["test_acc"])
