"""The steps that measure. `speed` (the headline pair): `graph` (the products-scale synthetic
graph), `sampling` (fused against bsp), `e2e_fused` and `e2e_bsp` (one epoch of launch.py with
each sampler). `speed2`: `graph`, `cache`, and `pipeline` (with and without MPS). `pyg`: `graph`,
`sampling_pyg` and `e2e_pyg` (PyG's NeighborLoader reference, on the same config).

Each benchmark runs as it is, within its step's time, writing its JSON as it goes, so a time
limit loses the figures still to come, not those already taken: a step cut by its limit is
partial (with what it measured); one that measured nothing and was not cut is failed."""
from __future__ import annotations

import shutil
import sys

from benchmarks.gpu.common import (
    DATA_ROOT,
    Context,
    failed,
    last_json,
    module,
    partial,
    read_json,
    rel,
    run_logged,
    show,
)


def graph(ctx: Context) -> dict:
    """The synthetic graph of the run's scale, generated on every core (then cached on this machine)."""
    code = (f"import json, time; t = time.perf_counter()\n"
            f"from conveyor.partition.datasets import load_dataset\n"
            f"g = load_dataset('synthetic', root={str(DATA_ROOT)!r}, scale={ctx.scale}, seed=0)\n"
            f"print(json.dumps({{'nodes': g.num_nodes, 'edges': g.num_edges, "
            f"'seconds': time.perf_counter() - t}}))")
    outcome = run_logged(ctx, "graph", [sys.executable, "-c", code], quiet=True,
                         title=f"load_dataset('synthetic', scale={ctx.scale:g}) under {rel(DATA_ROOT)}")
    figures = last_json(outcome.output)
    if outcome.cut:
        return {**partial({}, "0 graphs made (the next call on this machine goes on from its files)"),
                "usable": False}
    if not outcome.ok or not figures:
        return failed({}, f"generating the graph {outcome.describe()}")
    return {"status": "passed", "scale": ctx.scale, **figures}


def bench(ctx: Context, name: str, target: str, args: list[str], headline) -> dict:
    """Run one benchmark into <folder>/bench/<name>.json; its figures even when it was cut off.
    `headline` gives the figures that count, or None when it measured nothing."""
    out = ctx.folder / "bench" / f"{name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    cmd = module(target, *args, "--out", str(out))
    outcome = run_logged(ctx, name, cmd)
    result = {"command": show(cmd), "json": rel(out), "rc": outcome.rc}
    report = read_json(out)
    figures = headline(report) if report is not None else None
    result.update(figures or {})
    if outcome.ok and figures:
        return {**result, "status": "passed"}
    if outcome.cut:
        return partial(result, f"{(figures or {}).get('rows', 1 if figures else 0)} rows measured")
    kept = "; the figures taken before are kept" if figures else ""
    why = "it measured nothing" if outcome.ok else outcome.describe()
    return failed(result, f"{target} {why}{kept}")


def graph_args(ctx: Context) -> list[str]:
    return ["--device", ctx.device, "--scale", str(ctx.scale), "--data-root", str(DATA_ROOT)]


# -- sampling ----------------------------------------------------------------------------------

def sampling_rows(ctx: Context) -> list[str]:
    """The rows: [15, 10, 5] at 1024 and 4096 seeds (the dry run: [5, 5] at 64, one round), 20
    timed batches, the median of 3 interleaved rounds."""
    if ctx.tiny:
        return ["--batches", "2", "--fanouts", "5,5", "--batch-sizes", "64", "--rounds", "1"]
    return ["--batches", "20", "--fanouts", "15,10,5", "--batch-sizes", "1024,4096", "--rounds", "3"]


def headline_row(ctx: Context) -> tuple[list[int], int]:
    return ([5, 5], 64) if ctx.tiny else ([15, 10, 5], 1024)


def sampling(ctx: Context) -> dict:
    """fused (single batches and super-batches) against bsp; without a fused row the later steps
    leave the fused kernel alone."""
    samplers = "fused,bsp" if ctx.fused_ok else "bsp"
    args = graph_args(ctx) + ["--samplers", samplers, "--super-batch", "2" if ctx.tiny else "8", *sampling_rows(ctx)]
    result = bench(ctx, "sampling", "benchmarks.sampling", args, lambda r: sampling_headline(r, *headline_row(ctx)))
    if result.get("fused_ms") is None:
        ctx.fused_ok = False
    return result


def sampling_pyg(ctx: Context) -> dict:
    """PyG's sampler (on the CPU, as its NeighborLoader samples) on the same rows, 2 timed batches a row."""
    args = graph_args(ctx) + ["--samplers", "pyg", "--pyg-batches", "2", *sampling_rows(ctx)]
    return bench(ctx, "sampling_pyg", "benchmarks.sampling", args, lambda r: sampling_headline(r, *headline_row(ctx)))


def sampling_headline(report: dict, fanouts: list[int], batch_size: int) -> dict | None:
    """Each sampler's ms per batch and sampled edges per second at (fanouts, batch_size); the
    fused super-batch's edges per second. None when no row was measured."""
    rows = [r for r in report.get("rows", []) if r.get("available")]
    if not rows:
        return None

    def row(sampler, mode="batch"):
        return next((r for r in rows if r["sampler"] == sampler and r["mode"] == mode
                     and r["fanouts"] == fanouts and r["batch_size"] == batch_size), {})
    fused, bsp, pyg, superb = row("fused"), row("bsp"), row("pyg"), row("fused", "super-batch")
    best_super = max((r for r in rows if r["mode"] == "super-batch"), key=lambda r: r["edges_per_s"], default={})
    return {"fanouts": fanouts, "batch_size": batch_size, "fused_ms": fused.get("ms_per_batch"),
            "bsp_ms": bsp.get("ms_per_batch"), "pyg_ms": pyg.get("ms_per_batch"), "pyg_batches": pyg.get("batches"),
            "fused_speedup_vs_bsp": fused.get("speedup_vs_bsp"),
            "fused_interpreted": report["meta"]["fused_interpreted"],
            "super_batch": report["meta"]["super_batch"], "super_batch_edges_per_s": superb.get("edges_per_s"),
            "best_super_batch_edges_per_s": best_super.get("edges_per_s"), "bsp_edges_per_s": bsp.get("edges_per_s"),
            "pyg_edges_per_s": pyg.get("edges_per_s"), "rows": len(rows),
            "unavailable": {f"{r['sampler']} {r['mode']}": r["reason"] for r in report.get("rows", [])
                            if not r.get("available")}}


# -- cache and pipeline ------------------------------------------------------------------------

def cache(ctx: Context) -> dict:
    args = (["--sizes", "0.1,0.2", "--timed-batches", "2", "--repeats", "1", "--batch-size", "256"] if ctx.tiny
            else ["--batches", "60", "--sizes", "0.05,0.1,0.2,0.4", "--timed-batches", "20", "--repeats", "3"])
    return bench(ctx, "cache", "benchmarks.cache", graph_args(ctx) + args, cache_headline)


def cache_headline(report: dict) -> dict | None:
    """degree cache at 20% of the nodes (PaGraph's bar) against optimal and no cache; auto sizing."""
    degree = report.get("policies", {}).get("degree")
    if not degree:
        return None
    size = "0.2" if "0.2" in degree else next(iter(degree))
    out = {"size": float(size), "hit_ratio": report["hit_ratio"]["degree"][size],
           "optimal_hit_ratio": report["hit_ratio"].get("optimal", {}).get(size),
           "gather_gb_s": degree[size]["gather_gb_s"], "none_gather_gb_s": report.get("none", {}).get("gather_gb_s"),
           "gather_speedup_vs_none": report.get("gather_speedup_vs_none", {}).get(size)}
    auto = report.get("auto")
    if auto:
        out.update(auto_capacity_fraction=auto["capacity_fraction"], auto_hit_ratio=auto["hit_ratio"])
    if "bar" in report:
        out["bar_passed"] = report["bar"]["passed"]
    return out


def pipeline(ctx: Context) -> dict:
    """serial, async, and async under a private MPS daemon (recorded as unavailable, with why, when
    it does not start); fused sampling on the GPU unless the fused kernel failed before."""
    args = ["--epochs", "2", "--batch-size", "128", "--fanouts", "5,5"] if ctx.tiny else ["--epochs", "2"]
    args += ["--sampler", "bsp"] if ctx.cuda and not ctx.fused_ok else []
    return bench(ctx, "pipeline", "benchmarks.pipeline", graph_args(ctx) + args, pipeline_headline)


def pipeline_headline(report: dict) -> dict | None:
    """async (and async under MPS) against serial; overlap; IPC; GPU utilisation; MPS's status."""
    results, summary = report.get("results", {}), report.get("summary") or {}
    if not results:
        return None
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
                         "gpu_util_percent": results[mode].get("gpu_util_percent"), "mps_percent": s.get("mps_percent")}
    return out


# -- end to end --------------------------------------------------------------------------------

def e2e_overrides(ctx: Context, sampler: str) -> list[str]:
    """launch.py's defaults (cache, pipeline, model size, batch 1024, [15, 10, 5]) for one epoch
    with `sampler` named (auto would be bsp); the last epoch is always evaluated."""
    out = ["model=sage", "data=synthetic", f"data.scale={ctx.scale}", "trainer.epochs=1", f"data.root={DATA_ROOT}",
           f"run.device={ctx.device}", "trainer.progress=false", f"sampler={sampler}"]
    return out + (["trainer.batch_size=128", "sampler.fanouts=[5,5]", "model.hidden=64"] if ctx.tiny else [])


def e2e(ctx: Context, name: str, cmd: list[str], out_flag: str = "run.out_dir=") -> dict:
    """One training run into <folder>/<name>/ (metrics.json, TensorBoard events; no checkpoints)."""
    out = ctx.folder / name
    shutil.rmtree(out, ignore_errors=True)  # launch.py refuses a folder with a checkpoint
    cmd = cmd + [out_flag + str(out)]
    outcome = run_logged(ctx, name, cmd)
    shutil.rmtree(out / "checkpoints", ignore_errors=True)  # not a result; keeps the archive small
    result = {"command": show(cmd), "rc": outcome.rc, **run_figures(out)}
    if outcome.ok and result.get("epoch_times_s"):
        return {**result, "status": "passed"}
    if outcome.cut:
        return partial(result, f"{len(result.get('epoch_times_s') or [])} epochs finished")
    why = "it recorded no epoch" if outcome.ok else outcome.describe()
    return failed(result, f"{show(cmd[:3])} {why}")


def e2e_fused(ctx: Context) -> dict:
    if not ctx.fused_ok:
        return {"status": "not run", "reason": "the fused kernel failed in the sampling step"}
    return e2e(ctx, "e2e_fused", [sys.executable, "launch.py", *e2e_overrides(ctx, "fused")])


def e2e_bsp(ctx: Context) -> dict:
    return e2e(ctx, "e2e_bsp", [sys.executable, "launch.py", *e2e_overrides(ctx, "bsp")])


def e2e_pyg(ctx: Context) -> dict:
    """The PyG reference (NeighborLoader, PyG's GraphSAGE) on the same config and graph."""
    workers = ["compare.pyg_workers=2"] if ctx.tiny else []  # else auto: PyG's example's 12, cores allowing
    return e2e(ctx, "e2e_pyg", module("benchmarks.gpu.reference_run", *e2e_overrides(ctx, "bsp"), *workers), "--out=")


def run_figures(out) -> dict:
    report = read_json(out / "metrics.json")
    if not report:
        return {}
    times = [e["epoch_time_s"] for e in report["epochs"]]
    final = report.get("final") or {}
    return {"epoch_times_s": times, "epoch_s": times[-1] if times else None,
            "eval_time_s": report["epochs"][-1].get("eval_time_s") if times else None,
            "test_acc": final.get("test_acc"), "val_acc": final.get("val_acc"), "train_acc": final.get("train_acc"),
            "metrics": rel(out / "metrics.json"), **({"setup": final["setup"]} if "setup" in final else {})}
