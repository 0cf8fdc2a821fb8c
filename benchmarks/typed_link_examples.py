"""PyG's typed link-prediction examples with conveyor's loader, beside PyG's (issue #49, item 6).

    python -m benchmarks.typed_link_examples [--examples bipartite_sage_unsup.py ...] [--rounds 3]
                                             [--loaders pyg conveyor] [--out PATH]

Each example (tests/data/pyg_examples/, as PyG ships them) runs as written, once with PyG's own
`LinkNeighborLoader` and once with `from conveyor import LinkNeighborLoader` in place of PyG's
import line (nothing else changed), on the stand-in data of tests/data/pyg_examples/
synthetic_datasets.py (conveyor's data=synthetic_movielens shaped as PyG's MovieLens and Taobao),
its epoch loop cut by tests/test_ported_examples.py's `range` cut. Rounds interleave the two
loaders (pyg, conveyor, pyg, ...); per run, the example's last printed metric and its epoch
time (the median gap between its consecutive "Epoch:" lines: training and the example's own
evaluation). The table gives per loader the metric's median and range over the rounds, the
median epoch time and its range, and conveyor's epoch time over PyG's (medians). A run that
fails keeps its last line in the JSON (e.g. PyG's temporal sampling, `time_attr`, needs pyg-lib,
which is not installed here; multi_gpu/taobao.py needs CUDA and NCCL).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.seeded_rounds import SEED_PRELUDE, Spread, Verdict, ratio_by_round, round_order

REPO = Path(__file__).resolve().parent.parent
EXAMPLES_DIR = REPO / "tests" / "data" / "pyg_examples"
RUN = SEED_PRELUDE + """
import builtins, json, runpy, sys, torch
cuts = {tuple(k): tuple(v) for k, v in json.loads(sys.argv[2])}
cut_range = lambda *bounds: builtins.range(*cuts.get(bounds, bounds))
seed = json.loads(sys.argv[3])
path, sys.argv = sys.argv[1], sys.argv[1:2]  # the script's own argparse sees no arguments
if seed is not None:  # the round's seed, just before the script (seeded_rounds.py)
    seed_everything(seed)
runpy.run_path(path, init_globals={"range": cut_range}, run_name="__main__")
print(f"torch threads: {torch.get_num_threads()}")
"""
# example -> (its import line, the epoch loop's bounds cut to 3 epochs, the metric: a regex and its name)
EXAMPLES = {
    "bipartite_sage_unsup.py": ("from torch_geometric.loader import LinkNeighborLoader\n", {(1, 21): (1, 4)},
                                r"Epoch: \d+, .*Test: (\d+\.\d+)", "test ROC-AUC"),
    "temporal_link_pred.py": ("from torch_geometric.loader import LinkNeighborLoader\n", {(1, 11): (1, 4)},
                              r"Test RMSE: (\d+\.\d+)", "test RMSE"),
    "recommender_system.py": ("from torch_geometric.loader import LinkNeighborLoader, NeighborLoader\n",
                              {(1, 16): (1, 4)}, r"Test MAP@20: (\d+\.\d+)", "test MAP@20"),
}
CONVEYOR_IMPORT = {  # PyG's import line -> conveyor's
    "from torch_geometric.loader import LinkNeighborLoader\n": "from conveyor import LinkNeighborLoader\n",
    "from torch_geometric.loader import LinkNeighborLoader, NeighborLoader\n":
        "from conveyor import LinkNeighborLoader, NeighborLoader\n"}


def script(name: str, loader: str) -> str:
    """The example as PyG ships it, or with its one loader import line changed to conveyor's."""
    original = (EXAMPLES_DIR / name).read_text()
    line = EXAMPLES[name][0]
    assert original.count(line) == 1, name
    return original if loader == "pyg" else original.replace(line, CONVEYOR_IMPORT[line])


def run_once(name: str, loader: str, tmp: Path, timeout: int, seed: int | None = None) -> dict:
    """One run: its metric, its epoch times (the gaps between its "Epoch:" lines), or its last line.
    `seed`: Python's, numpy's and torch's, set just before the script (None: unseeded, as it is)."""
    inject, folder = tmp / "inject", tmp / f"{loader}_{name[:-3]}"
    inject.mkdir(parents=True, exist_ok=True)
    shutil.copy(EXAMPLES_DIR / "synthetic_datasets.py", inject / "sitecustomize.py")
    folder.mkdir(exist_ok=True)
    (folder / name).write_text(script(name, loader))
    env = {**os.environ, "PYTHONPATH": f"{inject}{os.pathsep}{REPO}", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    cuts = json.dumps([[list(b), list(c)] for b, c in EXAMPLES[name][1].items()])
    start, stamps, lines, load = time.perf_counter(), [], [], os.getloadavg()[0]
    command = [sys.executable, "-c", RUN, str(folder / name), cuts, json.dumps(seed)]
    with subprocess.Popen(command, cwd=folder, env=env, text=True, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT) as process:
        for line in process.stdout:
            lines.append(line.rstrip())
            if line.startswith("Epoch:"):
                stamps.append(time.perf_counter())
            if time.perf_counter() - start > timeout:
                process.kill()
        code = process.wait()
    found = re.findall(EXAMPLES[name][2], "\n".join(lines))
    threads = re.findall(r"^torch threads: (\d+)$", "\n".join(lines), flags=re.M)
    gaps = [b - a for a, b in zip([start, *stamps], stamps)][1:]  # the first includes start-up
    last = [line for line in lines if not line.startswith("torch threads: ")]
    return {"loader": loader, "seed": seed, "ok": code == 0 and bool(found),
            "metric": float(found[-1]) if found else None, "epoch_s": gaps, "wall_s": time.perf_counter() - start,
            "last_line": last[-1] if last else "", "load_before": load, "load": os.getloadavg()[0],
            "torch_threads": int(threads[0]) if threads else None}


def spread(values: list) -> str:
    return "-" if not values else f"{statistics.median(values):.4g} ({min(values):.4g}-{max(values):.4g})"


def metric_cell(runs: list) -> str:
    good = Spread.of([r["metric"] for r in runs if r["ok"]])
    if good is None:
        failed = next((r["last_line"] for r in runs if not r["ok"]), "")
        return f"failed ({len(runs)} of {len(runs)}): {failed[:110]}" if failed else "-"
    failures = sum(not r["ok"] for r in runs)
    return good.text(4) + (f"; {failures} failed" if failures else "")


def why_no_metric(loader: str, runs: list) -> str:
    last = next((r["last_line"] for r in runs if not r["ok"]), "")
    if loader == "pyg" and "pyg-lib" in last:
        return "PyG's loader needs pyg-lib for this (temporal sampling), not installed here"
    return f"{loader}'s loader failed"


def table(report: dict) -> str:
    lines = ["| example | metric | conveyor's loader | PyG's loader | conveyor - PyG | epoch s, conveyor | "
             "epoch s, PyG | epoch time conveyor / PyG | torch threads | load |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name, runs in report["runs"].items():
        by = {loader: [r for r in runs if r["loader"] == loader] for loader in ("conveyor", "pyg")}
        spreads = {k: Spread.of([r["metric"] for r in v if r["ok"]]) for k, v in by.items()}
        verdict = (Verdict.of(spreads["conveyor"], spreads["pyg"]).text(4) if all(spreads.values()) else
                   "- (" + "; ".join(why_no_metric(k, by[k]) for k, v in spreads.items() if v is None) + ")")
        epoch = {k: {r.get("seed"): statistics.median(r["epoch_s"]) if r["ok"] and r["epoch_s"] else None for r in v}
                 for k, v in by.items()}
        times = [spread([t for t in epoch[k].values() if t]) for k in by]
        threads = sorted({str(r.get("torch_threads")) for r in runs if r.get("torch_threads")})
        loads = [r.get("load_before", r["load"]) for r in runs]
        lines.append(f"| {name} | {EXAMPLES[name][3]} | {metric_cell(by['conveyor'])} | {metric_cell(by['pyg'])} | "
                     f"{verdict} | {times[0]} | {times[1]} | {ratio_by_round(epoch['conveyor'], epoch['pyg'])} | "
                     f"{', '.join(threads) or '-'} | {min(loads):.1f}-{max(loads):.1f} |")
    return "\n".join(lines) + "\n"


def heading(report: dict) -> str:
    setup = report["setup"]
    return (f"# PyG's typed link examples, conveyor's loader beside PyG's\n\n`{setup['command']}`\n\n"
            f"benchmarks/typed_link_examples.py: {setup['rounds']} interleaved rounds (the loaders' order "
            f"alternating), round k seeding Python's `random`, numpy and torch with k just before the unedited "
            f"script (benchmarks/seeded_rounds.py), the same for both loaders; 3 epochs each (n in each cell: its "
            f"rounds). Metric: mean ± sd "
            f"(range; n) over the rounds; verdict: conveyor's mean minus PyG's, 'within noise' when |diff| <= "
            f"2·sqrt(sd_c²/n_c + sd_p²/n_p) (the bound given). Epoch s: median (range) over the rounds of a run's "
            f"median gap between its 'Epoch:' lines (training and the script's own evaluation); ratio: conveyor / "
            f"PyG round by round, median (range). Workers: each script's own num_workers=16 (bipartite_sage_unsup; "
            f"4 elsewhere); PyG's loader starts that many worker processes a loader each epoch (not persistent), "
            f"conveyor's runs its two stage processes. Load: 1-minute load before each row's runs; at the last "
            f"run {setup['load']}. PyG's loader without pyg-lib (not installed here) cannot sample in time "
            f"(`time_attr`): those rows run on conveyor's only.\n\n")


def merge(paths: list, out: Path) -> None:
    """One table of several runs' reports: a later report's example replaces an earlier's."""
    reports = [json.loads(Path(path).read_text()) for path in paths]
    runs = {name: found for report in reports for name, found in report["runs"].items()}
    setup = {**reports[-1]["setup"], "command": " ; ".join(r["setup"]["command"] for r in reports),
             "rounds": "/".join(str(r["setup"]["rounds"]) for r in reports)}
    report = {"runs": {name: runs[name] for name in EXAMPLES if name in runs}, "setup": setup}
    out.write_text(json.dumps(report, indent=1))
    out.with_suffix(".md").write_text(heading(report) + table(report))
    print(table(report))


def main() -> None:
    args = parse_args()
    if args.merge:
        return merge(args.merge, args.out)
    command = "python -m benchmarks.typed_link_examples " + " ".join(sys.argv[1:])
    report = {"runs": {}, "setup": {"rounds": args.rounds, "python": sys.version.split()[0], "command": command,
                                    "load": " / ".join(f"{x:.1f}" for x in os.getloadavg())}}
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.examples:
            for round_ in range(args.rounds):
                seed = args.first_seed + round_
                for loader in round_order(args.loaders, seed):
                    result = run_once(name, loader, Path(tmp) / f"r{round_}", args.timeout, seed=seed)
                    report["runs"].setdefault(name, []).append({"round": round_, **result})
                    print(name, loader, seed, {k: v for k, v in result.items() if k != "epoch_s"}, flush=True)
                    report["setup"]["load"] = " / ".join(f"{x:.1f}" for x in os.getloadavg())
                    args.out.parent.mkdir(parents=True, exist_ok=True)
                    args.out.write_text(json.dumps(report, indent=1))
                    args.out.with_suffix(".md").write_text(heading(report) + table(report))
    print(table(report))


def example_names(text: str) -> list:
    """'bipartite_sage_unsup,temporal_link_pred' (or with .py): the examples, in that order."""
    names = [n if n.endswith(".py") else n + ".py" for n in text.split(",") if n]
    unknown = [n for n in names if n not in EXAMPLES]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown example(s) {unknown}: choose among {', '.join(EXAMPLES)}")
    return names


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", type=example_names, default=list(EXAMPLES),
                        help="comma-separated, run in this order (default: all): " + ", ".join(EXAMPLES))
    parser.add_argument("--loaders", nargs="+", default=["conveyor", "pyg"], choices=["pyg", "conveyor"])
    parser.add_argument("--rounds", type=int, default=5, help="seeded rounds: round k seeds with first-seed + k")
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--timeout", type=int, default=900, help="seconds a run may take")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "typed_link_examples.json")
    parser.add_argument("--merge", nargs="+", type=Path, default=None, metavar="JSON",
                        help="write one table of these reports instead (a later report's example replaces)")
    return parser.parse_args()


if __name__ == "__main__":
    main()
