"""The steps that prove rather than measure: `env` (what machine this is), `tests` (pytest on the
device) and `sanitize` (compute-sanitizer over fused launches and cache gathers)."""
from __future__ import annotations

import json
import re
import sys
import xml.etree.ElementTree as ET

from common import Context, capture, python_json, rel, run_logged, show, which
from offline import importable

# Limits (seconds) that keep each step well inside the 10 minutes one command may take there.
TEST_LIMITS = {"gpu": 200, "stages": 240, "quick": 120}
SANITIZE_LIMITS = {"plain": 120, "memcheck": 120, "racecheck": 120, "synccheck": 120}
TOOLS = ("memcheck", "racecheck", "synccheck")
# The stage modules' other tests (their CUDA cases, and tests/test_gpu_pipeline.py, run with -m gpu).
STAGE_TESTS = ["tests/test_bsp_sampler.py", "tests/test_fused_sampler.py", "tests/test_cache.py",
               "tests/test_pipeline.py"]
QUICK_TESTS = ["tests/test_bsp_sampler.py"]  # the dry run's: a quick module, so it stays cheap

ENV_CODE = r"""
import importlib.metadata as md, json, os, platform, torch
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
try:
    from conveyor.pipeline.mps import detect_mps
    info["mps_daemon"] = detect_mps().describe()
except Exception as err:
    info["mps_daemon"] = f"unknown ({err})"
print(json.dumps(info))
"""


def env(ctx: Context) -> dict:
    info = python_json(ctx, ENV_CODE)
    smi = capture(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,compute_cap",
                   "--format=csv,noheader"])
    tools = {name: which(name) for name in ("nvidia-smi", "nvidia-cuda-mps-control", "compute-sanitizer",
                                            "ncu", "nvcc", "ninja", "cmake")}
    nvcc = capture(["nvcc", "--version"]) if tools["nvcc"] else None
    result = {"python": info, "nvidia_smi": smi.strip() if smi else None, "tools": tools,
              "nvcc": nvcc.strip().splitlines()[-1] if nvcc else None,
              "mps": {"control": tools["nvidia-cuda-mps-control"], "daemon": info.get("mps_daemon"),
                      "usable": bool(tools["nvidia-cuda-mps-control"])},
              "pyg_extensions": importable(ctx, ["torch_scatter", "torch_sparse"])}
    gpu = info.get("gpu", {})
    if "error" in info:
        result.update(status="failed", reason=f"torch did not start: {info['error'][-300:]}")
    elif ctx.cuda and not info.get("cuda_available"):
        result.update(status="failed", reason="--device cuda, but torch sees no CUDA device")
    else:
        result["status"] = "passed"
    print(f"GPU: {gpu.get('name', 'none')}, {gpu.get('sm_count', '-')} SMs, {gpu.get('memory_gib', '-')} GiB, "
          f"L2 {gpu.get('l2_mib', '-')} MiB; driver/smi: {result['nvidia_smi'] or '-'}")
    print(f"torch {info.get('torch')} (CUDA {info.get('torch_cuda')}), triton {info.get('triton')}, "
          f"PyG {info.get('torch_geometric')}, python {info.get('python')}, {info.get('cpu_count')} cores")
    print(f"MPS: control {tools['nvidia-cuda-mps-control'] or 'not installed'}; {info.get('mps_daemon')}")
    return result


def tests(ctx: Context) -> dict:
    """pytest on the device: every GPU-marked test, then the rest of the stage modules (sampler,
    cache, pipeline); the dry run takes one quick module. Counts come from JUnit XML."""
    if ctx.tiny:
        plan = [("quick", QUICK_TESTS)]
    else:
        plan = [("gpu", ["-m", "gpu", "tests"]), ("stages", ["-m", "not gpu", *STAGE_TESTS])]
    runs = [_pytest(ctx, name, args) for name, args in plan]
    totals = {k: sum(r[k] for r in runs) for k in ("passed", "failed", "errors", "skipped")}
    failed = [r for r in runs if r["status"] != "passed"]
    for r in runs:
        print(f"pytest {r['name']}: {r['passed']} passed, {r['failed']} failed, {r['errors']} errors, "
              f"{r['skipped']} skipped in {r['seconds']:.0f} s" + (f"; {r['reason']}" if r.get("reason") else ""))
    return {"status": "failed" if failed else "passed", **totals, "runs": runs,
            "commands": [r["command"] for r in runs],
            **({"reason": "; ".join(f"{r['name']}: {r['reason']}" for r in failed)} if failed else {})}


def _pytest(ctx: Context, name: str, args: list[str]) -> dict:
    xml = ctx.results / "logs" / f"pytest_{name}.xml"
    cmd = [sys.executable, "-m", "pytest", "-q", "-rfE", "-p", "no:cacheprovider", "--timeout", "150",
           f"--junitxml={xml}", *args]
    xml.unlink(missing_ok=True)
    outcome = run_logged(ctx, f"pytest_{name}", cmd, TEST_LIMITS[name])
    counts = _junit_counts(xml)
    run = {"name": name, "command": show(cmd), "seconds": outcome.seconds,
           "rc": outcome.rc, **counts}
    if outcome.rc not in (0, 5) or counts["failed"] or counts["errors"]:  # 5: nothing collected
        names = ", ".join(counts["failures"][:10])
        run.update(status="failed", reason=f"pytest {outcome.describe()}" + (f": {names}" if names else ""))
    else:
        run["status"] = "passed"
    return run


def _junit_counts(xml) -> dict:
    counts = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0, "failures": []}
    if not xml.exists():
        return counts
    for case in ET.parse(xml).getroot().iter("testcase"):
        kind = next((c.tag for c in case if c.tag in ("failure", "error", "skipped")), None)
        key = {"failure": "failed", "error": "errors", "skipped": "skipped"}.get(kind, "passed")
        counts[key] += 1
        if kind in ("failure", "error"):
            counts["failures"].append(f"{case.get('classname')}::{case.get('name')}")
    return counts


def sanitize(ctx: Context) -> dict:
    """The target once plainly (compiles the kernels into Triton's cache, checks every result),
    then under each compute-sanitizer tool; on CPU only the plain run, under the interpreter."""
    target = [sys.executable, "benchmarks/gpu/sanitize_target.py", "--device", ctx.device]
    target += ["--tiny"] if ctx.tiny else []
    plain = run_logged(ctx, "sanitize_plain", target, SANITIZE_LIMITS["plain"])
    result = {"target": _target_result(plain), "commands": [show(target)]}
    if not ctx.cuda:
        reason = "no CUDA device: compute-sanitizer checks CUDA kernels (the target ran on CPU only)"
    elif not which("compute-sanitizer"):
        reason = "compute-sanitizer is not installed"
    else:
        reason = None
    if reason:
        print(f"sanitize: skipped: {reason}")
        return {"status": "skipped" if plain.ok else "failed", "reason": reason, **result}
    # The caching allocator hands out slices of big blocks, which would hide an overrun from
    # memcheck: with caching off every tensor is its own allocation.
    env = ctx.env(PYTORCH_NO_CUDA_MEMORY_CACHING=1)
    tools = {}
    for tool in TOOLS:
        cmd = ["compute-sanitizer", "--tool", tool, "--print-limit", "20", *target]
        outcome = run_logged(ctx, f"sanitize_{tool}", cmd, SANITIZE_LIMITS[tool], env=env)
        tools[tool] = _tool_result(outcome)
        result["commands"].append(show(cmd))
        print(f"{tool}: {tools[tool]['summary']}")
    bad = [t for t, r in tools.items() if r["status"] != "passed"]
    if not plain.ok:
        bad.insert(0, "the plain run")
    return {"status": "failed" if bad else "passed", "tools": tools, **result,
            **({"reason": "failed: " + ", ".join(bad)} if bad else {})}


def _target_result(outcome) -> dict:
    lines = [ln for ln in outcome.output.splitlines() if ln.startswith("{")]
    info = {"rc": outcome.rc, "seconds": outcome.seconds, "log": rel(outcome.log)}
    if lines:
        info.update(json.loads(lines[-1]))
    return info


def _tool_result(outcome) -> dict:
    errors = re.findall(r"ERROR SUMMARY: (\d+) error", outcome.output)
    hazards = re.findall(r"RACECHECK SUMMARY: (\d+) hazards? displayed \((\d+) errors?, (\d+) warnings?\)",
                         outcome.output)
    info = {"rc": outcome.rc, "seconds": outcome.seconds, "log": rel(outcome.log),
            "errors": int(errors[-1]) if errors else None, "target": _target_result(outcome)}
    if hazards:
        info["race_hazards"], info["race_errors"], info["race_warnings"] = map(int, hazards[-1])
    ok = outcome.ok and info["errors"] == 0 and info["target"].get("ok")
    info["status"] = "passed" if ok else "failed"
    if info["errors"] is None:
        info["summary"] = f"no ERROR SUMMARY: {outcome.describe()}"
    else:
        info["summary"] = f"{info['errors']} errors" + (f", {info['race_warnings']} race warnings"
                                                        if hazards else "") + f" ({outcome.seconds:.0f} s)"
    return info
