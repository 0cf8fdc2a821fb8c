"""Start-up of the default run (`python launch.py`, README's first command): from the command to
the first training batch, split into its phases, beside the previous release, in one run.

    python -m benchmarks.startup --previous eb2fd52 --rounds 5

The previous release is a `git worktree` of --previous in /tmp (made once, detached), run by the
same interpreter. Each round runs both releases' `python launch.py ARGS` once (the order
alternating round by round, so a change in the machine's load touches both), each watched by
benchmarks/startup_probe.py, which stops the run after its first training step (as Ctrl-C). The
phases, in seconds on the critical path from the command:

- import: the command until the run's first line (interpreter, imports, the config's checks);
- graph: until the run has its graph (a release that loads it beside its imports waits less);
- stage start: until the pipeline's stage processes are started (the model built, the cache filled);
- first batch: until the first training step is done (the first batch sampled, gathered, trained);
- total: the command to the first training step done.

Also timed alone, in fresh interpreters: `import torch`, then `import torch_geometric` (PyG's own
cost, torch._dynamo with it), and each release's `import conveyor.trainer.run`. Each figure is the
median of the rounds, with the range; every run records the 1-minute load average when it started
(the machine may be shared). After one untimed run of each release (the synthetic graph generated
and cached, files warm). Writes JSON and a Markdown table (default benchmarks/results/startup_cpu.json,
.md).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PROBE = Path(__file__).resolve().parent / "startup_probe.py"
PHASES = (("import", "run_started"), ("graph", "graph"), ("stage start", "stages_started"),
          ("first batch", "first_step"))
IMPORTS = {"torch": "import torch",
           "torch_geometric": "import torch, time; t = time.monotonic(); import torch_geometric",
           "conveyor.trainer.run": "import conveyor.trainer.run"}


def parse_args(argv=None):
    return comparison_args(__doc__, "eb2fd52", 5, 300, "to its first step", argv)


def comparison_args(doc: str, previous: str, rounds: int, timeout: float, until: str, argv=None):
    """The arguments of a benchmark running launch.py in this release and a previous one."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--previous", default=previous, help="the previous release's commit")
    p.add_argument("--rounds", type=int, default=rounds)
    p.add_argument("--args", default="", help="launch.py's arguments, space-separated (default: none, the "
                   "default run)")
    p.add_argument("--timeout", type=float, default=timeout, help=f"seconds a run may take {until}")
    p.add_argument("--no-warmup", dest="warmup", action="store_false", help="no untimed run first (the graph "
                   "cached and the files warm already)")
    p.add_argument("--out", default=None, help="JSON path")
    return p.parse_args(argv)


def previous_checkout(commit: str) -> Path:
    """A detached worktree of `commit` in /tmp, made once and reused."""
    path = Path(tempfile.gettempdir()) / f"conveyor-startup-{commit}"
    if not (path / "launch.py").exists():
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(path), commit], check=True,
                       capture_output=True)
    return path


def probe_run(root: Path, args: list, timeout: float) -> dict:
    """One `python launch.py ARGS` in `root` under the probe: each phase's end from the command
    (seconds), the load at its start, or why it did not reach its first step."""
    with tempfile.TemporaryDirectory() as work:
        events = Path(work) / "events.json"
        code = f"import runpy; runpy.run_path({str(PROBE)!r}, run_name='__main__')"
        env = dict(os.environ, STARTUP_PROBE_OUT=str(events))
        load = os.getloadavg()[0]
        command = time.monotonic()
        proc = subprocess.Popen([sys.executable, "-c", code, *args, f"run.out_dir={work}/run"], cwd=root, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            _, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate()
        marks = json.loads(events.read_text()) if events.exists() else {}
    if marks.get("conveyor") and not Path(marks["conveyor"]).resolve().is_relative_to(root.resolve()):
        raise RuntimeError(f"the run in {root} imported {marks['conveyor']}, not its own conveyor")
    if "first_step" not in marks:
        return {"load_1min": load, "error": (err or "").strip().splitlines()[-3:], "returncode": proc.returncode}
    ends = {name: marks[event] - command for name, event in PHASES}
    ends["interpreter"] = marks["probe"] - command
    ends["first_forward"] = marks["first_forward"] - command
    return {"load_1min": load, "ends": ends, "returncode": proc.returncode}


def phases(ends: dict) -> dict:
    """Each phase's own seconds from the milestones' (the previous phase's end to its own)."""
    out, before = {}, 0.0
    for name, _ in PHASES:
        out[name] = ends[name] - before
        before = ends[name]
    out["total"] = ends["first batch"]
    return out


def import_seconds(root: Path, what: str) -> float:
    """Seconds a fresh interpreter in `root` takes to run IMPORTS[what] (torch_geometric: after torch)."""
    code = (IMPORTS[what] + "; print(time.monotonic() - t)" if what == "torch_geometric" else
            "import time; t = time.monotonic(); " + IMPORTS[what] + "; print(time.monotonic() - t)")
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def summary(values: list) -> dict:
    return {"median": statistics.median(values), "range": [min(values), max(values)], "n": len(values)}


def main(argv=None) -> None:
    args = parse_args(argv)
    releases, launch_args, out, meta = warmed_releases("benchmarks.startup", args, argv, probe_run, "startup_cpu.json")
    runs = {name: [] for name in releases}
    imports = {f"{name} {what}": [] for name in releases for what in IMPORTS if what != "torch" or name == "this"}
    for round_ in range(args.rounds):
        order = list(releases) if round_ % 2 == 0 else list(reversed(releases))
        for name in order:
            runs[name].append(probe_run(releases[name], launch_args, args.timeout))
            print(f"round {round_ + 1} {name}: {describe_run(runs[name][-1])}", flush=True)
        for key in imports:
            name, what = key.split(" ", 1)
            imports[key].append(import_seconds(releases[name], what))
    meta["load_1min_at_end"] = os.getloadavg()[0]
    report = {"meta": meta, "runs": runs, "phases": table(runs), "imports": {k: summary(v) for k, v in imports.items()}}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1))
    out.with_suffix(".md").write_text(markdown(report))
    print(markdown(report))


def warmed_releases(module: str, args, argv, run_one, default_out: str) -> tuple:
    """(both releases' checkouts, launch.py's arguments, the JSON path, the run's description), after
    one untimed `run_one(root, launch_args, timeout)` of each release (none with --no-warmup)."""
    releases = {"this": REPO, "previous": previous_checkout(args.previous)}
    launch_args = args.args.split()
    out = Path(args.out) if args.out else REPO / "benchmarks" / "results" / default_out
    meta = release_meta(module, args, argv)
    print(f"warming up (one untimed run each); load {meta['load_1min_at_start']:.1f}", flush=True)
    for root in releases.values() if args.warmup else ():
        run_one(root, launch_args, args.timeout)
    return releases, launch_args, out, meta


def release_meta(module: str, args, argv) -> dict:
    """The run's description: its command, the two releases, the interpreter, the machine and its load."""
    return {"command": f"python -m {module} " + " ".join(argv if argv is not None else sys.argv[1:]),
            "run": "python launch.py " + args.args, "previous": args.previous, "this": git_head(),
            "python": sys.executable, "cpu": platform.processor() or platform.machine(),
            "cpu_count": os.cpu_count(), "load_1min_at_start": os.getloadavg()[0], "rounds": args.rounds,
            # what both releases' OpenMP threads start with (this release sets OMP_WAIT_POLICY itself, when unset)
            "openmp_env": {k: os.environ.get(k) for k in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_NUM_THREADS")}}


def table(runs: dict) -> dict:
    """Per release, each phase's median and range over the runs that reached their first step."""
    result = {}
    for name, done in runs.items():
        good = [phases(r["ends"]) for r in done if "ends" in r]
        result[name] = {phase: summary([g[phase] for g in good]) for phase in good[0]} if good else {}
        result[name]["failed_runs"] = len(done) - len(good)
    this, previous = result.get("this", {}), result.get("previous", {})
    if "total" in this and "total" in previous:  # the ratio of the medians, and the median of the rounds' ratios
        pairs = [(a["ends"]["first batch"], b["ends"]["first batch"]) for a, b in zip(runs["this"], runs["previous"])
                 if "ends" in a and "ends" in b]
        result["ratio_total"] = {"of_medians": this["total"]["median"] / previous["total"]["median"],
                                 "median_of_rounds": statistics.median(a / b for a, b in pairs)}
    return result


def describe_run(run: dict) -> str:
    if "ends" not in run:
        return f"FAILED (exit {run['returncode']}): {' / '.join(run['error'])}"
    return ", ".join(f"{k} {v:.2f}" for k, v in phases(run["ends"]).items()) + f" (load {run['load_1min']:.1f})"


def markdown(report: dict) -> str:
    meta, table_ = report["meta"], report["phases"]
    loads = [r["load_1min"] for runs in report["runs"].values() for r in runs]
    lines = [f"# Start-up: `{meta['run'].strip()}` to its first training step", "",
             f"`{meta['command'].strip()}`", "",
             f"This release {meta['this']} beside the previous one ({meta['previous']}), both run by {meta['python']} "
             f"on {meta['cpu_count']} CPU cores; {meta['rounds']} interleaved rounds after one untimed run each; "
             f"median (range) in seconds. 1-minute load: {meta['load_1min_at_start']:.1f} at the start, "
             f"{meta['load_1min_at_end']:.1f} at the end, {min(loads):.1f}-{max(loads):.1f} at the runs' starts "
             "(the machine is shared: the figures are slower than an idle machine's). Phases on the critical path: "
             "import = the command to the run's first line (interpreter, imports, config checks); graph = to the "
             "run having its graph; stage start = to the pipeline's stages started (model built, cache filled); "
             "first batch = to the first training step done.", "",
             "| release | import | graph | stage start | first batch | total | failed runs |",
             "|---|---|---|---|---|---|---|"]
    for name in ("this", "previous"):
        row = table_.get(name, {})
        cells = [fmt(row[p]) if p in row else "-" for p in ("import", "graph", "stage start", "first batch", "total")]
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {row.get('failed_runs', '-')} |")
    if "ratio_total" in table_:
        ratio = table_["ratio_total"]
        lines += ["", f"Total, this over previous: {ratio['of_medians']:.2f}x (ratio of the medians), "
                  f"{ratio['median_of_rounds']:.2f}x (median of the rounds' ratios)."]
    lines += ["", "Imports alone, each in a fresh interpreter (seconds, median (range)):", "",
              "| import | seconds |", "|---|---|"]
    lines += [f"| {key} | {fmt(value)} |" for key, value in report["imports"].items()]
    return "\n".join(lines) + "\n"


def fmt(s: dict) -> str:
    return f"{s['median']:.2f} ({s['range'][0]:.2f}-{s['range'][1]:.2f})"


def git_head() -> str:
    out = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return out.stdout.strip()


if __name__ == "__main__":
    main()
