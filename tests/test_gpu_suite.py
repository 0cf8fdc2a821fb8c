"""The GPU validation suite's CPU dry run (`benchmarks/gpu/suite.py all --device cpu --tiny`):
every step runs end to end on a small graph, writes its JSON with its key figures, and the
summary table lists them, so the suite that a GPU machine runs does not rot between GPU windows."""
import json
import subprocess
import sys

import pytest

from tests.configs import REPO

STEPS = ("setup", "env", "tests", "sanitize", "bench", "e2e", "summary")


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    results = tmp_path_factory.mktemp("gpu-suite")
    proc = subprocess.run([sys.executable, "benchmarks/gpu/suite.py", "all", "--device", "cpu", "--tiny",
                           "--results", str(results), "--wheels", str(results / "no-wheels")],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    return results, {step: json.loads((results / f"{step}.json").read_text()) for step in STEPS}


def test_every_step_ran_and_wrote_its_figures(dry_run):
    _, r = dry_run
    assert {step: r[step]["status"] for step in STEPS} == {
        "setup": "passed", "env": "passed", "tests": "passed", "sanitize": "skipped", "bench": "passed",
        "e2e": "passed", "summary": "passed"}
    assert r["setup"]["graph"]["nodes"] == 12245 and r["env"]["python"]["torch"]
    assert r["tests"]["passed"] > 0 and r["tests"]["failed"] == r["tests"]["errors"] == 0
    assert "no CUDA device" in r["sanitize"]["reason"] and r["sanitize"]["target"]["ok"]
    bench = r["bench"]["benchmarks"]
    assert bench["sampling"]["bsp_ms"] > 0 and bench["sampling"]["bsp_edges_per_s"] > 0
    assert 0 < bench["cache"]["hit_ratio"] <= 1 and bench["cache"]["gather_gb_s"] > 0
    pipeline = bench["pipeline"]
    assert pipeline["serial_epoch_s"] > 0 and pipeline["slowest_stage_s"] > 0
    assert pipeline["async"]["epoch_s"] > 0 and pipeline["async"]["overlap_efficiency"] > 0
    assert pipeline["async"]["ipc_ms_per_batch"] > 0
    conveyor, pyg = r["e2e"]["systems"]["conveyor"], r["e2e"]["systems"]["pyg"]
    assert conveyor["steady_epoch_s"] > 0 and 0 <= conveyor["test_acc"] <= 1
    assert pyg["status"] in ("passed", "skipped")  # skipped where torch_sparse is not installed
    for step in STEPS[:-1]:
        assert r[step]["commit"] and r[step]["device"] == "cpu-tiny"


def test_the_summary_table_lists_the_headline_figures(dry_run):
    results, r = dry_run
    summary = (results / "summary.md").read_text()
    for figure in ("fused, bsp, pyg", "sampled edges/s", "cache hit ratio", "gather GB/s",
                   "async vs serial", "slowest stage alone", "GPU utilisation", "IPC per batch",
                   "conveyor vs PyG reference", "tests on the device", "compute-sanitizer"):
        assert figure in summary, figure
    bench = r["bench"]["benchmarks"]
    assert f"bsp {bench['sampling']['bsp_ms']:.2f}" in summary
    assert f"{bench['cache']['hit_ratio']:.3f}" in summary
    assert f"{bench['pipeline']['async']['epoch_s']:.2f} vs {bench['pipeline']['serial_epoch_s']:.2f} s" in summary
    assert f"{r['e2e']['systems']['conveyor']['steady_epoch_s']:.2f} vs" in summary
    assert "python benchmarks/pipeline.py --device cpu" in summary and "python launch.py model=sage" in summary
