"""The summary: one markdown table of the headline figures of every command found under
benchmarks/results/<device>/<command>/result.json, with each command's commit, fused-kernel
source hash and step statuses, in <device>/summary.md. Every command rewrites it as its steps end
(over what it finds: a command unpacked there from an earlier call counts), and
`python -m benchmarks.gpu.device summary` remakes it."""
from __future__ import annotations

import json
from pathlib import Path

NA = "n/a"
ORDER = ("check", "speed", "speed2", "pyg")


def fmt(value, spec: str = ".2f", suffix: str = "") -> str:
    return NA if value is None else f"{value:{spec}}{suffix}"


def ratio(a, b, spec: str = ".2f") -> str:
    return NA if a is None or not b else f"{a / b:{spec}}x"


def load(results: Path) -> dict:
    """{command: its record} for every command folder there."""
    records = {}
    for command in ORDER:
        try:
            records[command] = json.loads((results / command / "result.json").read_text())
        except (OSError, json.JSONDecodeError):
            continue
    return records


def why(result: dict) -> str:
    return f" [{result['status']}: {result.get('reason', '')}]" if result.get("status") not in (None, "passed") else ""


def kernel_rows(records: dict) -> list[tuple[str, str]]:
    """Per command: the Triton cache it used (carried, or compiled there) and the kernels compiled
    on the device, step by step."""
    rows = []
    for command, record in records.items():
        steps = record.get("steps", {})
        cache = (steps.get("env") or {}).get("triton_cache")
        if not cache:
            continue
        compiled = {k: v["kernels_compiled_here"] for k, v in steps.items() if v.get("kernels_compiled_here")}
        where = ", ".join(f"{k} {n}" for k, n in compiled.items()) or "none"
        rows.append((f"{command}: Triton cache; fused-kernel variants compiled on the device",
                     f"{cache.get('status')}: {cache.get('summary', '')}; compiled here: {where}"))
    return rows


def check_rows(steps: dict) -> list[tuple[str, str]]:
    smoke, tests, stress, sanitize, race = (steps.get(k) or {} for k in
                                            ("smoke", "tests_gpu", "stress", "sanitize", "racecheck"))
    variants = "; ".join(f"{'weighted ' if v.get('weighted') else ''}x{v['batches']}: {v.get('registers', NA)} "
                         f"registers, {v.get('spilled_bytes', NA)} B "
                         f"spilled, {v.get('programs', NA)} programs, first launch "
                         f"{fmt(v.get('first_launch_s'), '.3f')} s" for v in smoke.get("variants", []))
    s = stress.get("stress") or {}
    call_ms = s.get("call_ms") or {}
    tools = {**(sanitize.get("tools") or {}), **(race.get("tools") or {})}
    return [
        (f"fused kernel smoke launch, uniform and weighted ({fmt(smoke.get('hard_limit_s'), '.0f')} s hard limit)",
         f"{smoke.get('status', 'not run')}; {variants or smoke.get('reason', '')}"),
        ("pytest -m gpu on the GPU test modules, weighted and pipeline first (the CPU dry run: CPU tests)",
         f"{tests.get('passed', NA)} passed, {tests.get('failed', NA)} failed, {tests.get('errors', NA)} errors, "
         f"{tests.get('skipped', NA)} skipped" + why(tests)),
        ("stress: calls (weighted), launches (overflow reruns), batches; launches/s; call ms p50/p99/max",
         f"{s.get('calls', NA)} calls ({s.get('weighted_calls', NA)} weighted), {s.get('launches', NA)} launches "
         f"({s.get('overflow_reruns', NA)} reruns), "
         f"{s.get('batches', NA)} batches, up to {s.get('max_batches_per_call', NA)} a call; "
         f"{fmt(s.get('launches_per_s'), '.0f')}/s; {fmt(call_ms.get('p50'), '.1f')}/{fmt(call_ms.get('p99'), '.1f')}/"
         f"{fmt(call_ms.get('max'), '.1f')} ms; {s.get('checked_batches', NA)} batches checked, "
         f"{s.get('replays', NA)} replays, {len(s.get('failures') or [])} failures" + why(stress)),
        ("compute-sanitizer errors", (", ".join(f"{t} {fmt(r.get('errors'), 'd')}" for t, r in tools.items())
                                     if tools else NA) + "".join(sorted({why(sanitize), why(race)}))),
    ]


def speed_rows(steps: dict, pyg: dict) -> list[tuple[str, str]]:
    s, c, p = (steps.get(k) or {} for k in ("sampling", "cache", "pipeline"))
    ps = pyg.get("sampling_pyg") or {}
    interp = " (fused under the CPU interpreter)" if s.get("fused_ms") and s.get("fused_interpreted") else ""
    return [
        (f"sampler ms per batch, {s.get('batch_size', NA)} seeds, {s.get('fanouts', NA)}: fused, bsp, pyg",
         f"fused {fmt(s.get('fused_ms'))}, bsp {fmt(s.get('bsp_ms'))}, pyg {fmt(ps.get('pyg_ms'))}; fused over bsp "
         f"{ratio(s.get('bsp_ms'), s.get('fused_ms'))}{interp}" + why(s) + why(ps)),
        (f"sampled edges/s: fused super-batch of {s.get('super_batch', NA)} (best config); bsp; pyg",
         f"{fmt(s.get('super_batch_edges_per_s'), '.3g')} ({fmt(s.get('best_super_batch_edges_per_s'), '.3g')}); "
         f"{fmt(s.get('bsp_edges_per_s'), '.3g')}; {fmt(ps.get('pyg_edges_per_s'), '.3g')}"),
        *e2e_rows(steps, pyg),
        (f"cache hit ratio, degree at {fmt(c.get('size'), '.0%')} of nodes (optimal); auto size",
         f"{fmt(c.get('hit_ratio'), '.3f')} ({fmt(c.get('optimal_hit_ratio'), '.3f')}); auto "
         f"{fmt(c.get('auto_capacity_fraction'), '.0%')} of nodes, hit {fmt(c.get('auto_hit_ratio'), '.3f')}" + why(c)),
        ("gather GB/s, degree cache vs no cache", f"{fmt(c.get('gather_gb_s'))} vs {fmt(c.get('none_gather_gb_s'))} "
                                                  f"({fmt(c.get('gather_speedup_vs_none'), '.2f', 'x')})"),
        *pipeline_rows(p),
    ]


def e2e_rows(steps: dict, pyg: dict) -> list[tuple[str, str]]:
    fused, bsp, ref = steps.get("e2e_fused") or {}, steps.get("e2e_bsp") or {}, pyg.get("e2e_pyg") or {}
    workers = (ref.get("setup") or {}).get("workers", NA)
    return [
        (f"one epoch, s: launch.py sampler=fused, sampler=bsp; PyG reference (NeighborLoader, {workers} workers)",
         f"{fmt(fused.get('epoch_s'))}, {fmt(bsp.get('epoch_s'))}; {fmt(ref.get('epoch_s'))}; bsp / fused "
         f"{ratio(bsp.get('epoch_s'), fused.get('epoch_s'))}, PyG / fused "
         f"{ratio(ref.get('epoch_s'), fused.get('epoch_s'))}"
         + why(fused) + why(bsp) + why(ref)),
        ("test accuracy after that epoch: fused, bsp, PyG",
         f"{fmt(fused.get('test_acc'), '.4f')}, {fmt(bsp.get('test_acc'), '.4f')}, {fmt(ref.get('test_acc'), '.4f')}"),
    ]


def pipeline_rows(p: dict) -> list[tuple[str, str]]:
    asyn, mps = p.get("async") or {}, p.get("async_mps") or {}
    state = p.get("mps") or {"status": "not run", "reason": "no MPS mode on this device"}
    mps_text = f"{fmt(mps.get('epoch_s'))} s" if mps else f"{state['status']}: {state.get('reason', '')}"
    ipc = asyn.get("ipc_fraction")
    return [
        ("pipeline epoch s, async vs serial; async under MPS",
         f"{fmt(asyn.get('epoch_s'))} vs {fmt(p.get('serial_epoch_s'))} "
         f"({fmt(asyn.get('speedup_vs_serial'), '.2f', 'x')}); MPS: {mps_text}" + why(p)),
        ("epoch time / slowest stage alone (1.0 = perfect overlap), async (MPS)",
         f"{fmt(asyn.get('overlap_efficiency'))} ({fmt(mps.get('overlap_efficiency'))}); slowest stage "
         f"{fmt(p.get('slowest_stage_s'))} s"),
        ("GPU utilisation during async epochs (MPS); IPC per batch (share of an iteration)",
         f"{fmt(asyn.get('gpu_util_percent'), '.0f', '%')} ({fmt(mps.get('gpu_util_percent'), '.0f', '%')}); "
         f"{fmt(asyn.get('ipc_ms_per_batch'), '.3f')} ms ({fmt(None if ipc is None else 100 * ipc, '.2f', '%')})"),
    ]


def header(results: Path, records: dict) -> list[str]:
    env = next((r["steps"]["env"].get("python", {}) for r in records.values() if r["steps"].get("env")), {})
    gpu = env.get("gpu", {})
    lines = [f"# GPU validation suite: {results.name}", "",
             f"- device: {gpu.get('name', 'CPU')}" + (f", {gpu['sm_count']} SMs, {gpu['memory_gib']} GiB, "
                                                     f"L2 {gpu['l2_mib']} MiB" if gpu else "")
             + f"; {env.get('cpu_count', '?')} CPU cores; torch {env.get('torch', '?')}, triton "
               f"{env.get('triton', '?')}, PyG {env.get('torch_geometric', '?')}, numpy {env.get('numpy', '?')}",
             "", "| command | commit | fused source | finished | steps |", "|---|---|---|---|---|"]
    for command, r in records.items():
        source = str((r.get("fused_source") or {}).get("sha256"))[:12]
        finished = "yes" if r.get("finished") else f"no: {r.get('stopped', 'running or cut short')}"
        steps = ", ".join(f"{k} {v['status']}" for k, v in r["steps"].items())
        lines.append(f"| {command} | {r.get('commit')} | {source} | {finished} | {steps} |")
    return lines


def render(results: Path, records: dict) -> str:
    steps = {c: r["steps"] for c, r in records.items()}
    lines = header(results, records) + ["", "| figure | value |", "|---|---|"]
    speed = {**steps.get("speed2", {}), **steps.get("speed", {})}  # speed's figures; speed2's cache and pipeline
    rows = (check_rows(steps["check"]) if "check" in steps else []) + (
        speed_rows(speed, steps.get("pyg", {})) if {"speed", "speed2", "pyg"} & set(steps) else [])
    lines += [f"| {figure} | {value} |" for figure, value in rows + kernel_rows(records)]
    missing = [c for c in ORDER if c not in records]
    if missing:
        lines += ["", f"Not here yet: {', '.join(missing)} (`python -m benchmarks.gpu.device next` runs the first)."]
    failures = [f"{c} {k}: {v.get('reason', '')}" for c, s in steps.items() for k, v in s.items()
                if v["status"] in ("failed", "not run", "killed")]
    lines += ["", "Failures:" if failures else "No step failed."] + [f"- {f}" for f in failures]
    cut = [f"{c} {k}: {v.get('reason', '')}" for c, s in steps.items() for k, v in s.items()
           if v["status"] == "partial"]
    if cut:
        lines += ["", "Stopped at their limits (`next` runs these commands again):"] + [f"- {f}" for f in cut]
    return "\n".join(lines) + "\n"


def write(results: Path) -> str:
    """Remake <results>/summary.md from the command folders there; returns the text."""
    text = render(results, load(results))
    results.mkdir(parents=True, exist_ok=True)
    (results / "summary.md").write_text(text)
    return text
