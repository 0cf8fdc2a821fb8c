"""First contact (issue 51, item 5): what a new user waits for, from a fresh clone to the end of the
README's first command, beside the previous release.

    python -m benchmarks.first_contact --previous eb2fd52 --rounds 2

Each round clones both releases afresh into /tmp (`git clone --no-checkout` of this repository,
then the release's commit detached: what `git clone` of the project gives, nothing untracked) and,
for each (the order alternating round by round, so a change in the machine's load touches both):

- setup: the README's set-up, `bash scripts/setup.sh` (a new .venv; torch and every dependency
  from the local wheel folder and package index pip is configured with, i.e. a warm cache: no
  build, no download);
- run: the README's first command, `.venv/bin/python launch.py` (plus `run.out_dir`, so that its
  metrics.json is found; `--args` adds more), with an empty data root of its own
  (`CONVEYOR_DATA_ROOT`), so it generates the synthetic graph as a first run does. The run's wall
  time (the command to its exit) is split by its own metrics.json: training = the sum of the
  epochs' `epoch_time_s`, evaluation = the sum of their `eval_time_s`, start-up and exit = the
  rest (interpreter, imports, the graph's generation, stage start, checkpoints, shutdown), of
  which `before the run's clock` is the part before the trainer's own timer started.

Each figure is the median of the rounds with the range; every step records the 1-minute load
average at its start (the machine may be shared). Writes JSON and a Markdown table (default
benchmarks/results/first_contact_cpu.json, .md). The clones are deleted after their round.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.startup import fmt, summary

REPO = Path(__file__).resolve().parent.parent
PARTS = ("setup", "startup_and_exit", "training", "evaluation", "run", "total")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--previous", default="eb2fd52", help="the previous release's commit")
    p.add_argument("--this", default="HEAD", help="this release's commit (committed work only)")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--args", default="", help="launch.py's arguments, space-separated (default: none, the "
                   "README's first command)")
    p.add_argument("--timeout", type=float, default=1800, help="seconds a setup or a run may take")
    p.add_argument("--out", default=None, help="JSON path")
    return p.parse_args(argv)


def commit_of(ref: str) -> str:
    return subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", ref], capture_output=True, text=True,
                          check=True).stdout.strip()


def timed(command: list, cwd: Path, timeout: float, env: dict | None = None) -> dict:
    """Run `command`; its seconds, exit status, the load at its start and the end of its stderr."""
    load = os.getloadavg()[0]
    start = time.monotonic()
    try:
        proc = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
        code, err = proc.returncode, proc.stderr
    except subprocess.TimeoutExpired as e:
        code, err = "timeout", (e.stderr or b"").decode(errors="replace") if isinstance(e.stderr, bytes) else ""
    return {"seconds": time.monotonic() - start, "returncode": code, "load_1min": load,
            "stderr_tail": (err or "").strip().splitlines()[-3:]}


def fresh_clone(commit: str, where: Path) -> dict:
    start = time.monotonic()
    subprocess.run(["git", "clone", "--quiet", "--no-checkout", str(REPO), str(where)], check=True)
    subprocess.run(["git", "-C", str(where), "checkout", "--quiet", "--detach", commit], check=True)
    return {"seconds": time.monotonic() - start}


def split_run(run: dict, metrics_file: Path) -> dict:
    """The run's wall time split by its metrics.json into training, evaluation and the rest."""
    if run["returncode"] != 0 or not metrics_file.exists():
        return run
    metrics = json.loads(metrics_file.read_text())
    epochs = metrics["epochs"]
    training = sum(e["epoch_time_s"] for e in epochs)
    evaluation = sum(e.get("eval_time_s", 0.0) for e in epochs)
    return {**run, "epochs": len(epochs), "training": training, "evaluation": evaluation,
            "startup_and_exit": run["seconds"] - training - evaluation,
            "before_run_clock": run["seconds"] - metrics["final"]["wall_time_s"],
            "test_acc": metrics["final"].get("test_acc"), "best_val_acc": metrics["final"].get("best_val_acc")}


def first_contact(commit: str, work: Path, launch_args: list, timeout: float) -> dict:
    """Clone, set up and run one release in `work`; every part's seconds."""
    clone = work / "conveyor"
    record = {"commit": commit, "clone": fresh_clone(commit, clone)}
    record["setup"] = timed(["bash", "scripts/setup.sh"], clone, timeout)
    if record["setup"]["returncode"] != 0:
        return record
    env = dict(os.environ, CONVEYOR_DATA_ROOT=str(work / "data"))
    env.pop("PYTHONPATH", None)
    out_dir = work / "run"
    run = timed([str(clone / ".venv" / "bin" / "python"), "launch.py", *launch_args, f"run.out_dir={out_dir}"],
                clone, timeout, env)
    record["run"] = split_run(run, out_dir / "metrics.json")
    return record


def parts(record: dict) -> dict:
    """A round's seconds per part (only those it reached)."""
    out = {"setup": record["setup"]["seconds"]} if record["setup"]["returncode"] == 0 else {}
    run = record.get("run", {})
    if "training" in run:
        out.update({k: run[k] for k in ("startup_and_exit", "before_run_clock", "training", "evaluation")})
        out["run"] = run["seconds"]
        out["total"] = out["setup"] + run["seconds"]
    return out


def table(records: dict) -> dict:
    result = {}
    for name, rounds in records.items():
        good = [parts(r) for r in rounds if "training" in r.get("run", {})]
        keys = good[0].keys() if good else ()
        result[name] = {k: summary([g[k] for g in good]) for k in keys}
        result[name]["failed_rounds"] = len(rounds) - len(good)
    if result.get("this", {}).get("total") and result.get("previous", {}).get("total"):
        result["ratio"] = {k: result["this"][k]["median"] / result["previous"][k]["median"]
                           for k in PARTS if k in result["this"] and k in result["previous"]}
        pairs = [(parts(a), parts(b)) for a, b in zip(records["this"], records["previous"])]
        result["round_ratios"] = {k: [a[k] / b[k] for a, b in pairs if k in a and k in b] for k in PARTS}
    return result


def markdown(report: dict) -> str:
    meta, tab = report["meta"], report["table"]
    loads = [part["load_1min"] for rounds in report["records"].values() for r in rounds
             for part in (r["setup"], r.get("run", {})) if "load_1min" in part]
    lines = [f"# First contact: a fresh clone's `bash scripts/setup.sh`, then `.venv/bin/python launch.py"
             f"{' ' + meta['args'] if meta['args'] else ''}`", "",
             f"`{meta['command']}`", "",
             f"This release {meta['this']} beside the previous one ({meta['previous']}); {meta['rounds']} interleaved "
             f"rounds, each a fresh clone and venv of each; median (range) in seconds. Machine: {meta['cpu_count']} "
             f"CPU cores ({meta['cpu']}), shared; 1-minute load {meta['load_1min_at_start']:.1f} at the start, "
             f"{meta['load_1min_at_end']:.1f} at the end, {min(loads):.1f}-{max(loads):.1f} at the steps' starts; "
             f"`uptime` at the end: {meta['uptime_at_end']}. The run's split comes from its metrics.json: "
             "training = its epochs' `epoch_time_s`, evaluation = their `eval_time_s`, start-up and exit = the rest "
             "of the run's wall time (imports, the synthetic graph's generation in an empty data root, stage "
             "start, checkpoints, shutdown); `before run clock` is the part of it before the trainer's timer.", "",
             "| release | setup | run: start-up and exit | (before run clock) | training | evaluation | run | "
             "setup + run | failed rounds |", "|---|---|---|---|---|---|---|---|---|"]
    order = ("setup", "startup_and_exit", "before_run_clock", "training", "evaluation", "run", "total")
    for name in ("this", "previous"):
        row = tab.get(name, {})
        cells = [fmt(row[k]) if k in row else "-" for k in order]
        lines.append(f"| {name} ({meta[name]}) | " + " | ".join(cells) + f" | {row.get('failed_rounds', '-')} |")
    if "ratio" in tab:
        lines += ["", "This over previous (ratio of the medians): " + ", ".join(
            f"{k.replace('_', ' ')} {v:.2f}x" for k, v in tab["ratio"].items()) + ". Each round's own ratio "
            "(the two releases one after the other, at nearly the same load): " + "; ".join(
            f"{k.replace('_', ' ')} " + ", ".join(f"{r:.2f}x" for r in v)
            for k, v in tab["round_ratios"].items()) + "."]
    shares = {name: tab[name] for name in ("this", "previous") if "run" in tab.get(name, {})}
    for name, row in shares.items():
        run = row["run"]["median"]
        lines.append(f"- {name}: of the run's median wall time, start-up and exit "
                     f"{row['startup_and_exit']['median'] / run:.0%}, training {row['training']['median'] / run:.0%}, "
                     f"evaluation {row['evaluation']['median'] / run:.0%} (each part's own median over the run's).")
    for name, rounds in report["records"].items():
        for i, r in enumerate(rounds):
            failed = [(k, r[k]) for k in ("setup", "run") if k in r and r[k]["returncode"] != 0]
            lines += [f"- {name} round {i + 1}: {k} failed (exit {v['returncode']}): {' / '.join(v['stderr_tail'])}"
                      for k, v in failed]
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    args = parse_args(argv)
    commits = {"this": commit_of(args.this), "previous": commit_of(args.previous)}
    out = Path(args.out) if args.out else REPO / "benchmarks" / "results" / "first_contact_cpu.json"
    meta = {"command": "python -m benchmarks.first_contact " + " ".join(argv if argv is not None else sys.argv[1:]),
            "args": args.args, **commits, "rounds": args.rounds, "cpu": platform.processor() or platform.machine(),
            "cpu_count": os.cpu_count(), "load_1min_at_start": os.getloadavg()[0]}
    records = {name: [] for name in commits}
    for round_ in range(args.rounds):
        for name in list(commits) if round_ % 2 == 0 else list(reversed(commits)):
            work = Path(tempfile.mkdtemp(prefix=f"conveyor-first-contact-{name}-"))
            try:
                records[name].append(first_contact(commits[name], work, args.args.split(), args.timeout))
            finally:
                shutil.rmtree(work, ignore_errors=True)
            record = records[name][-1]
            print(f"round {round_ + 1} {name}: {json.dumps(parts(record))} "
                  f"(setup load {record['setup']['load_1min']:.1f})", flush=True)
    meta["load_1min_at_end"] = os.getloadavg()[0]
    meta["uptime_at_end"] = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    report = {"meta": meta, "records": records, "table": table(records)}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1))
    out.with_suffix(".md").write_text(markdown(report))
    print(markdown(report))


if __name__ == "__main__":
    main()
