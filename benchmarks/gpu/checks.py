"""`check`'s steps, which prove rather than measure: `env` (every command's: the offline install,
the modules the command needs, what machine this is), `smoke` (the fused kernel's first launches,
alone, under a hard 60 s limit), `tests_gpu` (pytest -m gpu on the GPU test modules), `stress`
(a short run of random super-batches), `sanitize` (compute-sanitizer synccheck and memcheck on
the fused kernel) and `racecheck` (when time is left).

On CPU (the dry run) every command line is executed as on a GPU: the sanitizer's through
benchmarks/gpu/sanitizer_standin.py, which accepts compute-sanitizer's options and runs the target
unchecked."""
from __future__ import annotations

import json
import re
import shutil
import xml.etree.ElementTree as ET

from benchmarks.gpu.common import (
    REPO,
    Context,
    capture,
    failed,
    last_json,
    module,
    python_json,
    read_json,
    rel,
    run_logged,
    show,
)
from benchmarks.gpu.install import install

SMOKE_LIMIT_S = 60  # hard: the kernel's first launch, before anything else touches it
PYTEST_LIMIT_S, PYTEST_TEST_TIMEOUT_S = 120, 90
STRESS_LIMIT_S, STRESS_CALLS_S = 75, 30  # the calls' seconds count after start-up (the compiles)
SANITIZE_LIMITS = {"plain": 45, "synccheck": 60, "memcheck": 75, "racecheck": 75}
QUICK_TESTS = ["-m", "not gpu and not slow", "tests/test_bsp_sampler.py"]  # the dry run's: CPU tests, quick

ENV_CODE = r"""
import importlib.metadata as md, json, os, platform, sys, torch
info = {"python": platform.python_version(), "torch": torch.__version__, "torch_cuda": torch.version.cuda,
        "cuda_available": torch.cuda.is_available(), "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads()}
for dist in ("triton", "torch_geometric", "numpy", "scipy", "hydra-core", "omegaconf", "ogb",
             "torch_scatter", "torch_sparse", "pymetis"):
    try:
        info[dist] = md.version(dist)
    except md.PackageNotFoundError:
        info[dist] = None
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    info["gpu"] = {"name": p.name, "count": torch.cuda.device_count(), "capability": f"{p.major}.{p.minor}",
                   "sm_count": p.multi_processor_count, "memory_gib": round(p.total_memory / 2**30, 1),
                   "l2_mib": round(getattr(p, "L2_cache_size", 0) / 2**20, 1)}
from conveyor.pipeline.mps import detect_mps
info["mps_daemon"] = detect_mps().describe()
if "pyg" in sys.argv[1:]:  # only `pyg` needs PyG's sampling: it loads torch_sparse, which must load into this torch
    import warnings
    with warnings.catch_warnings(record=True) as said:  # PyG warns, and goes on without it, when torch_sparse fails
        warnings.simplefilter("always")
        import torch_geometric.typing as pyg
    info["pyg_sampling"] = "pyg-lib" if pyg.WITH_PYG_LIB else "torch_sparse" if pyg.WITH_TORCH_SPARSE else None
    info["pyg_warnings"] = [str(w.message)[:500] for w in said if "sparse" in str(w.message) or "pyg" in str(w.message)]
print(json.dumps(info))
"""


def env(ctx: Context) -> dict:
    """The offline install, then what this machine is; failed when a module the command needs is
    missing, torch does not start, --device cuda sees no GPU, or (`pyg`) PyG cannot sample."""
    result = {"install": install(ctx)}
    info = python_json(ctx, ENV_CODE, ctx.command)
    smi = capture(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,compute_cap", "--format=csv,noheader"])
    tools = {name: shutil.which(name) for name in ("nvidia-smi", "nvidia-cuda-mps-control", "compute-sanitizer")}
    result.update(python=info, nvidia_smi=smi.strip() if smi else None, tools=tools)
    gpu = info.get("gpu", {})
    print(f"GPU: {gpu.get('name', 'none')}, {gpu.get('sm_count', '-')} SMs, {gpu.get('memory_gib', '-')} GiB, "
          f"L2 {gpu.get('l2_mib', '-')} MiB; driver/smi: {result['nvidia_smi'] or '-'}")
    print(f"torch {info.get('torch')} (CUDA {info.get('torch_cuda')}), triton {info.get('triton')}, "
          f"PyG {info.get('torch_geometric')}, python {info.get('python')}, {info.get('cpu_count')} cores")
    if result["install"]["status"] != "passed":
        return failed(result, result["install"]["reason"])
    if "error" in info:
        return failed(result, f"torch did not start: {info['error'][-300:]}")
    if ctx.cuda and not info.get("cuda_available"):
        return failed(result, "--device cuda, but torch sees no CUDA device")
    if ctx.command == "pyg" and not info.get("pyg_sampling"):
        return failed(result, "PyG cannot sample neighbours: torch_sparse is there but does not load into this "
                      f"torch, so the PyG rows cannot run: {info.get('pyg_warnings')}")
    return {**result, "status": "passed"}


def smoke(ctx: Context) -> dict:
    """benchmarks/gpu/smoke.py alone, killed at 60 s: if it fails, the later steps leave the
    fused kernel alone (and say so)."""
    cmd = module("benchmarks.gpu.smoke", "--device", ctx.device, "--batches", "1,2" if ctx.tiny else "1,8")
    cmd += ["--tiny"] if ctx.tiny else []
    outcome = run_logged(ctx, "smoke", cmd, SMOKE_LIMIT_S)
    last = last_json(outcome.output) or {}
    result = {"command": show(cmd), "rc": outcome.rc, **last}
    if outcome.ok and last.get("ok"):
        return {**result, "status": "passed"}
    ctx.fused_ok = False
    where = f"; it got as far as {json.dumps(last)}" if last else ""
    return failed(result, f"the fused kernel's smoke launch {outcome.describe()}{where}; the later steps leave "
                  f"the fused kernel out")


# -- pytest ------------------------------------------------------------------------------------

def gpu_test_modules() -> list[str]:
    """The test modules with GPU tests (a `pytest.mark.gpu` in them), found afresh each run."""
    return sorted(str(p.relative_to(REPO)) for p in (REPO / "tests").glob("test_*.py")
                  if "pytest.mark.gpu" in p.read_text())


def tests_gpu(ctx: Context) -> dict:
    """pytest -m gpu on the GPU test modules; a hung test ends pytest by the thread method (a
    signal cannot interrupt a thread blocked in a CUDA sync). The dry run: quick CPU tests."""
    xml = ctx.folder / "logs" / "pytest.xml"
    select = QUICK_TESTS if ctx.tiny else ["-m", "gpu", *gpu_test_modules()]
    deselect = [] if ctx.fused_ok else ["-k", "not fused"]
    cmd = module("pytest", "-v", "-rfE", "-p", "no:cacheprovider", "--timeout", str(PYTEST_TEST_TIMEOUT_S),
                 "--timeout-method", "thread", f"--junitxml={xml}", *deselect, *select)
    outcome = run_logged(ctx, "pytest", cmd, PYTEST_LIMIT_S, quiet=True)
    counts = junit_counts(xml) if xml.exists() else verbose_counts(outcome.output)
    print(f"pytest: {counts['passed']} passed, {counts['failed']} failed, {counts['errors']} errors, "
          f"{counts['skipped']} skipped in {outcome.seconds:.0f} s")
    result = {"command": show(cmd), "rc": outcome.rc, **counts}
    if not ctx.fused_ok:
        result["note"] = "fused tests deselected: the smoke launch failed"
    return judge_pytest(result, outcome)


def judge_pytest(result: dict, outcome) -> dict:
    """Passed only when tests ran and passed: 0 passed (nothing collected, all skipped) is a failure."""
    if outcome.rc != 0 or result["failed"] or result["errors"]:
        names = ", ".join(result["failures"][:10])
        return failed(result, f"pytest {outcome.describe()}" + (f": {names}" if names else ""))
    if result["passed"] == 0:
        return failed(result, f"no test ran ({result['skipped']} skipped): nothing was checked")
    return {**result, "status": "passed"}


def junit_counts(xml) -> dict:
    counts = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0, "failures": []}
    for case in ET.parse(xml).getroot().iter("testcase"):
        kind = next((c.tag for c in case if c.tag in ("failure", "error", "skipped")), None)
        counts[{"failure": "failed", "error": "errors", "skipped": "skipped"}.get(kind, "passed")] += 1
        if kind in ("failure", "error"):
            counts["failures"].append(f"{case.get('classname')}::{case.get('name')}")
    return counts


def verbose_counts(output: str) -> dict:
    """Counts from `pytest -v` lines, for a run ended before it wrote its XML."""
    key = {"PASSED": "passed", "FAILED": "failed", "ERROR": "errors", "SKIPPED": "skipped"}
    counts = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0, "failures": []}
    for test, outcome in re.findall(r"^(\S+::\S+) (PASSED|FAILED|ERROR|SKIPPED)", output, re.M):
        counts[key[outcome]] += 1
        if outcome in ("FAILED", "ERROR"):
            counts["failures"].append(test)
    return counts


# -- stress ------------------------------------------------------------------------------------

def stress(ctx: Context) -> dict:
    """A short stress run: random super-batches, forced overflow reruns, 4x the resident programs,
    a watchdog. Failed when it made no call."""
    out = ctx.folder / "bench" / "stress.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    limit = ctx.limit(STRESS_LIMIT_S)
    args = (["--tiny", "--calls", "3", "--max-seeds", "16", "--check-every", "1", "--replay-every", "2",
             "--batch-counts", "1,2,8"] if ctx.tiny else ["--batch-counts", "1,8,64"])
    cmd = module("benchmarks.gpu.stress", "--device", ctx.device, "--seconds", str(STRESS_CALLS_S),
                 "--deadline-s", f"{limit - 5:.0f}", *args, "--out", str(out))
    outcome = run_logged(ctx, "stress", cmd, limit)
    report = read_json(out) or {}
    keys = ("status", "reason", "calls", "launches", "overflow_reruns", "batches", "launches_per_s", "call_ms",
            "max_batches_per_call", "programs", "resident_programs", "checked_batches", "replays", "failures",
            "seconds", "startup_s")
    result = {"command": show(cmd), "json": rel(out), "rc": outcome.rc, "stress": {k: report.get(k) for k in keys}}
    if outcome.ok and report.get("status") == "passed" and report.get("calls"):
        return {**result, "status": "passed"}
    return failed(result, report.get("reason") or f"stress {outcome.describe()}")


# -- compute-sanitizer -------------------------------------------------------------------------

def sanitizer(ctx: Context) -> list[str]:
    """compute-sanitizer on a GPU; on CPU its stand-in, which takes the same options."""
    return ["compute-sanitizer"] if ctx.cuda else module("benchmarks.gpu.sanitizer_standin")


def sanitize(ctx: Context) -> dict:
    """The target once plainly (compiles the kernels into Triton's cache, checks every result,
    the cache's gathers too), then synccheck and memcheck over its fused launches."""
    target = module("benchmarks.gpu.sanitize_target", "--device", ctx.device, *(["--tiny"] if ctx.tiny else []))
    plain = run_logged(ctx, "sanitize_plain", target + ([] if ctx.fused_ok else ["--no-fused"]),
                       SANITIZE_LIMITS["plain"])
    result = {"target": target_result(plain), "commands": [show(target)]}
    if not plain.ok:
        return failed(result, f"the target, without a sanitizer, {plain.describe()}")
    if not ctx.fused_ok:
        return {**result, "status": "not run", "reason": "the fused kernel's smoke launch failed: nothing to sanitize"}
    if ctx.cuda and not shutil.which("compute-sanitizer"):
        return failed(result, "compute-sanitizer is not installed")
    tools = {tool: run_tool(ctx, tool, target, result) for tool in ("synccheck", "memcheck")}
    return judge_tools({**result, "tools": tools}, ctx)


def racecheck(ctx: Context) -> dict:
    """compute-sanitizer racecheck over the fused launches: shared-memory hazards."""
    target = module("benchmarks.gpu.sanitize_target", "--device", ctx.device, *(["--tiny"] if ctx.tiny else []))
    if ctx.cuda and not shutil.which("compute-sanitizer"):
        return failed({}, "compute-sanitizer is not installed")
    result = {"commands": []}
    return judge_tools({**result, "tools": {"racecheck": run_tool(ctx, "racecheck", target, result)}}, ctx)


def run_tool(ctx: Context, tool: str, target: list[str], result: dict) -> dict:
    # The caching allocator hands out slices of big blocks, which would hide an overrun from
    # memcheck: with caching off every tensor is its own allocation.
    cmd = [*sanitizer(ctx), "--tool", tool, "--print-limit", "20", *target, "--quick"]
    outcome = run_logged(ctx, f"sanitize_{tool}", cmd, SANITIZE_LIMITS[tool], quiet=True,
                         env=ctx.env(PYTORCH_NO_CUDA_MEMORY_CACHING=1))
    result["commands"].append(show(cmd))
    found = tool_result(outcome)
    print(f"{tool}: {found['summary']}")
    return found


def judge_tools(result: dict, ctx: Context) -> dict:
    """Passed when every tool found 0 errors and its target checked its results; on CPU, where
    nothing was sanitized, skipped when every command line ran and its target passed."""
    bad = [t for t, r in result["tools"].items() if not r["target_ok"] or (ctx.cuda and r["errors"] != 0)]
    if bad:
        return failed(result, "failed: " + ", ".join(bad))
    if not ctx.cuda:
        return {**result, "status": "skipped", "reason": "no CUDA device: compute-sanitizer checks CUDA kernels; "
                "its command lines ran through a no-op stand-in and the targets checked their results"}
    return {**result, "status": "passed"}


def target_result(outcome) -> dict:
    return {"rc": outcome.rc, "seconds": outcome.seconds, "log": rel(outcome.log), **(last_json(outcome.output) or {})}


def tool_result(outcome) -> dict:
    errors = re.findall(r"ERROR SUMMARY: (\d+) error", outcome.output)
    hazards = re.findall(r"RACECHECK SUMMARY: (\d+) hazards? displayed \((\d+) errors?, (\d+) warnings?\)",
                         outcome.output)
    target = target_result(outcome)
    info = {"rc": outcome.rc, "seconds": outcome.seconds, "log": rel(outcome.log),
            "errors": int(errors[-1]) if errors else None, "target": target,
            "target_ok": bool(outcome.ok and target.get("ok"))}
    if hazards:
        info["race_hazards"], info["race_errors"], info["race_warnings"] = map(int, hazards[-1])
    if info["errors"] is None:
        info["summary"] = f"no ERROR SUMMARY: {outcome.describe()}"
    else:
        warnings = f", {info['race_warnings']} race warnings" if hazards else ""
        info["summary"] = f"{info['errors']} errors{warnings} ({outcome.seconds:.0f} s)"
    return info
