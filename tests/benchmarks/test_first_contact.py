"""benchmarks/first_contact.py's split of a run by its metrics.json, and its table, on a planted
record (the clone, setup and run themselves take minutes: the benchmark's own result file shows them)."""
from __future__ import annotations

import json

import pytest

from benchmarks.first_contact import markdown, split_run, table


def planted_metrics(path, epochs=(2.0, 1.5), evals=(1.0, 0.5), wall=8.0):
    records = [{"epoch": i + 1, "epoch_time_s": t, "eval_time_s": e} for i, (t, e) in enumerate(zip(epochs, evals))]
    path.write_text(json.dumps({"epochs": records, "final": {"wall_time_s": wall, "test_acc": 0.5,
                                                              "best_val_acc": 0.6}}))
    return path


def record(tmp_path, name, setup, run_seconds):
    run = {"seconds": run_seconds, "returncode": 0, "load_1min": 1.0, "stderr_tail": []}
    return {"commit": name, "setup": {"seconds": setup, "returncode": 0, "load_1min": 1.0, "stderr_tail": []},
            "run": split_run(run, planted_metrics(tmp_path / f"{name}{setup}.json"))}


def test_run_split_by_its_metrics(tmp_path):
    split = record(tmp_path, "a", 30.0, 12.0)["run"]
    assert split["training"] == 3.5 and split["evaluation"] == 1.5
    assert split["startup_and_exit"] == pytest.approx(7.0) and split["before_run_clock"] == pytest.approx(4.0)
    assert split["epochs"] == 2 and split["test_acc"] == 0.5


def test_failed_run_is_not_split(tmp_path):
    run = {"seconds": 3.0, "returncode": 1, "load_1min": 1.0, "stderr_tail": ["boom"]}
    assert split_run(run, tmp_path / "missing.json") == run


def test_table_ratios_and_markdown(tmp_path):
    records = {"this": [record(tmp_path, "a", 30.0, 12.0), record(tmp_path, "a", 50.0, 16.0)],
               "previous": [record(tmp_path, "b", 60.0, 24.0), record(tmp_path, "b", 100.0, 32.0)]}
    result = table(records)
    assert result["this"]["setup"]["median"] == 40.0 and result["this"]["failed_rounds"] == 0
    assert result["ratio"]["setup"] == 0.5 and result["ratio"]["run"] == pytest.approx(14 / 28)
    assert result["round_ratios"]["total"] == [pytest.approx(42 / 84), pytest.approx(66 / 132)]
    meta = {"command": "python -m benchmarks.first_contact", "args": "", "this": "a", "previous": "b", "rounds": 2,
            "cpu": "x86_64", "cpu_count": 2, "load_1min_at_start": 1.0, "load_1min_at_end": 1.0, "uptime_at_end": "up"}
    text = markdown({"meta": meta, "records": records, "table": result})
    assert "| this (a) | 40.00 (30.00-50.00) |" in text and "setup 0.50x" in text
