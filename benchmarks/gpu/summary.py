"""The `summary` step: one markdown table of the headline figures from the other steps' JSON,
with the device, the commit and the commands that produced them, in <results>/summary.md."""
from __future__ import annotations

from common import Context, read_result

STEPS = ("setup", "env", "tests", "sanitize", "bench", "e2e")
NA = "n/a"


def fmt(value, spec: str = ".2f", suffix: str = "") -> str:
    return NA if value is None else f"{value:{spec}}{suffix}"


def ratio(a, b, spec: str = ".2f") -> str:
    return NA if a is None or not b else f"{a / b:{spec}}x"


def rows(results: dict) -> list[tuple[str, str, str]]:
    """(figure, value, source) for every headline figure, n/a where its step did not give it."""
    bench = (results.get("bench") or {}).get("benchmarks", {})
    sampling, cache, pipe = (bench.get(k, {}) for k in ("sampling", "cache", "pipeline"))
    e2e = (results.get("e2e") or {}).get("systems", {})
    conv, pyg = e2e.get("conveyor", {}), e2e.get("pyg", {})
    asyn, mps = pipe.get("async", {}), pipe.get("async_mps", {})
    interpreted = sampling.get("fused_ms") and sampling.get("fused_interpreted")
    interp = " (fused under the CPU interpreter)" if interpreted else ""
    out = [
        ("sampler ms per batch, 1024 seeds, [15,10,5]: fused, bsp, pyg",
         f"fused {fmt(sampling.get('fused_ms'))}, bsp {fmt(sampling.get('bsp_ms'))}, pyg "
         f"{fmt(sampling.get('pyg_ms'))}; fused speed-up over bsp "
         f"{ratio(sampling.get('bsp_ms'), sampling.get('fused_ms'))}"
         + interp, "bench/sampling.json"),
        (f"sampled edges/s, fused super-batch of {sampling.get('super_batch', NA)} (best config)",
         f"{fmt(sampling.get('super_batch_edges_per_s'), '.3g')} "
         f"({fmt(sampling.get('best_super_batch_edges_per_s'), '.3g')}); "
         f"bsp {fmt(sampling.get('bsp_edges_per_s'), '.3g')}", "bench/sampling.json"),
        (f"cache hit ratio, degree at {fmt(cache.get('size'), '.0%')} of nodes (optimal); auto size",
         f"{fmt(cache.get('hit_ratio'), '.3f')} ({fmt(cache.get('optimal_hit_ratio'), '.3f')}); auto "
         f"{fmt(cache.get('auto_capacity_fraction'), '.0%')} of nodes, hit {fmt(cache.get('auto_hit_ratio'), '.3f')}",
         "bench/cache.json"),
        ("gather GB/s, degree cache vs no cache",
         f"{fmt(cache.get('gather_gb_s'))} vs {fmt(cache.get('none_gather_gb_s'))} "
         f"({fmt(cache.get('gather_speedup_vs_none'), '.2f', 'x')})", "bench/cache.json"),
        ("epoch time, async vs serial (async under MPS)",
         f"{fmt(asyn.get('epoch_s'))} vs {fmt(pipe.get('serial_epoch_s'))} s "
         f"({fmt(asyn.get('speedup_vs_serial'), '.2f', 'x')}); MPS: "
         + (f"{fmt(mps.get('epoch_s'))} s" if mps else str(pipe.get("mps", NA))), "bench/pipeline.json"),
        ("epoch time / slowest stage alone (1.0 = perfect overlap), async (MPS)",
         f"{fmt(asyn.get('overlap_efficiency'))} ({fmt(mps.get('overlap_efficiency'))}); slowest stage "
         f"{fmt(pipe.get('slowest_stage_s'))} s", "bench/pipeline.json"),
        ("GPU utilisation during async epochs (MPS)",
         f"{fmt(asyn.get('gpu_util_percent'), '.0f', '%')} ({fmt(mps.get('gpu_util_percent'), '.0f', '%')})",
         "bench/pipeline.json"),
        ("IPC per batch, and its share of an iteration (async)",
         f"{fmt(asyn.get('ipc_ms_per_batch'), '.3f')} ms ({fmt(_pct(asyn.get('ipc_fraction')), '.2f', '%')})",
         "bench/pipeline.json"),
        ("end-to-end epoch time, conveyor vs PyG reference (steady epochs; PyG: NeighborLoader with "
         f"{_or_na((results.get('e2e') or {}).get('workers'))} persistent worker processes, as its products "
         "example)",
         f"{fmt(conv.get('steady_epoch_s'))} vs {fmt(pyg.get('steady_epoch_s'))} s "
         f"(PyG / conveyor {ratio(pyg.get('steady_epoch_s'), conv.get('steady_epoch_s'))})"
         + (f"; PyG: {pyg['reason']}" if pyg.get("status") == "skipped" else ""), "e2e.json"),
        ("end-to-end test accuracy, conveyor vs PyG reference",
         f"{fmt(conv.get('test_acc'), '.4f')} vs {fmt(pyg.get('test_acc'), '.4f')}", "e2e.json"),
    ]
    tests, sanitize = results.get("tests") or {}, results.get("sanitize") or {}
    out.append(("tests on the device", f"{tests.get('passed', NA)} passed, {tests.get('failed', NA)} failed, "
                f"{tests.get('errors', NA)} errors, {tests.get('skipped', NA)} skipped", "tests.json"))
    tools = sanitize.get("tools")
    out.append(("compute-sanitizer errors", ", ".join(f"{t} {r.get('errors', NA)}" for t, r in tools.items())
                if tools else f"skipped: {sanitize.get('reason', 'not run')}", "sanitize.json"))
    return out


def _or_na(value):
    return NA if value is None else value


def _pct(fraction):
    return None if fraction is None else 100 * fraction


def summary(ctx: Context) -> dict:
    results = {step: read_result(ctx, step) for step in STEPS}
    env = (results.get("env") or {}).get("python", {})
    gpu = env.get("gpu", {})
    lines = [f"# GPU validation suite: {ctx.label}", "",
             f"- device: {gpu.get('name', 'CPU')}" + (f", {gpu['sm_count']} SMs, {gpu['memory_gib']} GiB, "
                                                     f"L2 {gpu['l2_mib']} MiB" if gpu else "")
             + f"; {env.get('cpu_count', '?')} CPU cores; torch {env.get('torch', '?')}, triton "
               f"{env.get('triton', '?')}, PyG {env.get('torch_geometric', '?')}",
             f"- commit: {next((r['commit'] for r in results.values() if r), 'unknown')}",
             f"- graph: synthetic, scale {ctx.scale:g}" + (" (the CPU dry run's small graph: figures say "
                                                          "nothing about a GPU)" if ctx.tiny else " (products-sized)"),
             "", "| step | status | note |", "|---|---|---|"]
    for step, r in results.items():
        lines.append(f"| {step} | {r['status'] if r else 'not run'} | {(r or {}).get('reason', '')} |")
    lines += ["", "| figure | value | from |", "|---|---|---|"]
    lines += [f"| {figure} | {value} | {source} |" for figure, value, source in rows(results)]
    flags = f"--device {ctx.device}" + (" --tiny" if ctx.tiny else "")
    lines += ["", f"Commands: `python benchmarks/gpu/suite.py all {flags}` (or one step at a time), "
                  "which ran:", ""]
    for r in results.values():
        commands = (r or {}).get("commands") or []
        lines += [f"    {cmd}" for cmd in (commands.values() if isinstance(commands, dict) else commands)]
    text = "\n".join(lines) + "\n"
    path = ctx.results / "summary.md"
    path.write_text(text)
    print(text)
    missing = [s for s, r in results.items() if r is None]
    return {"status": "passed", "summary": str(path), "steps": {s: (r or {}).get("status", "not run")
                                                                for s, r in results.items()},
            **({"note": f"not run: {', '.join(missing)}"} if missing else {})}
