"""benchmarks/dropout.py and benchmarks/dropout_accuracy.py, run small: each says how it ran, and
its ratios and differences are what its own figures give."""
import json
import statistics
import subprocess
import sys

import pytest

from tests.helpers import REPO


def run(*args, timeout=600):
    proc = subprocess.run([sys.executable, *args], cwd=REPO, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_step_time_benchmark(tmp_path, synthetic_small, data_root):
    out = tmp_path / "dropout.json"
    run("-m", "benchmarks.dropout", "--data-root", str(data_root), "--scale", "0.002", "--batch-size", "64",
        "--fanouts", "5,5", "--hidden", "16", "--threads", "1,2", "--repeats", "3", "--out", str(out))
    report = json.loads(out.read_text())
    assert [r["threads"] for r in report["rows"]] == [1, 2]
    for row in report["rows"]:
        assert "load_1min" in row
        for part in ("step", "dropout_alone"):
            figures = row[part]
            assert len(figures["ratios"]) == 3 and figures["ratio"] == statistics.median(figures["ratios"])
    assert report["meta"]["command"] in out.with_suffix(".md").read_text()


def test_accuracy_benchmark(tmp_path, data_root):
    out = tmp_path / "accuracy.json"
    run("-m", "benchmarks.dropout_accuracy", "--data-root", str(data_root), "--seeds", "2", "--cases", "sage on cora",
        "--out", str(out))
    case = json.loads(out.read_text())["cases"]["sage on cora"]
    assert len(case["fast"]) == len(case["f_dropout"]) == 2 and all(0.5 < a <= 1 for a in case["fast"])
    assert case["diff_mean"] == pytest.approx(statistics.mean(case["fast"]) - statistics.mean(case["f_dropout"]))
    assert "| sage on cora |" in out.with_suffix(".md").read_text()
