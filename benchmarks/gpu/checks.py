"""`check`'s steps, which prove rather than measure: `env` (every command's: the offline install,
the modules the command needs, what machine this is, the Triton compile cache), `smoke` (the
fused kernel's first launches, the weighted variant's too, alone, under the step's hard limit),
`tests_gpu` (pytest -m gpu on the GPU test modules, the weighted kernel's tests and the CUDA-IPC
pipeline's first), `stress` (a short run of random super-batches, weighted ones among them),
`sanitize` (compute-sanitizer synccheck and memcheck on both kernels) and `racecheck` (on what
the earlier steps left). Each child runs within its step's time: one cut by it makes the step
`partial` (what it finished, nothing failed), never `failed`.

On CPU (the dry run) every command line is executed as on a GPU: the sanitizer's through
benchmarks/gpu/sanitizer_standin.py, which accepts compute-sanitizer's options and runs the target
unchecked."""
from __future__ import annotations

import json
import re
import shutil
import xml.etree.ElementTree as ET

from benchmarks.gpu import kernel_cache
from benchmarks.gpu.common import (
    GRACE_S,
    REPO,
    Context,
    capture,
    failed,
    last_json,
    module,
    partial,
    python_json,
    read_json,
    rel,
    run_logged,
    show,
)
from benchmarks.gpu.install import install

PYTEST_TEST_TIMEOUT_S = 90
STRESS_CALLS_S = 30  # the calls' seconds count after start-up (the compiles), within the step's time
QUICK_TESTS = ["-m", "not gpu and not slow", "tests/samplers/test_bsp_sampler.py"]  # the dry run's: CPU tests, quick
ORDER_PLUGIN = "benchmarks.gpu.pytest_order"  # the weighted kernel's tests first, then the pipeline's

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
    """The offline install, then what this machine is, then the Triton compile cache (the carried
    one where its key matches this machine); failed when a module the command needs is missing,
    torch does not start, --device cuda sees no GPU, or (`pyg`) PyG cannot sample."""
    result = {"install": install(ctx)}
    info = python_json(ctx, ENV_CODE, ctx.command, timeout=ctx.step_left() - 10)  # the rest: smi, cache key
    smi = capture(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,compute_cap", "--format=csv,noheader"],
                  timeout=min(15, ctx.limit()))
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
    result["triton_cache"] = kernel_cache.use(ctx)
    print(f"Triton cache: {result['triton_cache']['summary']}")
    return {**result, "status": "passed"}


def smoke(ctx: Context) -> dict:
    """benchmarks/gpu/smoke.py alone, killed at its own allotment (60 s at the documented timeout,
    no slack: a hang costs no more): the uniform kernel for 1 and 8 batches and the weighted one
    for 1. A run killed while a launch was in flight hung: failed, and the later steps leave the
    fused kernel alone (and say so); one killed while compiling is partial (its checked variants
    count)."""
    limit = ctx.limit(ctx.step_allotment_s - GRACE_S)
    variants = "1,w1,2" if ctx.tiny else "1,w1,8"
    cmd = module("benchmarks.gpu.smoke", "--device", ctx.device, "--batches", variants,
                 "--stop-after", f"{0.6 * limit:.0f}", *(["--tiny"] if ctx.tiny else []))
    outcome = run_logged(ctx, "smoke", cmd, limit)
    last = last_json(outcome.output) or {}
    result = {"command": show(cmd), "rc": outcome.rc, "hard_limit_s": round(limit), **last}
    if outcome.ok and last.get("ok"):
        return {**result, "status": "passed"}
    checked = [line for line in outcome.output.splitlines() if line.startswith('{"stage": "checked"')]
    if outcome.cut and last.get("stage") != "launching":
        ctx.fused_ok = bool(checked)
        done = partial(result, f"{len(checked)} variants passed (the rest still compiling)")
        return {**done, "usable": bool(checked)}
    ctx.fused_ok = False
    where = f"; it got as far as {json.dumps(last)}" if last else ""
    return failed(result, f"the fused kernel's smoke launch {outcome.describe()}{where}; the later steps leave "
                  f"the fused kernel out")


# -- pytest ------------------------------------------------------------------------------------

def gpu_test_modules() -> list[str]:
    """The test modules with GPU tests (a `pytest.mark.gpu` in them), found afresh each run."""
    return sorted(str(p.relative_to(REPO)) for p in (REPO / "tests").rglob("test_*.py")
                  if "data" not in p.relative_to(REPO).parts and "pytest.mark.gpu" in p.read_text())


def tests_gpu(ctx: Context) -> dict:
    """pytest -m gpu on the GPU test modules, the weighted kernel's tests first, then the CUDA-IPC
    pipeline's (benchmarks/gpu/pytest_order.py); a hung test ends pytest by the thread method (a
    signal cannot interrupt a thread blocked in a CUDA sync). Cut at the step's end: partial, with
    what passed. The dry run: quick CPU tests, in the same order."""
    xml = ctx.folder / "logs" / "pytest.xml"
    select = QUICK_TESTS if ctx.tiny else ["-m", "gpu", *gpu_test_modules()]
    deselect = [] if ctx.fused_ok else ["-k", "not fused"]
    cmd = module("pytest", "-v", "-rfE", "-p", "no:cacheprovider", "-p", ORDER_PLUGIN, "--timeout",
                 str(PYTEST_TEST_TIMEOUT_S), "--timeout-method", "thread", f"--junitxml={xml}", *deselect, *select)
    outcome = run_logged(ctx, "pytest", cmd, quiet=True)
    counts = junit_counts(xml) if xml.exists() and not outcome.cut else verbose_counts(outcome.output)
    counts["order"] = plugin_order(outcome.output)  # what the plugin put first
    print(f"pytest: {counts['passed']} passed, {counts['failed']} failed, {counts['errors']} errors, "
          f"{counts['skipped']} skipped in {outcome.seconds:.0f} s{' (stopped at its limit)' if outcome.cut else ''}")
    result = {"command": show(cmd), "rc": outcome.rc, **counts}
    if not ctx.fused_ok:
        result["note"] = "fused tests deselected: the smoke launch failed"
    return judge_pytest(result, outcome)


def plugin_order(output: str) -> dict:
    """The order benchmarks/gpu/pytest_order.py gave the tests, as it printed it."""
    for line in output.splitlines():
        if line.startswith('{"gpu_suite_order"'):
            return json.loads(line)["gpu_suite_order"]
    return {}


def judge_pytest(result: dict, outcome) -> dict:
    """Passed only when tests ran and passed: 0 passed (nothing collected, all skipped) is a
    failure; cut at the limit with none failed: partial."""
    if result["failed"] or result["errors"] or (outcome.rc != 0 and not outcome.cut):
        names = ", ".join(result["failures"][:10])
        return failed(result, f"pytest {outcome.describe()}" + (f": {names}" if names else ""))
    if outcome.cut:
        return partial(result, f"{result['passed']} passed")
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
    """A short stress run: random super-batches (weighted ones among them), forced overflow reruns,
    4x the resident programs, a watchdog. Failed when it made no call or a check failed; partial
    when the step's end cut it after some calls."""
    out = ctx.folder / "bench" / "stress.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    limit = ctx.limit()
    args = (["--tiny", "--calls", "3", "--max-seeds", "16", "--check-every", "1", "--replay-every", "2",
             "--batch-counts", "1,2,8"] if ctx.tiny else ["--batch-counts", "1,8,64"])
    cmd = module("benchmarks.gpu.stress", "--device", ctx.device, "--seconds", str(STRESS_CALLS_S),
                 "--deadline-s", f"{max(1, limit - 5):.0f}", *args, "--out", str(out))
    outcome = run_logged(ctx, "stress", cmd, limit)
    report = read_json(out) or {}
    keys = ("status", "reason", "calls", "launches", "overflow_reruns", "batches", "weighted_calls",
            "launches_per_s", "call_ms", "max_batches_per_call", "programs", "resident_programs", "checked_batches",
            "replays", "failures", "seconds", "startup_s")
    result = {"command": show(cmd), "json": rel(out), "rc": outcome.rc, "stress": {k: report.get(k) for k in keys}}
    if outcome.ok and report.get("status") == "passed" and report.get("calls"):
        return {**result, "status": "passed"}
    if outcome.cut and not report.get("failures") and report.get("status") not in ("stalled", "failed"):
        return partial(result, f"{report.get('calls') or 0} calls passed")
    return failed(result, report.get("reason") or f"stress {outcome.describe()}")


# -- compute-sanitizer -------------------------------------------------------------------------

def sanitizer(ctx: Context) -> list[str]:
    """compute-sanitizer on a GPU; on CPU its stand-in, which takes the same options."""
    return ["compute-sanitizer"] if ctx.cuda else module("benchmarks.gpu.sanitizer_standin")


def sanitize(ctx: Context) -> dict:
    """The target once plainly (compiles both kernels into Triton's cache, checks every result,
    the cache's gathers too), then synccheck and memcheck over its fused launches, uniform and
    weighted; each within a share of the step's time."""
    target = module("benchmarks.gpu.sanitize_target", "--device", ctx.device, *(["--tiny"] if ctx.tiny else []))
    plain = run_logged(ctx, "sanitize_plain", target + ([] if ctx.fused_ok else ["--no-fused"]),
                       ctx.limit() / 3)
    result = {"target": target_result(plain), "commands": [show(target)]}
    if plain.cut:
        return partial(result, "the target, without a sanitizer, did not finish: 0 tools run")
    if not plain.ok:
        return failed(result, f"the target, without a sanitizer, {plain.describe()}")
    if not ctx.fused_ok:
        return {**result, "status": "not run", "reason": "the fused kernel's smoke launch failed: nothing to sanitize"}
    if ctx.cuda and not shutil.which("compute-sanitizer"):
        return failed(result, "compute-sanitizer is not installed")
    tools = {"synccheck": run_tool(ctx, "synccheck", target, result, ctx.limit() / 2)}
    tools["memcheck"] = run_tool(ctx, "memcheck", target, result, ctx.limit())
    return judge_tools({**result, "tools": tools}, ctx)


def racecheck(ctx: Context) -> dict:
    """compute-sanitizer racecheck over the fused launches: shared-memory hazards."""
    target = module("benchmarks.gpu.sanitize_target", "--device", ctx.device, *(["--tiny"] if ctx.tiny else []))
    if ctx.cuda and not shutil.which("compute-sanitizer"):
        return failed({}, "compute-sanitizer is not installed")
    result = {"commands": []}
    return judge_tools({**result, "tools": {"racecheck": run_tool(ctx, "racecheck", target, result, ctx.limit())}},
                       ctx)


def run_tool(ctx: Context, tool: str, target: list[str], result: dict, limit_s: float) -> dict:
    # The caching allocator hands out slices of big blocks, which would hide an overrun from
    # memcheck: with caching off every tensor is its own allocation.
    cmd = [*sanitizer(ctx), "--tool", tool, "--print-limit", "20", *target, "--quick"]
    outcome = run_logged(ctx, f"sanitize_{tool}", cmd, limit_s, quiet=True,
                         env=ctx.env(PYTORCH_NO_CUDA_MEMORY_CACHING=1))
    result["commands"].append(show(cmd))
    found = tool_result(outcome)
    print(f"{tool}: {found['summary']}")
    return found


def judge_tools(result: dict, ctx: Context) -> dict:
    """Passed when every tool found 0 errors and its target checked its results; partial when one
    was stopped at its limit with no error reported; on CPU, where nothing was sanitized, skipped
    when every command line ran and its target passed."""
    tools = result["tools"]
    bad = [t for t, r in tools.items() if (r["errors"] or 0) > 0 or (not r["target_ok"] and not r["cut"])
           or (ctx.cuda and r["errors"] is None and not r["cut"])]
    if bad:
        return failed(result, "failed: " + ", ".join(bad))
    cut = [t for t, r in tools.items() if r["cut"]]
    if cut:
        done = len(tools) - len(cut)
        return partial(result, f"{done} tools passed ({', '.join(cut)} cut before its summary)")
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
    info = {"rc": outcome.rc, "seconds": outcome.seconds, "log": rel(outcome.log), "cut": outcome.cut,
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
