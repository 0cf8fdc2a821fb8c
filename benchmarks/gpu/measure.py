"""The steps that measure. Phase 2: `sampling`, `stress`, `cache`, `pipeline` (each benchmark run
as it is, writing its JSON as it goes, so a time limit loses the figures still to come, not those
already taken). Phase 3: `e2e_fused`, `e2e_pyg`, `e2e_bsp` (launch.py with each sampler, and the
PyG reference loop, on the same graph and config; metrics.json is written every epoch)."""
from __future__ import annotations

import json
import shutil
import sys

from common import DATA_ROOT, Context, rel, run_logged, show
from offline import importable

LIMITS = {"sampling": 110, "stress": 80, "cache": 90, "pipeline": 240,
          "e2e_fused": 150, "e2e_pyg": 180, "e2e_bsp": 150}


def _bench(ctx: Context, name: str, script: str, args: list[str], headline) -> dict:
    """Run one benchmark into <phase>/bench/<name>.json; its figures even when it was cut off."""
    out = ctx.phase_dir / "bench" / f"{name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, script, *args, "--out", str(out)]
    outcome = run_logged(ctx, name, cmd, LIMITS[name])
    result = {"command": show(cmd), "json": rel(out), "rc": outcome.rc}
    report = _read(out)
    if report is not None:
        result.update(headline(report))
    if outcome.ok and report is not None:
        return {**result, "status": "passed"}
    kept = "; the figures taken before are kept" if report is not None else ""
    return {**result, "status": "failed", "reason": f"{script} {outcome.describe()}{kept}"}


def _read(path) -> dict | None:
    """A benchmark's JSON; None if it wrote none, or was killed while writing it."""
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def _common(ctx: Context) -> list[str]:
    return ["--device", ctx.device, "--scale", str(ctx.scale), "--data-root", str(DATA_ROOT)]


# -- phase 2 ------------------------------------------------------------------------------------

def sampling(ctx: Context) -> dict:
    """fused (single batches and super-batches of 8), bsp and PyG's sampler at products scale;
    PyG's CPU sampler gets 2 timed batches a row, so its rows always fit. The dry run samples with
    bsp and pyg only (fused would run under Triton's interpreter)."""
    if ctx.tiny:
        args = ["--samplers", "bsp,pyg", "--batches", "2", "--fanouts", "15,10,5", "--batch-sizes", "1024"]
    else:
        samplers = "fused,bsp,pyg" if ctx.fused_ok else "bsp,pyg"
        args = ["--samplers", samplers, "--batches", "20", "--pyg-batches", "2", "--super-batch", "8"]
    return _bench(ctx, "sampling", "benchmarks/sampling.py", _common(ctx) + args, sampling_headline)


def stress(ctx: Context) -> dict:
    if not ctx.fused_ok:
        return {"status": "not run", "reason": "the fused kernel's smoke launch failed"}
    tiny = ["--tiny", "--calls", "3", "--max-seeds", "16", "--check-every", "1", "--replay-every", "2"]
    args = ["--device", ctx.device] + (tiny if ctx.tiny else ["--seconds", str(LIMITS["stress"] - 20)])
    return _bench(ctx, "stress", "benchmarks/gpu/stress.py", args, stress_headline)


def cache(ctx: Context) -> dict:
    args = (["--sizes", "0.1,0.2", "--timed-batches", "2", "--repeats", "1", "--batch-size", "256"] if ctx.tiny
            else ["--batches", "60", "--sizes", "0.05,0.1,0.2,0.4", "--timed-batches", "20", "--repeats", "3"])
    return _bench(ctx, "cache", "benchmarks/cache.py", _common(ctx) + args, cache_headline)


def pipeline(ctx: Context) -> dict:
    """serial, async, and async under a private MPS daemon (recorded as unavailable, with why, when
    it does not start); fused sampling on the GPU unless the smoke launch failed."""
    args = ["--epochs", "2", "--batch-size", "128", "--fanouts", "5,5"] if ctx.tiny else ["--epochs", "2"]
    if ctx.cuda and not ctx.fused_ok:
        args += ["--sampler", "bsp"]
    return _bench(ctx, "pipeline", "benchmarks/pipeline.py", _common(ctx) + args, pipeline_headline)


def sampling_headline(report: dict) -> dict:
    """fused and bsp at 1024 seeds, [15, 10, 5]; the super-batch's sampled edges per second."""
    rows = [r for r in report.get("rows", []) if r.get("available")]

    def row(sampler, mode="batch", fanouts=(15, 10, 5), batch_size=1024):
        return next((r for r in rows if r["sampler"] == sampler and r["mode"] == mode
                     and r["fanouts"] == list(fanouts) and r["batch_size"] == batch_size), None)
    fused, bsp, pyg, superb = row("fused"), row("bsp"), row("pyg"), row("fused", "super-batch")
    best_super = max((r for r in rows if r["mode"] == "super-batch"), key=lambda r: r["edges_per_s"], default=None)
    get = lambda r, key: r and r.get(key)  # noqa: E731
    return {"fused_ms": get(fused, "ms_per_batch"), "bsp_ms": get(bsp, "ms_per_batch"),
            "pyg_ms": get(pyg, "ms_per_batch"), "pyg_batches": get(pyg, "batches"),
            "fused_speedup_vs_bsp": get(fused, "speedup_vs_bsp"),
            "fused_interpreted": report["meta"]["fused_interpreted"], "super_batch": report["meta"]["super_batch"],
            "super_batch_edges_per_s": get(superb, "edges_per_s"),
            "best_super_batch_edges_per_s": get(best_super, "edges_per_s"),
            "bsp_edges_per_s": get(bsp, "edges_per_s"), "rows": len(rows),
            "unavailable": {f"{r['sampler']} {r['mode']}": r["reason"] for r in report.get("rows", [])
                            if not r.get("available")}}


def stress_headline(report: dict) -> dict:
    keys = ("calls", "launches", "overflow_reruns", "batches", "launches_per_s", "call_ms", "max_batches_per_call",
            "programs", "resident_programs", "checked_batches", "replays", "failures", "seconds")
    return {"stress_status": report.get("status"), **{k: report.get(k) for k in keys},
            **({"stress_reason": report["reason"]} if "reason" in report else {})}


def cache_headline(report: dict) -> dict:
    """degree cache at 20% of the nodes (PaGraph's bar) against optimal and no cache; auto sizing."""
    degree = report.get("policies", {}).get("degree")
    if not degree:
        return {}
    size = "0.2" if "0.2" in degree else next(iter(degree))
    out = {"size": float(size), "hit_ratio": report["hit_ratio"]["degree"][size],
           "optimal_hit_ratio": report["hit_ratio"].get("optimal", {}).get(size),
           "gather_gb_s": report["policies"]["degree"][size]["gather_gb_s"],
           "none_gather_gb_s": report.get("none", {}).get("gather_gb_s"),
           "gather_speedup_vs_none": report.get("gather_speedup_vs_none", {}).get(size)}
    auto = report.get("auto")
    if auto:
        out.update(auto_capacity_fraction=auto["capacity_fraction"], auto_hit_ratio=auto["hit_ratio"])
    if "bar" in report:
        out["bar_passed"] = report["bar"]["passed"]
    return out


def pipeline_headline(report: dict) -> dict:
    """async (and async under MPS) against serial; overlap; IPC; GPU utilisation; MPS's status."""
    results, summary = report.get("results", {}), report.get("summary") or {}
    out = {"modes": sorted(results), "mps": report.get("mps")}
    if "serial" in results:
        out["serial_epoch_s"] = results["serial"]["epoch_s"]
    if summary:
        out.update(slowest_stage_s=summary["slowest_stage_s"], stage_sum_s=summary["stage_sum_s"])
    for mode in ("async", "async_mps"):
        if mode in summary:
            s = summary[mode]
            out[mode] = {"epoch_s": s["epoch_s"], "speedup_vs_serial": s["speedup_vs_serial"],
                         "overlap_efficiency": s["overlap_efficiency"], "ipc_ms_per_batch": s["ipc_ms_per_batch"],
                         "ipc_fraction": s["ipc_fraction_of_iteration"],
                         "gpu_util_percent": results[mode].get("gpu_util_percent"),
                         "mps_percent": s.get("mps_percent")}
    return out


# -- phase 3 ------------------------------------------------------------------------------------

def e2e_overrides(ctx: Context, sampler: str) -> list[str]:
    """launch.py's defaults (cache, pipeline, model size, batch 1024, [15, 10, 5]) with `sampler`
    named (auto would be bsp), validation/test accuracy once after the last epoch: epoch times
    exclude evaluation anyway."""
    epochs = 1 if ctx.tiny else 3  # the dry run: one epoch is enough to keep the path alive
    out = ["model=sage", "data=synthetic", f"data.scale={ctx.scale}", f"trainer.epochs={epochs}",
           f"data.root={DATA_ROOT}", f"run.device={ctx.device}", "trainer.progress=false",
           f"trainer.eval_every={epochs}", f"sampler={sampler}"]
    return out + (["trainer.batch_size=128", "sampler.fanouts=[5,5]", "model.hidden=64"] if ctx.tiny else [])


def _e2e(ctx: Context, name: str, argv: list[str], out_flag: str = "run.out_dir=") -> dict:
    """One training run into <phase>/<name>/ (metrics.json, TensorBoard events; no checkpoints)."""
    out = ctx.phase_dir / name
    shutil.rmtree(out, ignore_errors=True)  # launch.py refuses a folder with a checkpoint
    cmd = [sys.executable, *argv, out_flag + str(out)]
    outcome = run_logged(ctx, name, cmd, LIMITS[name])
    shutil.rmtree(out / "checkpoints", ignore_errors=True)  # not a result; keeps the archive small
    result = {"command": show(cmd), "rc": outcome.rc, **_run_figures(out)}
    if outcome.ok and result.get("test_acc") is not None:
        return {**result, "status": "passed"}
    kept = f"; {len(result['epoch_times_s'])} epochs recorded" if result.get("epoch_times_s") else ""
    return {**result, "status": "failed", "reason": f"{show(cmd[:2])} {outcome.describe()}{kept}"}


def e2e_fused(ctx: Context) -> dict:
    if not ctx.fused_ok:
        return {"status": "failed", "reason": "not run: the fused kernel's smoke launch failed"}
    return _e2e(ctx, "e2e_fused", ["launch.py", *e2e_overrides(ctx, "fused")])


def e2e_bsp(ctx: Context) -> dict:
    return _e2e(ctx, "e2e_bsp", ["launch.py", *e2e_overrides(ctx, "bsp")])


def e2e_pyg(ctx: Context) -> dict:
    """The PyG reference (NeighborLoader, PyG's GraphSAGE) on the same config. It needs
    torch_sparse (or pyg-lib): without it the step fails, saying so; it is never skipped."""
    have = importable(ctx, ["torch_scatter", "torch_sparse", "pyg_lib"])
    if not (have["pyg_lib"] or (have["torch_scatter"] and have["torch_sparse"])):
        return {"status": "failed", "modules": have, "reason": (
            "the PyG reference needs torch_sparse/torch_scatter (or pyg-lib), and they are not installed: "
            "prepare their wheels with `python benchmarks/gpu/device.py --prepare` and carry .gpu-wheels")}
    workers = ["compare.pyg_workers=2"] if ctx.tiny else []  # else auto: PyG's example's 12, cores allowing
    return _e2e(ctx, "e2e_pyg", ["benchmarks/gpu/reference_run.py", *e2e_overrides(ctx, "bsp"), *workers], "--out=")


def _run_figures(out) -> dict:
    metrics = out / "metrics.json"
    if not metrics.exists():
        return {}
    report = json.loads(metrics.read_text())
    times = [e["epoch_time_s"] for e in report["epochs"]]
    steady = times[1:] or times  # the first epoch pays for start-up and compilation
    final = report.get("final") or {}
    return {"epoch_times_s": times, "mean_epoch_s": sum(times) / len(times) if times else None,
            "steady_epoch_s": sum(steady) / len(steady) if steady else None, "test_acc": final.get("test_acc"),
            "val_acc": final.get("val_acc"), "train_acc": final.get("train_acc"), "metrics": rel(metrics),
            **({"setup": final["setup"]} if "setup" in final else {})}  # the reference's: its workers
