"""The steps that prove rather than measure: `env` (the offline install, every module the phases
need, what machine this is), `smoke` (the fused kernel's first launches, alone, under a hard 60 s
limit), `tests_gpu` / `tests_stages` (pytest on the device) and `sanitize` (compute-sanitizer over
fused launches and cache gathers)."""
from __future__ import annotations

import json
import re
import sys
import xml.etree.ElementTree as ET

from common import Context, capture, last_json, python_json, rel, run_logged, show, which
from offline import install

SMOKE_LIMIT_S = 60  # hard: the kernel's first launch, before anything else touches it
TEST_LIMITS = {"gpu": 240, "stages": 150, "quick": 120}
SANITIZE_LIMITS = {"plain": 60, "memcheck": 60, "racecheck": 45, "synccheck": 45, "initcheck": 45}
TOOLS = ("memcheck", "racecheck", "synccheck", "initcheck")
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
from conveyor.pipeline.mps import detect_mps
info["mps_daemon"] = detect_mps().describe()
import warnings
with warnings.catch_warnings(record=True) as said:  # PyG warns, and goes on without it, when torch_sparse fails
    warnings.simplefilter("always")
    import torch_geometric.typing as pyg  # loads torch_sparse: found is not enough, it must load into this torch
info["pyg_sampling"] = "pyg-lib" if pyg.WITH_PYG_LIB else "torch_sparse" if pyg.WITH_TORCH_SPARSE else None
info["pyg_warnings"] = [str(w.message)[:500] for w in said if "sparse" in str(w.message) or "pyg" in str(w.message)]
print(json.dumps(info))
"""


def env(ctx: Context) -> dict:
    """The offline install, then what this machine is; failed when a module is missing, torch does
    not start, or --device cuda sees no GPU."""
    result = {"install": install(ctx)}
    info = python_json(ctx, ENV_CODE)
    smi = capture(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,compute_cap",
                   "--format=csv,noheader"])
    tools = {name: which(name) for name in ("nvidia-smi", "nvidia-cuda-mps-control", "compute-sanitizer",
                                            "ncu", "nvcc")}
    result.update(python=info, nvidia_smi=smi.strip() if smi else None, tools=tools)
    gpu = info.get("gpu", {})
    print(f"GPU: {gpu.get('name', 'none')}, {gpu.get('sm_count', '-')} SMs, {gpu.get('memory_gib', '-')} GiB, "
          f"L2 {gpu.get('l2_mib', '-')} MiB; driver/smi: {result['nvidia_smi'] or '-'}")
    print(f"torch {info.get('torch')} (CUDA {info.get('torch_cuda')}), triton {info.get('triton')}, "
          f"PyG {info.get('torch_geometric')}, python {info.get('python')}, {info.get('cpu_count')} cores")
    print(f"MPS: control {tools['nvidia-cuda-mps-control'] or 'not installed'}; {info.get('mps_daemon')}")
    if result["install"]["status"] != "passed":
        return {**result, "status": "failed", "reason": result["install"]["reason"]}
    if "error" in info:
        return {**result, "status": "failed", "reason": f"torch did not start: {info['error'][-300:]}"}
    if ctx.cuda and not info.get("cuda_available"):
        return {**result, "status": "failed", "reason": "--device cuda, but torch sees no CUDA device"}
    if not info.get("pyg_sampling"):
        return {**result, "status": "failed", "reason": "PyG cannot sample neighbours: torch_sparse is there but "
                f"does not load into this torch, so the PyG baselines could not run: {info.get('pyg_warnings')}"}
    return {**result, "status": "passed"}


def smoke(ctx: Context) -> dict:
    """benchmarks/gpu/smoke.py alone, killed at 60 s: if it fails, the phase's later steps leave
    the fused kernel alone (and say so)."""
    cmd = [sys.executable, "benchmarks/gpu/smoke.py", "--device", ctx.device]
    cmd += ["--tiny", "--batches", "1,2"] if ctx.tiny else ["--batches", "1,4,8"]
    outcome = run_logged(ctx, "smoke", cmd, SMOKE_LIMIT_S)
    last = last_json(outcome.output) or {}
    result = {"command": show(cmd), "rc": outcome.rc, **last}
    if outcome.ok and last.get("ok"):
        return {**result, "status": "passed"}
    ctx.fused_ok = False
    where = f"; it got as far as {json.dumps(last)}" if last else ""
    return {**result, "status": "failed", "reason": f"the fused kernel's smoke launch {outcome.describe()}{where}; "
            f"the later steps of this phase leave the fused kernel out"}


def tests_gpu(ctx: Context) -> dict:
    """pytest -m gpu: every GPU test (the dry run: one quick CPU module instead)."""
    args = QUICK_TESTS if ctx.tiny else ["-m", "gpu", "tests"]
    return _pytest(ctx, "quick" if ctx.tiny else "gpu", args)


def tests_stages(ctx: Context) -> dict:
    """The rest of the stage modules (sampler, cache, pipeline) with CUDA present."""
    if ctx.tiny:
        return {"status": "skipped", "reason": "the dry run runs one quick module (tests_gpu)"}
    return _pytest(ctx, "stages", ["-m", "not gpu", *STAGE_TESTS])


def _pytest(ctx: Context, name: str, args: list[str]) -> dict:
    xml = ctx.phase_dir / "logs" / f"pytest_{name}.xml"
    deselect = [] if ctx.fused_ok else ["-k", "not fused"]
    cmd = [sys.executable, "-m", "pytest", "-v", "-rfE", "-p", "no:cacheprovider", "--timeout", "120",
           f"--junitxml={xml}", *deselect, *args]
    outcome = run_logged(ctx, f"pytest_{name}", cmd, TEST_LIMITS[name], quiet=True)
    counts = _junit_counts(xml) if xml.exists() else _verbose_counts(outcome.output)
    result = {"command": show(cmd), "seconds": outcome.seconds, "rc": outcome.rc, **counts}
    if not ctx.fused_ok:
        result["note"] = "fused tests deselected: the smoke launch failed"
    print(f"pytest {name}: {counts['passed']} passed, {counts['failed']} failed, {counts['errors']} errors, "
          f"{counts['skipped']} skipped in {outcome.seconds:.0f} s")
    if outcome.rc not in (0, 5) or counts["failed"] or counts["errors"]:  # 5: nothing collected
        names = ", ".join(counts["failures"][:10])
        reason = f"pytest {outcome.describe()}" + (f": {names}" if names else "")
        return {**result, "status": "failed", "reason": reason}
    return {**result, "status": "passed"}


def _junit_counts(xml) -> dict:
    counts = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0, "failures": []}
    for case in ET.parse(xml).getroot().iter("testcase"):
        kind = next((c.tag for c in case if c.tag in ("failure", "error", "skipped")), None)
        key = {"failure": "failed", "error": "errors", "skipped": "skipped"}.get(kind, "passed")
        counts[key] += 1
        if kind in ("failure", "error"):
            counts["failures"].append(f"{case.get('classname')}::{case.get('name')}")
    return counts


def _verbose_counts(output: str) -> dict:
    """Counts from `pytest -v` lines, for a run killed before it wrote its XML."""
    found = re.findall(r"^(\S+::\S+) (PASSED|FAILED|ERROR|SKIPPED)", output, re.M)
    key = {"PASSED": "passed", "FAILED": "failed", "ERROR": "errors", "SKIPPED": "skipped"}
    counts = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0, "failures": []}
    for test, outcome in found:
        counts[key[outcome]] += 1
        if outcome in ("FAILED", "ERROR"):
            counts["failures"].append(test)
    return counts


def sanitize(ctx: Context) -> dict:
    """The target once plainly (compiles the kernels into Triton's cache, checks every result),
    then under each compute-sanitizer tool; on CPU only the plain run, under the interpreter."""
    target = [sys.executable, "benchmarks/gpu/sanitize_target.py", "--device", ctx.device]
    target += (["--tiny"] if ctx.tiny else []) + ([] if ctx.fused_ok else ["--no-fused"])
    plain = run_logged(ctx, "sanitize_plain", target, SANITIZE_LIMITS["plain"])
    result = {"target": _target_result(plain), "commands": [show(target)]}
    if not ctx.fused_ok:
        result["note"] = "the cache alone: the smoke launch of the fused kernel failed"
    reason = ("no CUDA device: compute-sanitizer checks CUDA kernels (the target ran on CPU only)" if not ctx.cuda
              else None if which("compute-sanitizer") else "compute-sanitizer is not installed")
    if reason:
        print(f"sanitize: skipped: {reason}")
        return {**result, "status": "skipped" if plain.ok else "failed", "reason": reason}
    # The caching allocator hands out slices of big blocks, which would hide an overrun from
    # memcheck: with caching off every tensor is its own allocation.
    env = ctx.env(PYTORCH_NO_CUDA_MEMORY_CACHING=1)
    tools = {}
    for tool in TOOLS:
        cmd = ["compute-sanitizer", "--tool", tool, "--print-limit", "20", *target, "--quick"]
        outcome = run_logged(ctx, f"sanitize_{tool}", cmd, SANITIZE_LIMITS[tool], env=env, quiet=True)
        tools[tool] = _tool_result(outcome)
        result["commands"].append(show(cmd))
        print(f"{tool}: {tools[tool]['summary']}")
    bad = ([] if plain.ok else ["the plain run"]) + [t for t, r in tools.items() if r["status"] != "passed"]
    return {**result, "tools": tools, "status": "failed" if bad else "passed",
            **({"reason": "failed: " + ", ".join(bad)} if bad else {})}


def _target_result(outcome) -> dict:
    return {"rc": outcome.rc, "seconds": outcome.seconds, "log": rel(outcome.log), **(last_json(outcome.output) or {})}


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
