"""The steps that measure: `bench` (the stage benchmarks, each run as it is, its JSON kept) and
`e2e` (launch.py against the PyG reference loop on the same graph and config)."""
from __future__ import annotations

import json
import shutil
import sys

from common import DATA_ROOT, Context, read_result, rel, run_logged, show
from offline import ensure_graph, importable

# Limits (seconds): bench's three add up to 8 minutes, e2e's two to 8.5 (plus loading the graph).
BENCH_LIMITS = {"sampling": 110, "cache": 130, "pipeline": 240}
E2E_LIMITS = {"conveyor": 210, "pyg": 300}
BENCHMARKS = tuple(BENCH_LIMITS)
SYSTEMS = tuple(E2E_LIMITS)


def bench_args(ctx: Context, name: str) -> list[str]:
    """Each benchmark's own flags: products scale on the GPU as its docstring runs it; a small
    graph and few batches for the dry run (where fused would run under Triton's interpreter,
    seconds a batch: the dry run samples with bsp and pyg only)."""
    common = ["--device", ctx.device, "--scale", str(ctx.scale), "--data-root", str(DATA_ROOT)]
    tiny = {
        "sampling": ["--samplers", "bsp,pyg", "--batches", "2", "--fanouts", "15,10,5", "--batch-sizes", "1024"],
        "cache": ["--sizes", "0.1,0.2", "--timed-batches", "2", "--repeats", "1", "--batch-size", "256"],
        "pipeline": ["--epochs", "2", "--batch-size", "128", "--fanouts", "5,5"],
    }
    full = {"sampling": [], "cache": [], "pipeline": ["--epochs", "3"]}
    return common + (tiny if ctx.tiny else full)[name]


def bench(ctx: Context, only: list[str] | None = None) -> dict:
    graph = ensure_graph(ctx, 240)
    if graph["status"] != "ok":
        return {"status": "failed", "reason": graph["reason"]}
    out_dir = ctx.results / "bench"
    out_dir.mkdir(parents=True, exist_ok=True)
    result = {"graph": graph, **_previous(ctx, "bench", only, "benchmarks")}
    for name in only or BENCHMARKS:
        out = out_dir / f"{name}.json"
        out.unlink(missing_ok=True)
        cmd = [sys.executable, f"benchmarks/{name}.py", *bench_args(ctx, name), "--out", str(out)]
        result["commands"][name] = show(cmd)
        outcome = run_logged(ctx, f"bench_{name}", cmd, BENCH_LIMITS[name])
        if outcome.ok and out.exists():
            figures = HEADLINES[name](json.loads(out.read_text()))
            result["benchmarks"][name] = {"status": "passed", "json": rel(out), "seconds": outcome.seconds,
                                          **figures}
        else:
            result["benchmarks"][name] = {"status": "failed", "reason": f"{name}.py {outcome.describe()}"}
        print(f"bench {name}: {json.dumps(result['benchmarks'][name], default=str)}")
    failed = [f"{n}: {r['reason']}" for n, r in result["benchmarks"].items() if r["status"] != "passed"]
    return {"status": "failed" if failed else "passed", **result,
            **({"reason": "; ".join(failed)} if failed else {})}


def _previous(ctx: Context, step: str, only, key: str) -> dict:
    """With --only, the parts not rerun keep their earlier figures and commands."""
    earlier = (read_result(ctx, step) or {}) if only else {}
    return {"commands": dict(earlier.get("commands") or {}), key: dict(earlier.get(key) or {})}


def sampling_headline(report: dict) -> dict:
    """fused and bsp at 1024 seeds, [15, 10, 5]; the super-batch's sampled edges per second."""
    def row(sampler, mode="batch", fanouts=(15, 10, 5), batch_size=1024):
        return next((r for r in report["rows"] if r["sampler"] == sampler and r["mode"] == mode
                     and r["fanouts"] == list(fanouts) and r["batch_size"] == batch_size
                     and r["available"]), None)
    fused, bsp, pyg, superb = row("fused"), row("bsp"), row("pyg"), row("fused", "super-batch")
    best_super = max((r for r in report["rows"] if r["mode"] == "super-batch" and r["available"]),
                     key=lambda r: r["edges_per_s"], default=None)
    return {"fused_ms": fused and fused["ms_per_batch"], "bsp_ms": bsp and bsp["ms_per_batch"],
            "pyg_ms": pyg and pyg["ms_per_batch"],
            "fused_speedup_vs_bsp": fused and fused.get("speedup_vs_bsp"),
            "fused_interpreted": report["meta"]["fused_interpreted"],
            "super_batch": report["meta"]["super_batch"],
            "super_batch_edges_per_s": superb and superb["edges_per_s"],
            "best_super_batch_edges_per_s": best_super and best_super["edges_per_s"],
            "bsp_edges_per_s": bsp and bsp["edges_per_s"]}


def cache_headline(report: dict) -> dict:
    """degree cache at 20% of the nodes (PaGraph's bar) against optimal and no cache; auto sizing."""
    size = "0.2" if "0.2" in report["hit_ratio"]["degree"] else next(iter(report["hit_ratio"]["degree"]))
    degree = report["policies"]["degree"][size]
    auto = report["auto"]
    return {"size": float(size), "hit_ratio": degree["hit_ratio"],
            "optimal_hit_ratio": report["hit_ratio"]["optimal"][size],
            "gather_gb_s": degree["gather_gb_s"], "none_gather_gb_s": report["none"]["gather_gb_s"],
            "gather_speedup_vs_none": report["gather_speedup_vs_none"][size],
            "auto_capacity_fraction": auto["capacity_fraction"], "auto_hit_ratio": auto["hit_ratio"],
            "bar_passed": report["bar"]["passed"]}


def pipeline_headline(report: dict) -> dict:
    """async (and async under MPS) against serial; overlap; IPC; GPU utilisation."""
    results, summary = report["results"], report["summary"]
    out = {"serial_epoch_s": results["serial"]["epoch_s"], "slowest_stage_s": summary["slowest_stage_s"],
           "stage_sum_s": summary["stage_sum_s"]}
    for mode in ("async", "async_mps"):
        if mode in summary:
            s = summary[mode]
            out[mode] = {"epoch_s": s["epoch_s"], "speedup_vs_serial": s["speedup_vs_serial"],
                         "overlap_efficiency": s["overlap_efficiency"], "ipc_ms_per_batch": s["ipc_ms_per_batch"],
                         "ipc_fraction": s["ipc_fraction_of_iteration"],
                         "gpu_util_percent": results[mode].get("gpu_util_percent"),
                         "mps_percent": s.get("mps_percent")}
    out["mps"] = "async_mps" in summary or "no MPS run (CPU, or nvidia-cuda-mps-control missing)"
    return out


HEADLINES = {"sampling": sampling_headline, "cache": cache_headline, "pipeline": pipeline_headline}


# -- e2e ----------------------------------------------------------------------------------------

def e2e_overrides(ctx: Context) -> list[str]:
    """launch.py's defaults (sampler, cache, pipeline, model size, batch 1024, [15, 10, 5]), with
    validation/test accuracy once, after the last epoch: epoch times exclude evaluation anyway,
    and evaluating 2.2M test nodes every epoch would cost the CPU-sampled reference minutes."""
    epochs = 2 if ctx.tiny else 3
    out = ["model=sage", "data=synthetic", f"data.scale={ctx.scale}", f"trainer.epochs={epochs}",
           f"data.root={DATA_ROOT}", f"run.device={ctx.device}", "trainer.progress=false",
           f"trainer.eval_every={epochs}"]
    return out + (["trainer.batch_size=128", "sampler.fanouts=[5,5]", "model.hidden=64"] if ctx.tiny else [])


def e2e(ctx: Context, only: list[str] | None = None) -> dict:
    graph = ensure_graph(ctx, 240)
    if graph["status"] != "ok":
        return {"status": "failed", "reason": graph["reason"]}
    overrides = e2e_overrides(ctx)
    workers = ["compare.pyg_workers=2"] if ctx.tiny else []  # else auto: PyG's example's 12, cores allowing
    argv = {"conveyor": lambda out: ["launch.py", *overrides, f"run.out_dir={out}"],
            "pyg": lambda out: ["benchmarks/gpu/reference_run.py", "--out", str(out), *overrides, *workers]}
    result = {"overrides": overrides, **_previous(ctx, "e2e", only, "systems")}
    for system in only or SYSTEMS:
        out = ctx.results / "e2e" / system
        shutil.rmtree(out, ignore_errors=True)  # launch.py refuses a folder with a checkpoint
        cmd = [sys.executable, *argv[system](out)]
        result["commands"][system] = show(cmd)
        if system == "pyg" and not all(importable(ctx, ["torch_scatter", "torch_sparse"]).values()):
            result["systems"][system] = {"status": "skipped", "reason": (
                "torch_sparse/torch_scatter are not importable: the setup step builds them from the "
                "prepared sources (see setup.json)")}
        else:
            outcome = run_logged(ctx, f"e2e_{system}", cmd, E2E_LIMITS[system])
            result["systems"][system] = _run_figures(out, outcome)
            shutil.rmtree(out / "checkpoints", ignore_errors=True)  # not a result; keeps results small
        print(f"e2e {system}: {json.dumps(result['systems'][system], default=str)}")
    systems = result["systems"]
    result["workers"] = systems.get("pyg", {}).get("setup", {}).get("workers")
    if all(systems.get(s, {}).get("status") == "passed" for s in SYSTEMS):
        result["pyg_over_conveyor_epoch_time"] = (systems["pyg"]["steady_epoch_s"] /
                                                  systems["conveyor"]["steady_epoch_s"])
    failed = [f"{s}: {r['reason']}" for s, r in systems.items() if r["status"] == "failed"]
    return {"status": "failed" if failed else "passed", **result,
            **({"reason": "; ".join(failed)} if failed else {})}


def _run_figures(out, outcome) -> dict:
    metrics = out / "metrics.json"
    if not (outcome.ok and metrics.exists()):
        return {"status": "failed", "reason": outcome.describe()}
    report = json.loads(metrics.read_text())
    times = [e["epoch_time_s"] for e in report["epochs"]]
    steady = times[1:] or times  # the first epoch pays for start-up and compilation
    final = report["final"]
    return {"status": "passed", "epoch_times_s": times, "mean_epoch_s": sum(times) / len(times),
            "steady_epoch_s": sum(steady) / len(steady), "test_acc": final.get("test_acc"),
            "val_acc": final.get("val_acc"), "train_acc": final.get("train_acc"),
            "wall_s": outcome.seconds, "metrics": rel(metrics),
            **({"setup": final["setup"]} if "setup" in final else {})}  # the reference's: its workers
