"""Where the default run's wall time goes (`python launch.py`, README's first command): start-up
and exit, training, evaluation, beside the previous release, in one run.

    python -m benchmarks.eval_share --previous dfab88d --rounds 3

Each round runs both releases' `python launch.py ARGS` to its end once (the order alternating round
by round, so a change in the machine's load touches both), in a `git worktree` of --previous in
/tmp for the previous one (benchmarks/startup.py's), by the same interpreter. Per run: wall = the
command to its exit; training = the epochs' `epoch_time_s`; evaluation = the evaluations'
`eval_time_s` (metrics.json); start-up and exit = the rest (imports, graph, stages, checkpoints,
shutdown). The figures (every epoch's loss, validation and test accuracy) are compared between the
releases too: the same seed must give the same. After one untimed run of each release (the graph
generated and cached, files warm), unless --no-warmup. Writes JSON and a Markdown table (default
benchmarks/results/eval_share_cpu.json, .md, rewritten after each round), each run with the 1-minute
load at its start.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.startup import comparison_args, summary, warmed_releases

REPO = Path(__file__).resolve().parent.parent
PARTS = ("start-up and exit", "training", "evaluation")
FIGURES = ("loss", "val_acc", "test_acc")


def parse_args(argv=None):
    return comparison_args(__doc__, "dfab88d", 3, 900, "to its end", argv)


def timed_run(root: Path, args: list, timeout: float) -> dict:
    """One `python launch.py ARGS` in `root` to its end: its wall time split into PARTS, its figures."""
    with tempfile.TemporaryDirectory() as work:
        load = os.getloadavg()[0]
        start = time.monotonic()
        proc = subprocess.run([sys.executable, "launch.py", *args, f"run.out_dir={work}/run"], cwd=root,
                              capture_output=True, text=True, timeout=timeout)
        wall = time.monotonic() - start
        metrics = Path(work) / "run" / "metrics.json"
        if proc.returncode or not metrics.exists():
            return {"load_1min": load, "error": proc.stderr.strip().splitlines()[-3:], "returncode": proc.returncode}
        epochs = json.loads(metrics.read_text())["epochs"]
    training = sum(e["epoch_time_s"] for e in epochs)
    evaluation = sum(e.get("eval_time_s", 0.0) for e in epochs)
    seconds = {"start-up and exit": wall - training - evaluation, "training": training, "evaluation": evaluation,
               "wall": wall}
    return {"load_1min": load, "seconds": seconds, "figures": [[e.get(k) for k in FIGURES] for e in epochs]}


def table(runs: dict) -> dict:
    """Per release, each part's median seconds and median share of the wall over the runs that ended."""
    result = {}
    for name, done in runs.items():
        good = [r["seconds"] for r in done if "seconds" in r]
        row = {part: summary([g[part] for g in good]) for part in (*PARTS, "wall")} if good else {}
        row.update({f"{part} share": summary([g[part] / g["wall"] for g in good]) for part in PARTS} if good else {})
        row["failed_runs"] = len(done) - len(good)
        result[name] = row
    pairs = [(a["seconds"]["evaluation"], b["seconds"]["evaluation"]) for a, b in zip(runs["this"], runs["previous"])
             if "seconds" in a and "seconds" in b]
    if pairs:
        result["evaluation_ratio_median_of_rounds"] = statistics.median(a / b for a, b in pairs)
    figures = [r["figures"] for done in runs.values() for r in done if "figures" in r]
    result["same_figures"] = all(f == figures[0] for f in figures)
    return result


def main(argv=None) -> None:
    args = parse_args(argv)
    releases, launch_args, out, meta = warmed_releases("benchmarks.eval_share", args, argv, timed_run,
                                                       "eval_share_cpu.json")
    runs = {name: [] for name in releases}
    for round_ in range(args.rounds):
        for name in (list(releases) if round_ % 2 == 0 else list(reversed(releases))):
            runs[name].append(timed_run(releases[name], launch_args, args.timeout))
            print(f"round {round_ + 1} {name}: {describe(runs[name][-1])}", flush=True)
        meta["load_1min_at_end"], meta["rounds_done"] = os.getloadavg()[0], round_ + 1
        report = {"meta": meta, "runs": runs, "parts": table(runs)}
        out.parent.mkdir(parents=True, exist_ok=True)  # after each round: a run cut short keeps what it did
        out.write_text(json.dumps(report, indent=1))
        out.with_suffix(".md").write_text(markdown(report))
    print(markdown(report))


def describe(run: dict) -> str:
    if "seconds" not in run:
        return f"FAILED (exit {run['returncode']}): {' / '.join(run['error'])}"
    s = run["seconds"]
    return (", ".join(f"{k} {v:.1f}s" for k, v in s.items()) + f"; evaluation {s['evaluation'] / s['wall']:.0%} "
            f"(load {run['load_1min']:.1f})")


def markdown(report: dict) -> str:
    meta, parts = report["meta"], report["parts"]
    loads = [r["load_1min"] for done in report["runs"].values() for r in done]
    lines = [f"# Where `{meta['run'].strip()}`'s wall time goes", "", f"`{meta['command'].strip()}`", "",
             f"This release {meta['this']} beside the previous one ({meta['previous']}), both run by "
             f"{meta['python']} on {meta['cpu_count']} CPU cores; {meta['rounds_done']} interleaved rounds; median "
             f"(range) in seconds, and each part's median share of the wall. 1-minute load: "
             f"{meta['load_1min_at_start']:.1f} at the start, {meta['load_1min_at_end']:.1f} at the end, "
             f"{min(loads):.1f}-{max(loads):.1f} at the runs' starts (the machine is shared). Training and "
             "evaluation are the run's own epoch_time_s and eval_time_s (metrics.json); start-up and exit the rest.",
             "", "| release | wall | start-up and exit | training | evaluation | evaluation share | failed runs |",
             "|---|---|---|---|---|---|---|"]
    for name in ("this", "previous"):
        row = parts.get(name, {})
        cells = [fmt(row[p]) if p in row else "-" for p in ("wall", *PARTS)]
        share = f"{row['evaluation share']['median']:.0%}" if "evaluation share" in row else "-"
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {share} | {row.get('failed_runs', '-')} |")
    if "evaluation_ratio_median_of_rounds" in parts:
        lines += ["", f"Evaluation, this over previous: {parts['evaluation_ratio_median_of_rounds']:.2f}x "
                  "(median of the rounds' ratios)."]
    lines += ["", "Every run's figures (each epoch's loss, validation and test accuracy) the same: "
              f"{'yes' if parts['same_figures'] else 'NO'}."]
    return "\n".join(lines) + "\n"


def fmt(s: dict) -> str:
    return f"{s['median']:.1f} ({s['range'][0]:.1f}-{s['range'][1]:.1f})"


if __name__ == "__main__":
    main()
