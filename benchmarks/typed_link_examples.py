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

REPO = Path(__file__).resolve().parent.parent
EXAMPLES_DIR = REPO / "tests" / "data" / "pyg_examples"
RUN = """
import builtins, json, runpy, sys
cuts = {tuple(k): tuple(v) for k, v in json.loads(sys.argv[2])}
cut_range = lambda *bounds: builtins.range(*cuts.get(bounds, bounds))
path, sys.argv = sys.argv[1], sys.argv[1:2]  # the script's own argparse sees no arguments
runpy.run_path(path, init_globals={"range": cut_range}, run_name="__main__")
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


def run_once(name: str, loader: str, tmp: Path, timeout: int) -> dict:
    """One run: its metric, its epoch times (the gaps between its "Epoch:" lines), or its last line."""
    inject, folder = tmp / "inject", tmp / f"{loader}_{name[:-3]}"
    inject.mkdir(parents=True, exist_ok=True)
    shutil.copy(EXAMPLES_DIR / "synthetic_datasets.py", inject / "sitecustomize.py")
    folder.mkdir(exist_ok=True)
    (folder / name).write_text(script(name, loader))
    env = {**os.environ, "PYTHONPATH": f"{inject}{os.pathsep}{REPO}", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    cuts = json.dumps([[list(b), list(c)] for b, c in EXAMPLES[name][1].items()])
    start, stamps, lines = time.perf_counter(), [], []
    with subprocess.Popen([sys.executable, "-c", RUN, str(folder / name), cuts], cwd=folder, env=env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT) as process:
        for line in process.stdout:
            lines.append(line.rstrip())
            if line.startswith("Epoch:"):
                stamps.append(time.perf_counter())
            if time.perf_counter() - start > timeout:
                process.kill()
        code = process.wait()
    found = re.findall(EXAMPLES[name][2], "\n".join(lines))
    gaps = [b - a for a, b in zip([start, *stamps], stamps)][1:]  # the first includes start-up
    return {"loader": loader, "ok": code == 0 and bool(found), "metric": float(found[-1]) if found else None,
            "epoch_s": gaps, "wall_s": time.perf_counter() - start, "last_line": lines[-1] if lines else "",
            "load": os.getloadavg()[0]}


def spread(values: list) -> str:
    return "-" if not values else f"{statistics.median(values):.4g} ({min(values):.4g}-{max(values):.4g})"


def table(report: dict) -> str:
    lines = ["| example | metric | PyG's loader | conveyor's loader | epoch s, PyG | epoch s, conveyor | "
             "conveyor / PyG epoch time |", "|---|---|---|---|---|---|---|"]
    for name, runs in report["runs"].items():
        by = {loader: [r for r in runs if r["loader"] == loader and r["ok"]] for loader in ("pyg", "conveyor")}
        epoch = {k: [statistics.median(r["epoch_s"]) for r in v if r["epoch_s"]] for k, v in by.items()}
        ratio = (f"{statistics.median(epoch['conveyor']) / statistics.median(epoch['pyg']):.2f}x"
                 if epoch["pyg"] and epoch["conveyor"] else "-")
        failed = {k: next((r["last_line"] for r in runs if r["loader"] == k and not r["ok"]), "") for k in by}
        cells = [spread([r["metric"] for r in by[k]]) if by[k] else f"failed: {failed[k][:90]}" if failed[k] else "-"
                 for k in by]
        lines.append(f"| {name} | {EXAMPLES[name][3]} | {cells[0]} | {cells[1]} | {spread(epoch['pyg'])} | "
                     f"{spread(epoch['conveyor'])} | {ratio} |")
    return "\n".join(lines) + "\n"


def heading(report: dict) -> str:
    setup = report["setup"]
    return (f"PyG's typed link examples, PyG's loader beside conveyor's (benchmarks/typed_link_examples.py; "
            f"{setup['rounds']} interleaved rounds, median (range); load {setup['load']} at the last run)\n\n")


def main() -> None:
    args = parse_args()
    report = {"runs": {}, "setup": {"rounds": args.rounds, "python": sys.version.split()[0]}}
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.examples:
            for round_ in range(args.rounds):
                for loader in args.loaders:
                    result = run_once(name, loader, Path(tmp) / f"r{round_}", args.timeout)
                    report["runs"].setdefault(name, []).append({"round": round_, **result})
                    print(name, loader, round_, {k: v for k, v in result.items() if k != "epoch_s"}, flush=True)
                    report["setup"]["load"] = " / ".join(f"{x:.1f}" for x in os.getloadavg())
                    args.out.parent.mkdir(parents=True, exist_ok=True)
                    args.out.write_text(json.dumps(report, indent=1))
                    args.out.with_suffix(".md").write_text(heading(report) + table(report))
    print(table(report))


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", nargs="+", default=list(EXAMPLES), choices=list(EXAMPLES))
    parser.add_argument("--loaders", nargs="+", default=["pyg", "conveyor"], choices=["pyg", "conveyor"])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--timeout", type=int, default=900, help="seconds a run may take")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "typed_link_examples.json")
    return parser.parse_args()


if __name__ == "__main__":
    main()
