"""The summary: one markdown table of the headline figures of every phase found under
benchmarks/results/<device>/phase<N>/, with each phase's device, commit and step statuses, in
<device>/summary.md. Every phase writes it (over what it finds: a phase unpacked there from an
earlier call counts), and `device.py summary` remakes it."""
from __future__ import annotations

import json
from pathlib import Path

NA = "n/a"


def fmt(value, spec: str = ".2f", suffix: str = "") -> str:
    return NA if value is None else f"{value:{spec}}{suffix}"


def ratio(a, b, spec: str = ".2f") -> str:
    return NA if a is None or not b else f"{a / b:{spec}}x"


def load(results: Path) -> dict:
    """{phase: {step: result}} for every phase folder there."""
    phases = {}
    for folder in sorted(results.glob("phase[123]")):
        steps = {}
        for path in sorted(folder.glob("*.json"), key=lambda p: p.stat().st_mtime):  # the order they ran
            data = json.loads(path.read_text())
            if isinstance(data, dict) and "step" in data:
                steps[data["step"]] = data
        phases[int(folder.name[-1])] = steps
    return phases


def check_rows(p1: dict) -> list[tuple[str, str]]:
    smoke, sanitize = p1.get("smoke") or {}, p1.get("sanitize") or {}
    variants = "; ".join(f"x{v['batches']}: {v.get('registers', NA)} registers, {v.get('spilled_bytes', NA)} B "
                         f"spilled, {v.get('programs', NA)} programs, first launch "
                         f"{fmt(v.get('first_launch_s'), '.3f')} s" for v in smoke.get("variants", []))
    rows = [("fused kernel smoke launch (60 s limit)",
             f"{smoke.get('status', 'not run')}; {variants or smoke.get('reason', '')}")]
    for name in ("tests_gpu", "tests_stages"):
        t = p1.get(name) or {}
        rows.append((f"pytest ({name})", f"{t.get('passed', NA)} passed, {t.get('failed', NA)} failed, "
                     f"{t.get('errors', NA)} errors, {t.get('skipped', NA)} skipped" + _why(t)))
    tools = sanitize.get("tools")
    rows.append(("compute-sanitizer errors", ", ".join(f"{t} {r.get('errors', NA)}" for t, r in tools.items())
                 if tools else f"{sanitize.get('status', 'not run')}: {sanitize.get('reason', '')}"))
    return rows


def bench_rows(p2: dict) -> list[tuple[str, str]]:
    s, st, c, p = (p2.get(k) or {} for k in ("sampling", "stress", "cache", "pipeline"))
    asyn, mps = p.get("async") or {}, p.get("async_mps") or {}
    interp = " (fused under the CPU interpreter)" if s.get("fused_ms") and s.get("fused_interpreted") else ""
    state = p.get("mps") or {"status": "not run", "reason": "no MPS mode on this device"}
    mps_text = f"{fmt(mps.get('epoch_s'))} s" if mps else f"{state['status']}: {state.get('reason', '')}"
    call_ms = st.get("call_ms") or {}
    return [
        ("sampler ms per batch, 1024 seeds, [15,10,5]: fused, bsp, pyg",
         f"fused {fmt(s.get('fused_ms'))}, bsp {fmt(s.get('bsp_ms'))}, pyg {fmt(s.get('pyg_ms'))} "
         f"({s.get('pyg_batches', NA)} batches); fused over bsp {ratio(s.get('bsp_ms'), s.get('fused_ms'))}{interp}"
         + _why(s)),
        (f"sampled edges/s: fused super-batch of {s.get('super_batch', NA)} (best config); bsp",
         f"{fmt(s.get('super_batch_edges_per_s'), '.3g')} ({fmt(s.get('best_super_batch_edges_per_s'), '.3g')}); "
         f"{fmt(s.get('bsp_edges_per_s'), '.3g')}"),
        ("stress: calls, launches (overflow reruns), batches; launches/s; call ms p50/p99/max",
         f"{st.get('stress_status', st.get('status', 'not run'))}: {st.get('calls', NA)} calls, "
         f"{st.get('launches', NA)} launches ({st.get('overflow_reruns', NA)} reruns), "
         f"{st.get('batches', NA)} batches, up to "
         f"{st.get('max_batches_per_call', NA)} a call; {fmt(st.get('launches_per_s'), '.0f')}/s; "
         f"{fmt(call_ms.get('p50'), '.1f')}/{fmt(call_ms.get('p99'), '.1f')}/{fmt(call_ms.get('max'), '.1f')} ms; "
         f"programs {st.get('programs', NA)} (resident {st.get('resident_programs', NA)}); "
         f"{st.get('checked_batches', NA)} batches checked, {st.get('replays', NA)} replays, "
         f"{len(st.get('failures') or [])} failures" + _why(st)),
        (f"cache hit ratio, degree at {fmt(c.get('size'), '.0%')} of nodes (optimal); auto size",
         f"{fmt(c.get('hit_ratio'), '.3f')} ({fmt(c.get('optimal_hit_ratio'), '.3f')}); auto "
         f"{fmt(c.get('auto_capacity_fraction'), '.0%')} of nodes, hit {fmt(c.get('auto_hit_ratio'), '.3f')}"
         + _why(c)),
        ("gather GB/s, degree cache vs no cache",
         f"{fmt(c.get('gather_gb_s'))} vs {fmt(c.get('none_gather_gb_s'))} "
         f"({fmt(c.get('gather_speedup_vs_none'), '.2f', 'x')})"),
        ("epoch time, async vs serial; async under MPS",
         f"{fmt(asyn.get('epoch_s'))} vs {fmt(p.get('serial_epoch_s'))} s "
         f"({fmt(asyn.get('speedup_vs_serial'), '.2f', 'x')}); MPS: {mps_text}" + _why(p)),
        ("epoch time / slowest stage alone (1.0 = perfect overlap), async (MPS)",
         f"{fmt(asyn.get('overlap_efficiency'))} ({fmt(mps.get('overlap_efficiency'))}); slowest stage "
         f"{fmt(p.get('slowest_stage_s'))} s"),
        ("GPU utilisation during async epochs (MPS)",
         f"{fmt(asyn.get('gpu_util_percent'), '.0f', '%')} ({fmt(mps.get('gpu_util_percent'), '.0f', '%')})"),
        ("IPC per batch, and its share of an iteration (async)",
         f"{fmt(asyn.get('ipc_ms_per_batch'), '.3f')} ms ({fmt(_pct(asyn.get('ipc_fraction')), '.2f', '%')})"),
    ]


def e2e_rows(p3: dict) -> list[tuple[str, str]]:
    fused, bsp, pyg = (p3.get(k) or {} for k in ("e2e_fused", "e2e_bsp", "e2e_pyg"))
    workers = (pyg.get("setup") or {}).get("workers", NA)
    return [
        ("end-to-end steady epoch s: conveyor fused, conveyor bsp, PyG reference (NeighborLoader, "
         f"{workers} workers)",
         f"{fmt(fused.get('steady_epoch_s'))}, {fmt(bsp.get('steady_epoch_s'))}, {fmt(pyg.get('steady_epoch_s'))}; "
         f"PyG / fused {ratio(pyg.get('steady_epoch_s'), fused.get('steady_epoch_s'))}, PyG / bsp "
         f"{ratio(pyg.get('steady_epoch_s'), bsp.get('steady_epoch_s'))}" + _why(fused) + _why(bsp) + _why(pyg)),
        ("end-to-end test accuracy: fused, bsp, PyG",
         f"{fmt(fused.get('test_acc'), '.4f')}, {fmt(bsp.get('test_acc'), '.4f')}, {fmt(pyg.get('test_acc'), '.4f')}"),
    ]


def _why(result: dict) -> str:
    return f" [{result['status']}: {result.get('reason', '')}]" if result.get("status") not in (None, "passed") else ""


def _pct(fraction):
    return None if fraction is None else 100 * fraction


def render(results: Path, phases: dict) -> str:
    env = next((p["env"].get("python", {}) for p in phases.values() if p.get("env")), {})
    gpu = env.get("gpu", {})
    lines = [f"# GPU validation suite: {results.name}", "",
             f"- device: {gpu.get('name', 'CPU')}" + (f", {gpu['sm_count']} SMs, {gpu['memory_gib']} GiB, "
                                                     f"L2 {gpu['l2_mib']} MiB" if gpu else "")
             + f"; {env.get('cpu_count', '?')} CPU cores; torch {env.get('torch', '?')}, triton "
               f"{env.get('triton', '?')}, PyG {env.get('torch_geometric', '?')}, numpy {env.get('numpy', '?')}",
             "", "| phase | commit | steps |", "|---|---|---|"]
    for n, steps in phases.items():
        commit = next((s.get("commit") for s in steps.values()), NA)
        lines.append(f"| {n} | {commit} | " + ", ".join(f"{k} {v['status']}" for k, v in steps.items()) + " |")
    lines += ["", "| figure | value |", "|---|---|"]
    for n, rows in ((1, check_rows), (2, bench_rows), (3, e2e_rows)):
        if n in phases:
            lines += [f"| {figure} | {value} |" for figure, value in rows(phases[n])]
    missing = [str(n) for n in (1, 2, 3) if n not in phases]
    if missing:
        lines += ["", f"Phases not here: {', '.join(missing)} (unpack their phase<N>.tar.gz into {results.name}/)."]
    failed = [f"phase {n} {k}: {v.get('reason', '')}" for n, s in phases.items() for k, v in s.items()
              if v["status"] in ("failed", "not run")]
    lines += ["", "Failures:" if failed else "No step failed."] + [f"- {f}" for f in failed]
    return "\n".join(lines) + "\n"


def write(results: Path) -> str:
    """Remake results/summary.md from the phase folders there; returns the text."""
    text = render(results, load(results))
    results.mkdir(parents=True, exist_ok=True)
    (results / "summary.md").write_text(text)
    return text
