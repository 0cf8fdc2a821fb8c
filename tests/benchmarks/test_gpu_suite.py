"""The GPU validation suite's CPU dry run: `check`, `speed`, `speed2` and `pyg` of `python -m
benchmarks.gpu.device` run as the device tool runs them (`--device cpu --tiny`, each on a fresh
copy of the tree with nothing cached, `$OUT` a temporary folder, the call timeouts of
benchmarks/gpu/README.md), so every command line they build is executed (the sanitizer's through
its stand-in) and the calls a GPU machine gets do not rot between GPU windows. The timeouts are
scaled by how slowly this machine starts a child (a bare `import torch, torch_geometric`, timed
first, against REFERENCE_STARTUP_S): the steps' limits scale with them, so a loaded machine runs
the same plan, only slower. Each call after the first runs with the earlier calls' archives
unpacked into its results, as the README says to commit them, so the last summary covers all of
them. A call killed midway must have returned every step it finished. The plan itself (step
limits within each call's budget, the two calls of a chance within its 15 minutes, partial steps
and `next`) is checked without running it."""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import time
import zipfile

import psutil
import pytest

from benchmarks.gpu import common, device, install, plan, prepare
from benchmarks.gpu.checks import judge_pytest, verbose_counts
from benchmarks.gpu.common import Context, Outcome
from tests.helpers import REPO

EXPECTED = {
    "check": {"env": "passed", "smoke": "passed", "tests_gpu": "passed", "stress": "passed", "sanitize": "skipped",
              "racecheck": "skipped"},
    "speed": {"env": "passed", "graph": "passed", "sampling": "passed", "e2e_fused": "passed", "e2e_bsp": "passed"},
    "speed2": {"env": "passed", "graph": "passed", "cache": "passed", "pipeline": "passed"},
    "pyg": {"env": "passed", "graph": "passed", "sampling_pyg": "passed", "e2e_pyg": "passed"},
}
TIMEOUTS = {"check": 420, "speed": 330, "speed2": 330, "pyg": 600}  # as benchmarks/gpu/README.md gives them
REFERENCE_STARTUP_S = 4.0  # a bare `import torch, torch_geometric` on this project's 2-core machine, idle


@pytest.fixture(scope="module")
def slowness():
    """How much slower than REFERENCE_STARTUP_S this machine starts a child now (at least 1): the
    dry run's timeouts, and so its steps' limits, scale by it."""
    start = time.monotonic()
    subprocess.run([sys.executable, "-c", "import torch, torch_geometric"], check=True, timeout=1800)
    return max(1.0, (time.monotonic() - start) / REFERENCE_STARTUP_S)


def fresh_tree(destination):
    """The files the device tool sends: tracked, and untracked ones git does not ignore."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO, capture_output=True,
                            check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        if (REPO / name).is_file():
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, destination / name)
    return destination


def device_call(tree, out, data_root, command, timeout, **popen):
    """`python -m benchmarks.gpu.device COMMAND --device cpu --tiny --timeout T` in `tree`, files to `out`."""
    env = {**os.environ, "OUT": str(out), "CONVEYOR_TEST_DATA": str(data_root)}  # the tests' Planetoid files
    cmd = [sys.executable, "-m", "benchmarks.gpu.device", command, "--device", "cpu", "--tiny",
           "--timeout", f"{timeout:.0f}"]
    return subprocess.Popen(cmd, cwd=tree, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            **popen)


def carried_wheels(folder):
    """A prepared folder as it travels in a call's carry, with one real wheel of a module nothing
    here has: the env step must install it offline (pip --no-index --target) for the children; and
    one optional wheel pip refuses (not a zip): a note, not a failure."""
    folder.mkdir()
    wheel = folder / "gpu_suite_probe-1.0-py3-none-any.whl"
    info = "gpu_suite_probe-1.0.dist-info"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("gpu_suite_probe/__init__.py", "CARRIED = True\n")
        zf.writestr(f"{info}/METADATA", "Metadata-Version: 2.1\nName: gpu-suite-probe\nVersion: 1.0\n")
        zf.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        zf.writestr(f"{info}/RECORD", "")
    broken = folder / "gpu_suite_optional-1.0-py3-none-any.whl"
    broken.write_bytes(b"not a wheel")
    manifest = {"python": "3.12", "torch": "2.11.0", "commit": "prepared", "planetoid": None,
                "wheels": [{"file": wheel.name, "module": "gpu_suite_probe", **prepare.digest(wheel)},
                           {"file": broken.name, "module": "gpu_suite_optional", **prepare.digest(broken)}]}
    (folder / "manifest.json").write_text(json.dumps(manifest))


@pytest.fixture(scope="module")
def calls(tmp_path_factory, data_root, slowness):
    runs, archives = {}, []
    for command in EXPECTED:
        tree = fresh_tree(tmp_path_factory.mktemp(f"tree-{command}"))
        results = tree / "benchmarks" / "results" / "cpu-tiny"
        for archive in archives:  # the earlier calls' results, unpacked as the README says
            with tarfile.open(archive) as tar:
                tar.extractall(results, filter="data")
        if command == "check":
            carried_wheels(tree / ".gpu-wheels")
        out = tmp_path_factory.mktemp(f"out-{command}")
        start, timeout = time.monotonic(), TIMEOUTS[command] * slowness
        proc = device_call(tree, out, data_root, command, timeout)
        output, _ = proc.communicate(timeout=timeout + 60)
        runs[command] = {"rc": proc.returncode, "output": output, "out": out, "results": results,
                         "seconds": time.monotonic() - start, "timeout": timeout}
        archives.append(out / f"{command}.tar.gz")
    return runs


def record(call, command):
    return json.loads((call["out"] / f"{command}.json").read_text())


@pytest.mark.parametrize("command", EXPECTED)
def test_each_command_passes_and_returns_its_three_files(calls, command):
    call = calls[command]
    assert call["rc"] == 0, call["output"][-6000:]
    files = sorted(p.relative_to(call["out"]).as_posix() for p in call["out"].rglob("*") if p.is_file())
    assert files == sorted([f"{command}.json", f"{command}.tar.gz", "summary.md"])  # the tool takes 8 at most
    found = record(call, command)
    assert {name: r["status"] for name, r in found["steps"].items()} == EXPECTED[command]
    assert found["finished"] and found["device"] == "cpu-tiny" and found["commit"]
    assert found["budget_s"] == pytest.approx(round(call["timeout"]) - device.MARGIN_S)
    assert sum(step["seconds"] for step in found["steps"].values()) <= found["budget_s"]
    assert found["fused_source"] == plan.fused_source()  # what `next` compares with
    with tarfile.open(call["out"] / f"{command}.tar.gz") as tar:
        names = set(tar.getnames())
    assert {f"{command}/{step}.json" for step in EXPECTED[command]} | {f"{command}/console.log"} <= names
    assert all(step["log_tail"] or name == "env" for name, step in found["steps"].items())


def test_every_command_line_ran_and_the_figures_reach_the_summary(calls):
    check, speed, speed2, pyg = (record(calls[c], c)["steps"] for c in EXPECTED)
    install_ = check["env"]["install"]
    assert install_["installed"] == ["gpu_suite_probe"] and install_["modules"]["hydra"]  # the carried wheel
    assert list(install_["refused"]) == ["gpu_suite_optional"] and "gpu_suite_optional" in install_["note"]
    assert speed["env"]["install"]["note"].startswith("no .gpu-wheels/manifest.json")
    cache = check["env"]["triton_cache"]
    assert cache["status"] == "not used" and cache["device_key"]["capability"] == 90  # the probe ran; no cache on CPU
    smoke = [(v["weighted"], v["batches"]) for v in check["smoke"]["variants"]]
    assert smoke == [(False, 1), (True, 1), (False, 2)]  # the weighted kernel launched alone, under the limit
    tests = check["tests_gpu"]
    assert tests["passed"] > 0 and tests["failed"] == 0 and "--timeout-method thread" in tests["command"]
    assert "-p benchmarks.gpu.pytest_order" in tests["command"] and tests["order"]["weighted"] > 0
    stress = check["stress"]["stress"]
    assert stress["calls"] == 3 and stress["launches"] >= 3 and stress["failures"] == []
    assert stress["checked_batches"] >= 3 and stress["replays"] == 1 and stress["overflow_reruns"] > 0
    assert stress["weighted_calls"] >= 1
    tools = {**check["sanitize"]["tools"], **check["racecheck"].get("tools", {})}
    assert {"memcheck", "synccheck"} <= set(tools)
    assert all(t["target_ok"] and t["target"]["weighted_launches"] > 0 for t in tools.values())  # --quick accepted
    assert all("sanitizer_standin --tool" in c and c.endswith("--quick") for c in check["sanitize"]["commands"][1:])
    assert speed["sampling"]["fused_ms"] > 0 and speed["sampling"]["bsp_ms"] > 0
    assert 0 < speed2["cache"]["hit_ratio"] <= 1 and speed2["cache"]["gather_gb_s"] > 0
    assert speed2["pipeline"]["async"]["epoch_s"] > 0 and speed2["pipeline"]["mps"] is None  # CPU: no MPS run
    for name, steps in (("e2e_fused", speed), ("e2e_bsp", speed), ("e2e_pyg", pyg)):
        assert len(steps[name]["epoch_times_s"]) == 1 and 0 <= steps[name]["test_acc"] <= 1, name
    assert pyg["sampling_pyg"]["pyg_ms"] > 0 and pyg["sampling_pyg"]["pyg_batches"] == 2
    assert pyg["env"]["python"]["pyg_sampling"] in ("torch_sparse", "pyg-lib")
    assert "pyg_sampling" not in check["env"]["python"]  # only `pyg` asks for torch_sparse
    summary = (calls["pyg"]["out"] / "summary.md").read_text()  # pyg's: every command, as committed
    assert f"bsp {speed['sampling']['bsp_ms']:.2f}" in summary and f"{speed2['cache']['hit_ratio']:.3f}" in summary
    assert f"{stress['calls']} calls" in summary and f"{pyg['e2e_pyg']['epoch_s']:.2f}" in summary
    assert "No step failed." in summary and "Not here yet" not in summary


def test_the_gpu_tests_run_weighted_first_then_the_pipeline():
    """tests_gpu's order (benchmarks/gpu/pytest_order.py), as pytest collects `-m gpu`."""
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-p",
                           "benchmarks.gpu.pytest_order", "-m", "gpu", "tests/samplers/test_fused_sampler.py",
                           "tests/pipeline/test_gpu_pipeline.py"],
                          cwd=REPO, capture_output=True, text=True, timeout=900)
    ids = [line for line in proc.stdout.splitlines() if line.startswith("tests/")]
    order = json.loads(next(line for line in proc.stdout.splitlines() if "gpu_suite_order" in line))["gpu_suite_order"]
    weighted, pipeline = ids[:order["weighted"]], ids[order["weighted"]: order["weighted"] + order["pipeline"]]
    assert order["weighted"] >= 5 and order["pipeline"] == 2
    assert len(ids) == order["weighted"] + order["pipeline"] + order["other"]
    assert all("weight" in i or "-w" in i or "[w-" in i or "variants_a_gpu_compiles" in i for i in weighted), weighted
    assert all(i.startswith("tests/pipeline/test_gpu_pipeline.py::") for i in pipeline)
    assert not any("weight" in i or "[w-" in i or "pipeline" in i for i in ids[len(weighted) + len(pipeline):])


def test_next_runs_what_is_due(calls, tmp_path):
    results, committed = tmp_path / "cpu-tiny", calls["pyg"]["results"]  # pyg's tree holds all three
    assert plan.next_command(results)[0] == "check"
    for command, due_after in (("check", "speed"), ("speed", "speed2"), ("speed2", "pyg"), ("pyg", None)):
        shutil.copytree(committed / command, results / command)
        assert plan.next_command(results)[0] == due_after, command
    path = results / "check" / "result.json"
    edited = json.loads(path.read_text())
    path.write_text(json.dumps({**edited, "fused_source": {"sha256": "0" * 64}}))  # measured on another kernel
    command, reason = plan.next_command(results)
    assert command == "check" and "source changed" in reason
    path.write_text(json.dumps({**edited, "finished": False}))  # a call stopped midway
    assert plan.next_command(results)[0] == "check"
    steps = {**edited["steps"], "tests_gpu": {**edited["steps"]["tests_gpu"], "status": "partial"}}
    path.write_text(json.dumps({**edited, "steps": steps}))  # a step stopped at its limit
    command, reason = plan.next_command(results)
    assert command == "check" and "stopped at their limits: tests_gpu" in reason


def test_next_with_nothing_due_says_so(calls, tmp_path):
    out = tmp_path / "out"
    env = {**os.environ, "OUT": str(out)}
    proc = subprocess.run([sys.executable, "-m", "benchmarks.gpu.device", "next", "--device", "cpu", "--tiny",
                           "--results", str(calls["pyg"]["results"])], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads((out / "next.json").read_text())["command"] is None


def session_processes(sid):
    found = []
    for proc in psutil.process_iter():
        try:
            if os.getsid(proc.pid) == sid:
                found.append(proc)
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue
    return found


def wait_for_steps(out, command, steps, proc, limit_s=240):
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            done = json.loads((out / f"{command}.json").read_text())["steps"]
        except (OSError, json.JSONDecodeError):
            done = {}
        if set(steps) <= set(done):
            return
        time.sleep(0.5)
    raise AssertionError(f"{steps} did not finish: {proc.poll()}")


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_a_call_stopped_midway_has_returned_its_finished_steps(tmp_path, data_root, sig, slowness):
    """The device tool ends a call at its timeout: what had finished is in $OUT, and nothing of
    the call runs on (the suite's children stay in the call's session)."""
    tree, out = fresh_tree(tmp_path / "tree"), tmp_path / "out"
    proc = device_call(tree, out, data_root, "check", TIMEOUTS["check"] * slowness, start_new_session=True)
    try:
        wait_for_steps(out, "check", ["env", "smoke"], proc, limit_s=240 * slowness)
        if sig == signal.SIGKILL:  # as a tool that ends the whole session at once
            for child in session_processes(proc.pid):
                child.kill()
        else:
            proc.send_signal(sig)
        proc.communicate(timeout=60 * slowness)
    finally:
        for child in session_processes(proc.pid):
            child.kill()
    found = record({"out": out}, "check")
    assert not found["finished"]
    assert found["steps"]["env"]["status"] == found["steps"]["smoke"]["status"] == "passed"
    with tarfile.open(out / "check.tar.gz") as tar:
        assert {"check/env.json", "check/smoke.json"} <= set(tar.getnames())
    if sig == signal.SIGTERM:  # the driver had time to say where it stopped, and to end its child
        assert proc.returncode == 143 and "during" in found["stopped"]
        assert "killed" in [s["status"] for s in found["steps"].values()]
        assert session_processes(proc.pid) == []


def test_a_sanitizer_line_the_target_refuses_fails(tmp_path):
    """The stand-in runs the target with its arguments: one it does not accept exits 2, as on a GPU."""
    target = [sys.executable, "-m", "benchmarks.gpu.sanitize_target", "--device", "cpu", "--tiny", "--unknown"]
    proc = subprocess.run([sys.executable, "-m", "benchmarks.gpu.sanitizer_standin", "--tool", "memcheck",
                           "--print-limit", "20", *target], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "unrecognized arguments: --unknown" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "benchmarks.gpu.sanitizer_standin", "--tool", "memcheck",
                           "--leak-check", "full", *target[:-1]], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "--leak-check" in proc.stderr  # an option the suite never gives


def test_the_sanitizer_target_after_a_failed_smoke_launch_checks_the_cache_alone():
    """The line `sanitize` builds when the smoke launch failed (not taken in the dry run, where it passes)."""
    proc = subprocess.run([sys.executable, "-m", "benchmarks.gpu.sanitize_target", "--device", "cpu", "--tiny",
                           "--no-fused"], cwd=REPO, capture_output=True, text=True, timeout=300)
    report = json.loads(proc.stdout.splitlines()[-1])
    assert proc.returncode == 0 and report["launches"] == 0 and report["gathers"] > 0


def test_a_stress_run_without_calls_fails(tmp_path):
    out = tmp_path / "stress.json"
    proc = subprocess.run([sys.executable, "-m", "benchmarks.gpu.stress", "--device", "cpu", "--tiny", "--calls", "0",
                           "--batch-counts", "1", "--out", str(out)], cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    report = json.loads(out.read_text())
    assert proc.returncode == 1 and report["status"] == "failed" and "no call" in report["reason"]


@pytest.mark.parametrize("rc, counts", [(5, (0, 0)), (0, (0, 3))], ids=["nothing collected", "all skipped"])
def test_a_pytest_run_that_tested_nothing_fails(tmp_path, rc, counts):
    result = {"passed": counts[0], "failed": 0, "errors": 0, "skipped": counts[1], "failures": []}
    assert judge_pytest(result, Outcome(rc, 1.0, tmp_path / "log", ""))["status"] == "failed"
    assert judge_pytest({**result, "passed": 1}, Outcome(0, 1.0, tmp_path / "log", ""))["status"] == "passed"


# -- --prepare: a shared prepared folder first ---------------------------------------------------

def shared_folder(folder, **changes):
    """A prepared folder as --prepare writes it, of small stand-in files with their real sha256."""
    folder.mkdir(parents=True, exist_ok=True)
    names = {"hydra": "hydra_core-1.3.2", "omegaconf": "omegaconf-2.3.0", "antlr4": "antlr4_python3_runtime-4.9.3",
             "ogb": "ogb-1.3.6", "outdated": "outdated-0.2.2", "littleutils": "littleutils-0.2.4",
             "pymetis": "pymetis-2025.2.2", "torch_scatter": "torch_scatter-2.1.2",
             "torch_sparse": "torch_sparse-0.6.18", **changes.pop("names", {})}
    wheels = []
    for module, name in names.items():
        file = folder / f"{name}-cp312-cp312-linux_x86_64.whl"
        file.write_bytes(f"stand-in for {name}".encode())
        built = {"built_against": "torch==2.11.0"} if module in install.COMPILED_MODULES else {}
        wheels.append({"file": file.name, "module": module, **built, **prepare.digest(file)})
    (folder / "planetoid-raw.tar.gz").write_bytes(b"stand-in planetoid")
    cache = folder / "triton-cache.tar.gz"
    cache.write_bytes(b"stand-in Triton cache")
    manifest = {"python": "3.12", "torch": "2.11.0", "wheels": wheels,
                "planetoid": {"file": "planetoid-raw.tar.gz", **prepare.digest(folder / "planetoid-raw.tar.gz")},
                "triton_cache": {"file": cache.name, **prepare.digest(cache), "variants": ["products-shaped x1"],
                                 "refused": [], "fused_source": plan.fused_source()["sha256"],
                                 "key": {"triton": "3.6.0", "capability": 90}},
                **changes}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


def test_prepare_takes_a_fitting_shared_folder_and_builds_nothing(tmp_path):
    shared, out = shared_folder(tmp_path / "shared"), tmp_path / "prepared"
    assert prepare.prepare(out, shared) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert all(w["from"] == str(shared) for w in manifest["wheels"]) and manifest["planetoid"]["from"] == str(shared)
    assert manifest["triton_cache"]["from"] == str(shared)  # made for this kernel source: nothing compiled
    assert manifest["serves"] == ["check", "speed", "speed2", "pyg"] and manifest["problems"] == []
    for entry in manifest["wheels"]:
        assert prepare.digest(out / entry["file"])["sha256"] == entry["sha256"]
    check, pyg = (Context("cuda", False, "h100", tmp_path, out, command=c) for c in ("check", "pyg"))
    assert not {"torch_scatter", "torch_sparse"} & {w["module"] for w in install.wanted_wheels(check, manifest)}
    assert {"torch_scatter", "torch_sparse"} <= {w["module"] for w in install.wanted_wheels(pyg, manifest)}


def test_prepare_leaves_what_does_not_fit(tmp_path):
    shared = shared_folder(tmp_path / "a", names={"hydra": "hydra_core-1.4.0"})  # outside pyproject's <1.4
    fit, unfit, _ = prepare.from_shared(shared)
    assert "hydra" in unfit and "pin" in unfit["hydra"] and "omegaconf" in fit
    manifest = json.loads((shared / "manifest.json").read_text())
    for entry in manifest["wheels"]:
        entry["built_against"] = "torch==2.10.0" if "built_against" in entry else None
    (shared / "manifest.json").write_text(json.dumps(manifest))
    (shared / "ogb-1.3.6-cp312-cp312-linux_x86_64.whl").write_bytes(b"changed after it was recorded")
    fit, unfit, _ = prepare.from_shared(shared)
    assert {"torch_scatter", "torch_sparse", "ogb", "hydra"} == set(unfit) and "torch==2.10.0" in unfit["torch_sparse"]
    fit, unfit, _ = prepare.from_shared(shared_folder(tmp_path / "b", python="3.11"))
    assert fit == {} and all("Python 3.11" in why for why in unfit.values())


def test_an_mps_daemon_that_does_not_start_is_recorded_as_unavailable(tmp_path, monkeypatch):
    """benchmarks/pipeline.py goes on without the MPS run, and says why, when the daemon fails
    (here a stand-in for nvidia-cuda-mps-control that refuses, as a VM without MPS would)."""
    daemon = tmp_path / "nvidia-cuda-mps-control"
    daemon.write_text("#!/bin/sh\necho 'MPS is not supported on this system' >&2\nexit 1\n")
    daemon.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    from benchmarks import pipeline as benchmark
    results = {}
    mps = benchmark.run_mps(None, results)  # never reaches a worker
    assert mps["status"] == "unavailable" and "async_mps" not in results
    assert "exited 1" in mps["reason"] and "MPS is not supported on this system" in mps["reason"]


# -- the plan: each call within its budget, the two calls of a chance within its minutes -----------

def readme_table():
    """Each command's row of benchmarks/gpu/README.md's table: (--timeout, time limit, budget,
    {step: limit})."""
    text = (REPO / "benchmarks" / "gpu" / "README.md").read_text()
    rows = re.findall(r"^\| \d \| `[^`]*device (\w+) --timeout (\d+)[^`]*` \| (\d+) s \| (\d+) s \| (.*) \|$",
                      text, re.M)
    return {command: (int(flag), int(limit), int(budget), {s: int(n) for s, n in re.findall(r"`(\w+)` (\d+)", steps)})
            for command, flag, limit, budget, steps in rows}


@pytest.mark.parametrize("command", TIMEOUTS)
def test_each_calls_step_limits_add_up_to_at_most_its_budget(command):
    """At the timeout the README documents, the steps' limits fit the budget; at any other budget
    they are scaled to it (so a call given the time that is left still fits)."""
    budget = TIMEOUTS[command] - device.MARGIN_S
    steps = device.COMMANDS[command]
    limits = {step.name: step.limit_s for step in steps if not step.optional}
    assert readme_table()[command] == (TIMEOUTS[command], TIMEOUTS[command], budget, limits)
    assert device.TIMEOUTS[command] == TIMEOUTS[command]
    print(f"{command}: timeout {TIMEOUTS[command]} s, budget {budget} s, limits "
          + ", ".join(f"{s.name} {s.limit_s:g}" for s in steps) + f": sum {sum(s.limit_s for s in steps):g} s")
    assert sum(step.limit_s for step in steps) <= budget
    for scaled in (budget / 3, budget, 4 * budget):
        allotted = device.allotments(command, scaled)
        assert sum(allotted) == pytest.approx(scaled) and min(allotted) >= 0
    optional = [step for step in steps if step.optional]
    assert all(step.limit_s == 0 and step.least_s > 0 for step in optional)  # they run on what is left


def test_the_two_calls_of_a_chance_fit_its_device_time():
    """check, then speed at once: with the machine's start and the transfers, within 15 minutes."""
    used = device.MACHINE_START_S + TIMEOUTS["check"] + TIMEOUTS["speed"] + device.TRANSFERS_S
    assert used <= device.CHANCE_S == 15 * 60


def test_a_child_cut_at_its_steps_end_is_partial_with_what_it_wrote(tmp_path, slowness):
    """A child that ignores SIGTERM is killed by the step's end, and its pytest lines make the step
    partial, not failed; one FAILED line makes it failed."""
    ctx = Context("cpu", True, "cpu-tiny", tmp_path, tmp_path, command="check")
    step_s = 5 + 5 * slowness  # the child gets this less the TERM-to-KILL grace: time to start and print
    ctx.step_deadline = time.monotonic() + step_s
    code = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
            "for i in range(118): print(f'tests/test_x.py::test_{i} PASSED')\n"
            "print('tests/test_x.py::test_wait', flush=True); time.sleep(600)")
    start = time.monotonic()
    outcome = common.run_logged(ctx, "pytest", [sys.executable, "-c", code], quiet=True)
    assert outcome.cut and time.monotonic() - start < step_s + 5  # TERM by the step's end less 5 s, KILL 5 s later
    result = judge_pytest({**verbose_counts(outcome.output)}, outcome)
    assert result["status"] == "partial" and result["reason"] == "partial: 118 passed, 0 failed, stopped at its limit"
    failing = verbose_counts(outcome.output + "tests/test_x.py::test_bad FAILED\n")
    assert judge_pytest(failing, outcome)["status"] == "failed"


def test_a_probe_is_stopped_term_then_kill(tmp_path):
    start = time.monotonic()
    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
    assert common.capture([sys.executable, "-c", code], timeout=2) is None
    assert time.monotonic() - start < 2 + common.GRACE_S + 3
