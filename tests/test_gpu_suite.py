"""The GPU validation suite's CPU dry run: each phase of `benchmarks/gpu/device.py` runs as the
device tool runs it, `--device cpu --tiny`, on a fresh copy of the tree with nothing cached (no
graph, no installs, no prepared wheels) and `$OUT` a temporary folder, so the three calls a GPU
machine gets do not rot between GPU windows. Phase 3 runs with phases 1 and 2 unpacked into its
results, as README's "Validating on a GPU" says to commit them, so its summary covers all three."""
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tarfile

import pytest

from tests.helpers import REPO

STEPS = {
    1: {"env": "passed", "smoke": "passed", "sanitize": "skipped", "tests_gpu": "passed", "tests_stages": "skipped"},
    2: {"env": "passed", "smoke": "passed", "graph": "passed", "sampling": "passed", "stress": "passed",
        "cache": "passed", "pipeline": "passed"},
    3: {"env": "passed", "smoke": "passed", "graph": "passed", "e2e_fused": "passed", "e2e_pyg": "passed",
        "e2e_bsp": "passed"},
}


def fresh_tree(destination):
    """The files the device tool sends: tracked, and untracked ones git does not ignore."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO, capture_output=True,
                            check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        if (REPO / name).is_file():
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, destination / name)
    return destination


@pytest.fixture(scope="module")
def phases(tmp_path_factory, data_root):
    runs, archives = {}, []
    for phase in STEPS:
        tree = fresh_tree(tmp_path_factory.mktemp(f"tree{phase}"))
        results = tree / "benchmarks" / "results" / "cpu-tiny"
        for archive in archives:  # the earlier calls' results, unpacked as README says
            with tarfile.open(archive) as tar:
                tar.extractall(results, filter="data")
        out = tmp_path_factory.mktemp(f"out{phase}")
        env = {**os.environ, "OUT": str(out), "CONVEYOR_TEST_DATA": str(data_root)}  # the tests' Planetoid files
        proc = subprocess.run([sys.executable, "benchmarks/gpu/device.py", str(phase), "--device", "cpu", "--tiny",
                               "--budget", "900"], cwd=tree, env=env, capture_output=True, text=True, timeout=1000)
        runs[phase] = (proc, out)
        archives.append(out / f"phase{phase}.tar.gz")
    return runs


@pytest.mark.parametrize("phase", STEPS)
def test_each_phase_passes_and_returns_its_three_files(phases, phase):
    proc, out = phases[phase]
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-2000:]
    files = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    assert files == sorted([f"phase{phase}.tar.gz", f"phase{phase}.json", "summary.md"])  # the tool takes 8 at most
    record = json.loads((out / f"phase{phase}.json").read_text())
    assert {name: r["status"] for name, r in record["steps"].items()} == STEPS[phase]
    assert record["device"] == "cpu-tiny" and record["commit"]
    with tarfile.open(out / f"phase{phase}.tar.gz") as tar:
        names = set(tar.getnames())
    assert {f"phase{phase}/{step}.json" for step in STEPS[phase]} | {f"phase{phase}/console.log"} <= names


def test_the_figures_reach_the_json_and_the_summary(phases):
    steps = {n: json.loads((out / f"phase{n}.json").read_text())["steps"] for n, (_, out) in phases.items()}
    env = steps[1]["env"]
    assert env["install"]["modules"]["torch_sparse"] and env["python"]["pyg_sampling"] in ("torch_sparse", "pyg-lib")
    assert [v["batches"] for v in steps[1]["smoke"]["variants"]] == [1, 2]
    assert steps[1]["tests_gpu"]["passed"] > 0 and steps[1]["tests_gpu"]["failed"] == 0
    assert "no CUDA device" in steps[1]["sanitize"]["reason"] and steps[1]["sanitize"]["target"]["ok"]
    sampling, stress, cache, pipeline = (steps[2][k] for k in ("sampling", "stress", "cache", "pipeline"))
    assert sampling["bsp_ms"] > 0 and sampling["pyg_ms"] > 0 and sampling["pyg_batches"] == 2
    assert stress["calls"] == 3 and stress["launches"] >= 3 and stress["failures"] == []
    assert stress["checked_batches"] >= 3 and stress["replays"] == 1 and stress["overflow_reruns"] > 0
    assert 0 < cache["hit_ratio"] <= 1 and cache["gather_gb_s"] > 0
    assert pipeline["async"]["epoch_s"] > 0 and pipeline["serial_epoch_s"] > 0
    assert pipeline["mps"] is None  # CPU: no MPS run to start
    for name in ("e2e_fused", "e2e_pyg", "e2e_bsp"):
        assert steps[3][name]["steady_epoch_s"] > 0 and 0 <= steps[3][name]["test_acc"] <= 1, name
    assert "sampler=fused" in steps[3]["e2e_fused"]["command"] and "sampler=bsp" in steps[3]["e2e_bsp"]["command"]
    summary = (phases[3][1] / "summary.md").read_text()  # phase 3's: every phase, as committed
    for figure in ("smoke launch", "compute-sanitizer", "fused, bsp, pyg", "stress:", "cache hit ratio",
                   "async vs serial", "end-to-end steady epoch s", "end-to-end test accuracy"):
        assert figure in summary, figure
    assert f"bsp {sampling['bsp_ms']:.2f}" in summary and f"{cache['hit_ratio']:.3f}" in summary
    assert f"{stress['calls']} calls" in summary and f"{steps[3]['e2e_fused']['steady_epoch_s']:.2f}" in summary
    assert "No step failed." in summary


def test_an_mps_daemon_that_does_not_start_is_recorded_as_unavailable(tmp_path, monkeypatch):
    """benchmarks/pipeline.py goes on without the MPS run, and says why, when the daemon fails
    (here a stand-in for nvidia-cuda-mps-control that refuses, as a VM without MPS would)."""
    daemon = tmp_path / "nvidia-cuda-mps-control"
    daemon.write_text("#!/bin/sh\necho 'MPS is not supported on this system' >&2\nexit 1\n")
    daemon.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    spec = importlib.util.spec_from_file_location("pipeline_benchmark", REPO / "benchmarks" / "pipeline.py")
    benchmark = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(benchmark)
    results = {}
    mps = benchmark.run_mps(None, results)  # never reaches a worker
    assert mps["status"] == "unavailable" and "async_mps" not in results
    assert "exited 1" in mps["reason"] and "MPS is not supported on this system" in mps["reason"]
