"""PyG's own examples that build a loader, run with one import changed (`from torch_geometric.loader
import X` -> `from conveyor import X`), beside the same scripts on PyG's loader, on the same
offline stand-in data (issue 48, item 5).

The scripts are PyG's, verbatim (tests/data/pyg_examples/, ORIGIN.md there). What they would
download is replaced in every process of a run by a small synthetic dataset of the same shape
(tests/data/pyg_examples/synthetic_datasets.py, put on PYTHONPATH as sitecustomize.py);
graph_sage_unsup.py reads the real Cora from the project's Planetoid files (.cache/data). A run
is shortened only from outside the script: its epoch loop's `range` is cut by its bounds (every
other `range` is the builtin's), and ogbn_train.py takes its own `--epochs`.

Each run records, from outside the script, the time of every complete pass over each of its
loaders (the first loader iterated is the training loader: its passes are the epochs), each
loader's class, `num_workers` and pipeline, the torch threads, the metric the script prints (or,
for hierarchical_sampling.py, which prints none, the trained model's full-graph test accuracy),
and the wall time.

    python -m benchmarks.pyg_examples --rounds 2

Runs every example under each loader, one at a time, in `--rounds` interleaved rounds (the
loaders' order alternating); the table gives median and range over the rounds, the epoch time
ratio (conveyor over PyG, of the medians) and the load; JSON beside it (default
benchmarks/results/pyg_examples_cpu.json, .md). A run that fails is a row with its last error line.
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
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.seeded_rounds import SEED_PRELUDE, Spread, Verdict, ratio_by_round, round_order

REPO = Path(__file__).resolve().parents[1]
EXAMPLES_DIR = REPO / "tests" / "data" / "pyg_examples"
CORA_RAW = REPO / ".cache" / "data" / "Cora" / "raw"
LOADERS = ("conveyor", "pyg")
PYG_IMPORT = "from torch_geometric.loader import "
CONVEYOR_IMPORT = "from conveyor import "

# The runner, in the examples' own interpreter: for each job (a script, its arguments, its loop
# cut), times every pass of every loader of the chosen family, runs the script as __main__ in its
# folder, then writes what it saw as JSON (a failing script's last error line, and on to the next).
RUNNER = r"""
import builtins, gc, importlib.abc, importlib.util, json, os, runpy, sys, time, traceback, torch
plan = json.loads(sys.argv[1])
current = {}

class ScriptAgain(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    # PyG's Sequential imports the running script by its file name (`from to_hetero_mag import *`
    # in its generated module), which runs the whole script again, as under a plain
    # `python to_hetero_mag.py`: here with the same cut.
    def find_spec(self, name, path=None, target=None):
        if name != current.get("stem"):
            return None
        return importlib.util.spec_from_file_location(name, current["script"], loader=self)
    def create_module(self, spec):
        return None
    def exec_module(self, module):
        module.__dict__["range"] = current["range"]
        exec(compile(open(current["script"]).read(), current["script"], "exec"), module.__dict__)

sys.meta_path.insert(0, ScriptAgain())
if plan["family"] == "conveyor":
    from conveyor import LinkNeighborLoader, NeighborLoader
else:
    from torch_geometric.loader import LinkNeighborLoader, NeighborLoader
loaders, passes = {}, []

def timed(iterate):
    def __iter__(self):
        if id(self) not in loaders:
            loaders[id(self)] = {"index": len(loaders), "class": type(self).__module__ + "." + type(self).__name__,
                                 "num_workers": getattr(self, "num_workers", None),
                                 "pipeline": getattr(getattr(self, "options", None), "pipeline", None)}
        start, batches = time.perf_counter(), 0
        for batch in iterate(self):
            batches += 1
            yield batch
        passes.append({"loader": loaders[id(self)]["index"], "seconds": time.perf_counter() - start,
                       "batches": batches})
    return __iter__

def probe_full_graph(found):  # the trained model over the whole graph, after the script
    model, data = found["model"], found["data"]
    model.eval()
    with torch.no_grad():
        pred = model(data.x, data.edge_index).argmax(-1)
    return float((pred[data.test_mask] == data.y[data.test_mask]).float().mean())

for cls in (NeighborLoader, LinkNeighborLoader):
    cls.__iter__ = timed(cls.__iter__)
records = []
for i, job in enumerate(plan["jobs"]):
    print(f"=== job {i}", flush=True)  # where this job's output begins
    loaders.clear(), passes.clear()
    cuts = {tuple(k): tuple(v) for k, v in job["cuts"]}
    cut_range = lambda *bounds, cuts=cuts: builtins.range(*cuts.get(bounds, bounds))
    current.update(stem=os.path.basename(job["script"])[:-3], script=job["script"], range=cut_range)
    sys.modules.pop(current["stem"], None)
    record = {"torch_threads": torch.get_num_threads(), "error": None}
    os.chdir(os.path.dirname(job["script"]))
    sys.argv = [job["script"], *job["argv"]]
    start = time.perf_counter()
    try:
        if job["seed"] is not None:  # the round's seed, just before the script (seeded_rounds.py)
            seed_everything(job["seed"])
        found = runpy.run_path(job["script"], init_globals={"range": cut_range}, run_name="__main__")
        if job["probe"]:
            record["probe"] = probe_full_graph(found)
        del found
    except BaseException as e:
        record["error"] = traceback.format_exception_only(type(e), e)[-1].strip()
    record.update(seconds=time.perf_counter() - start, passes=list(passes),
                  loaders=sorted(loaders.values(), key=lambda d: d["index"]))
    records.append(record)
    gc.collect()
open(plan["out"], "w").write(json.dumps(records))
sys.exit(1 if any(r["error"] for r in records) else 0)
"""


@dataclass(frozen=True)
class Example:
    path: str  # under tests/data/pyg_examples
    metric: str  # what the figure is
    pattern: str = ""  # the script's printed metric (the last match), a fraction or a percentage
    argv: tuple = ()
    loop: tuple = ()  # the epoch loop's range bounds, cut by `cut_loop`
    epochs: int = 0  # the benchmark's epochs (the loop cut, or --epochs)
    probe: str = ""
    cuts: dict = field(default_factory=dict)  # other loops' cuts, always applied


EXAMPLES = {
    "reddit": Example("reddit.py", "test acc", r"Epoch: \d+, Train: .*Test: (\d\.\d+)", loop=(1, 11), epochs=3),
    "ogbn_train --model sage": Example("ogbn_train.py", "test acc", r"Test Accuracy: (\d+\.\d+)%",
                                       argv=("--model", "sage"), epochs=3),
    # Its default, 3 hops of 10 per seed apart (disjoint): a 1024-seed batch holds ~1.1M nodes (the
    # machine's 24 GiB ran out); the script's own flags make it 2 hops of 5 (~31K nodes a batch).
    "ogbn_train (sgformer disjoint)": Example("ogbn_train.py", "test acc", r"Test Accuracy: (\d+\.\d+)%",
                                               argv=("--num_layers", "2", "--fan_out", "5"), epochs=3),
    "hierarchical_sampling": Example("hierarchical_sampling.py", "full-graph test acc (harness)",
                                     probe="full_graph_test_acc"),
    # 1 epoch: 8 batches of 256 with [10, 10, 25] neighbours each, ~100 s an epoch at load 10 on 2 cores.
    "infomax_inductive": Example("infomax_inductive.py", "test acc", r"Test Accuracy: (\d\.\d+)", loop=(1, 31),
                                 epochs=1),
    # 1 epoch: 42 batches of 256 links on Cora, 20-130 s an epoch at load 2-12 on 2 cores.
    "graph_sage_unsup": Example("graph_sage_unsup.py", "test acc (Cora)", r"Epoch: \d+, Loss: .*Test: (\d\.\d+)",
                                loop=(1, 51), epochs=1),
    "hetero/to_hetero_mag": Example("hetero/to_hetero_mag.py", "val acc", r"Epoch: \d+, Loss: .*Val: (\d\.\d+)",
                                    loop=(1, 21), epochs=3),
    "hetero/hierarchical_sage": Example("hetero/hierarchical_sage.py", "val acc",
                                        r"Epoch: \d+, Loss: .*Val: (\d\.\d+)", loop=(1, 6), epochs=3),
    "hetero/hierarchical_sage --use-sparse-tensor": Example(
        "hetero/hierarchical_sage.py", "val acc", r"Epoch: \d+, Loss: .*Val: (\d\.\d+)",
        argv=("--use-sparse-tensor",), loop=(1, 6), epochs=3),
}
# PyG 2.6's products example (2.7 folded it into ogbn_train.py), tests/test_ported_examples.py's:
# its 10 runs cut to one.
OLDER_EXAMPLES = {
    "ogbn_products_sage": Example("ogbn_products_sage.py", "final test acc", r"Final Test: (\d\.\d+)",
                                  loop=(1, 21), epochs=8, cuts={(1, 11): (1, 2)}),
}
ALL_EXAMPLES = {**EXAMPLES, **OLDER_EXAMPLES}


def ported(path: str) -> str:
    """The example with its one loader import taken from conveyor, and nothing else changed."""
    original = (EXAMPLES_DIR / path).read_text()
    lines = original.splitlines(keepends=True)
    hits = [i for i, line in enumerate(lines) if line.startswith(PYG_IMPORT)]
    assert len(hits) == 1, f"{path}: {len(hits)} loader imports"
    lines[hits[0]] = lines[hits[0]].replace(PYG_IMPORT, CONVEYOR_IMPORT)
    return "".join(lines)


def script_text(path: str, loader: str) -> str:
    return ported(path) if loader == "conveyor" else (EXAMPLES_DIR / path).read_text()


def run_arguments(example: Example, epochs: int) -> tuple[tuple, dict]:
    """The script's arguments and the loop cut that give it `epochs` epochs."""
    argv = example.argv + (("--epochs", str(epochs)) if example.path == "ogbn_train.py" else ())
    cuts = {**example.cuts, **({example.loop: (example.loop[0], example.loop[0] + epochs)} if example.loop else {})}
    return argv, cuts


def prepare(work: Path, example: Example, loader: str) -> Path:
    """A job's folder: the script at its path, and Cora's files where graph_sage_unsup.py reads them."""
    script = work / "examples" / example.path
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(script_text(example.path, loader))
    if example.path == "graph_sage_unsup.py" and CORA_RAW.is_dir():  # Planetoid(<examples>/../data/Cora, 'Cora')
        shutil.copytree(CORA_RAW, work / "data" / "Cora" / "Cora" / "raw", dirs_exist_ok=True)
    return script


def run_examples(jobs: list, loader: str, timeout: float = 900, env: dict | None = None,
                 seed: int | None = None) -> list:
    """Run the examples `jobs` (pairs of a name and its epochs, None for the benchmark's) on
    `loader` ('conveyor' or 'pyg'), one after the other in one fresh interpreter and folder: the
    figures of each. One job per call is one example's own run. `seed`: Python's, numpy's and
    torch's, set just before each script (None: the script's own, unseeded)."""
    with tempfile.TemporaryDirectory(prefix="pyg-example-") as tmp:
        work, plan = Path(tmp), {"family": loader, "out": str(Path(tmp) / "records.json"), "jobs": []}
        for i, (name, epochs) in enumerate(jobs):
            example = ALL_EXAMPLES[name]
            argv, cuts = run_arguments(example, example.epochs if epochs is None else epochs)
            plan["jobs"].append({"script": str(prepare(work / str(i), example, loader)), "argv": list(argv),
                                 "cuts": [[list(k), list(v)] for k, v in cuts.items()], "probe": example.probe,
                                 "seed": seed})
        run_env = {**os.environ, **(env or {}), "PYTHONPATH": os.pathsep.join([str(work / "inject"), str(REPO)])}
        shutil.copy(EXAMPLES_DIR / "synthetic_datasets.py", _inject(work) / "sitecustomize.py")
        load, start = os.getloadavg(), time.perf_counter()
        try:
            proc = subprocess.run([sys.executable, "-c", SEED_PRELUDE + RUNNER, json.dumps(plan)], cwd=work,
                                  env=run_env, capture_output=True, text=True, timeout=timeout)
            code, stdout, stderr = proc.returncode, proc.stdout, proc.stderr
        except subprocess.TimeoutExpired as e:
            code, stdout, stderr = "timeout", _text(e.stdout), _text(e.stderr)
        out = Path(plan["out"])
        records = json.loads(out.read_text()) if out.exists() else []
    wall = time.perf_counter() - start
    if len(records) < len(jobs):  # the interpreter died (or timed out) before writing them
        records += [{"error": f"exit {code}: {_last_error(stderr)}"} for _ in range(len(jobs) - len(records))]
    outputs = re.split(r"^=== job \d+\n", stdout, flags=re.M)[1:]
    for i, ((name, _), job, record) in enumerate(zip(jobs, plan["jobs"], records)):
        record.update({"example": name, "loader": loader, "seed": seed, "argv": job["argv"], "cuts": job["cuts"],
                       "returncode": code, "wall_s": wall, "load_before": load,
                       "stdout": outputs[i] if i < len(outputs) else "", "stderr_tail": stderr[-3000:]})
        record["metric"] = metric_of(ALL_EXAMPLES[name], record["stdout"], record)
    return records


def run_example(name: str, loader: str, timeout: float = 900, seed: int | None = None) -> dict:
    """One run of example `name` on `loader` in its own interpreter (the benchmark's unit)."""
    return run_examples([(name, None)], loader, timeout, seed=seed)[0]


def _inject(work: Path) -> Path:
    (work / "inject").mkdir(parents=True, exist_ok=True)
    return work / "inject"


def _text(value) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else (value or "")


def _last_error(stderr: str) -> str:
    lines = [line for line in stderr.strip().splitlines() if line.strip() and "%|" not in line]
    return lines[-1] if lines else ""


def metric_of(example: Example, stdout: str, record: dict):
    if example.probe:
        return record.get("probe")
    found = re.findall(example.pattern, stdout)
    if not found:
        return None
    value = float(found[-1])
    return value / 100 if "%" in example.pattern else value


def epoch_seconds(record: dict) -> list:
    """The training loader's complete passes (the first loader iterated): the epochs' times."""
    return [p["seconds"] for p in record.get("passes", []) if p["loader"] == 0]


# --- the benchmark ------------------------------------------------------------------------------

def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=5, help="seeded rounds: round k seeds with first-seed + k")
    p.add_argument("--first-seed", type=int, default=0)
    p.add_argument("--examples", default=",".join(EXAMPLES),
                   help="comma-separated names, run in this order (default: all): " + ", ".join(ALL_EXAMPLES))
    p.add_argument("--loaders", default=",".join(LOADERS))
    p.add_argument("--timeout", type=float, default=900, help="seconds one run may take")
    p.add_argument("--out", default=None, help="JSON path")
    p.add_argument("--merge", nargs="+", default=None, metavar="JSON",
                   help="write one table of these runs' results instead: their rounds joined by seed (a later "
                        "file's run of a seed replaces an earlier's), e.g. after a run cut short and the rest run "
                        "apart, or a row rerun")
    return p.parse_args(argv)


def checked_names(args) -> list:
    names = [n.strip() for n in args.examples.split(",") if n.strip()]
    unknown = [n for n in names if n not in ALL_EXAMPLES]
    if unknown:
        raise SystemExit(f"unknown example(s) {unknown}: --examples takes {', '.join(ALL_EXAMPLES)}")
    return names


def merge(args, out: Path) -> None:
    parts = [json.loads(Path(path).read_text()) for path in args.merge]
    by_seed = {}  # a later file's run of a seed replaces an earlier's; an unseeded run is dropped where seeded ones are
    for part in parts:
        for key, runs in part["results"].items():
            by_seed.setdefault(key, {}).update({run.get("seed"): run for run in runs})
    for runs in by_seed.values():
        if len(runs) > 1:
            runs.pop(None, None)
    results = {key: [runs[s] for s in sorted(runs, key=lambda s: (s is None, s or 0))]
               for key, runs in by_seed.items() if runs}
    names = [n for n in ALL_EXAMPLES if all(f"{n}|{lo}" in results for lo in args.loaders.split(","))]
    meta = {**parts[0]["meta"], "command": " ; ".join(p["meta"]["command"] for p in parts),
            "uptime_at_end": parts[-1]["meta"]["uptime_at_end"]}
    rounds = max(len(runs) for runs in results.values())
    merged = argparse.Namespace(**{**vars(args), "examples": ",".join(names), "rounds": rounds})
    print(write(out, results, merged, meta, uptime=False))


def median_range(values: list, fmt: str) -> str:
    if not values:
        return "-"
    text = f"{statistics.median(values):{fmt}}"
    return text if len(values) == 1 else f"{text} ({min(values):{fmt}}-{max(values):{fmt}})"


def how_it_ran(record: dict) -> str:
    loaders = record.get("loaders") or []
    if not loaders:
        return "-"
    first = loaders[0]
    pipeline = f", {first['pipeline']}" if first.get("pipeline") else ""
    threads = record.get("torch_threads")
    return f"{len(loaders)} loader(s), num_workers={first['num_workers']}{pipeline}; {threads} threads"


def metric_cell(runs: list) -> str:
    good = [r for r in runs if r["error"] is None]
    spread = Spread.of([r["metric"] for r in good])
    if spread is None:
        error = next((r["error"] for r in runs if r["error"]), "no metric printed").strip().splitlines()[-1]
        said = "refused by name" if error.startswith("conveyor.core.errors.ConveyorError") else "failed"
        return f"{said} ({len(runs)} of {len(runs)}): `{error.replace('|', '/')}`"
    failed = f"; {len(runs) - len(good)} failed" if len(good) < len(runs) else ""
    return spread.text() + failed


def epoch_by_seed(runs: list) -> dict:
    """seed -> the run's median epoch (None where it failed or trained no complete epoch)."""
    return {r.get("seed"): statistics.median(epoch_seconds(r)) if r["error"] is None and epoch_seconds(r) else None
            for r in runs}


def why_no_metric(loader: str, runs: list) -> str:
    """Why a loader gave no figure: PyG's without pyg-lib (not installed here), or a failure."""
    error = next((r["error"] for r in runs if r["error"]), "") or ""
    if loader == "pyg" and "pyg-lib" in error:
        return "PyG's loader needs pyg-lib for this, not installed here"
    if loader == "pyg" and "num_sampled_nodes" in error:
        return ("PyG's loader without pyg-lib (torch_sparse) gives batches no num_sampled_nodes, which the script "
                "reads")
    if error.startswith("conveyor.core.errors.ConveyorError"):
        return f"{loader}'s loader refuses it by name"
    return f"{loader}'s loader failed"


def example_row(name: str, results: dict) -> str:
    example = ALL_EXAMPLES[name]
    runs = {lo: results.get(f"{name}|{lo}", []) for lo in LOADERS}
    spreads = {lo: Spread.of([r["metric"] for r in runs[lo] if r["error"] is None]) for lo in LOADERS}
    if spreads["conveyor"] and spreads["pyg"]:
        verdict = Verdict.of(spreads["conveyor"], spreads["pyg"]).text()
    else:
        verdict = "- (" + "; ".join(why_no_metric(lo, runs[lo]) for lo in LOADERS if not spreads[lo]) + ")"
    epochs = {lo: epoch_by_seed(runs[lo]) for lo in LOADERS}
    times = [median_range([v for v in epochs[lo].values() if v], ".2f") for lo in LOADERS]
    ran = "; ".join(f"{lo}: {how_it_ran(next(iter(runs[lo]), {}))}" for lo in LOADERS)
    loads = [r["load_before"][0] for lo in LOADERS for r in runs[lo] if "load_before" in r]
    load = f"{min(loads):.1f}-{max(loads):.1f}" if loads else "-"
    return (f"| {name} ({example.metric}; {epochs_said(example)}) | {metric_cell(runs['conveyor'])} | "
            f"{metric_cell(runs['pyg'])} | {verdict} | {times[0]} | {times[1]} | "
            f"{ratio_by_round(epochs['conveyor'], epochs['pyg'])} | {ran} | {load} |")


def markdown(results: dict, args, meta: dict) -> str:
    names = [n for n in args.examples.split(",")]
    loads = [r["load_before"][0] for runs in results.values() for r in runs if "load_before" in r]
    seeds = sorted({r.get("seed") for runs in results.values() for r in runs}, key=lambda s: (s is None, s or 0))
    seeds = ["unseeded" if s is None else str(s) for s in seeds]
    lines = [
        "# PyG's examples with one import changed, beside PyG's loader on the same data", "",
        f"`{meta['command']}`", "",
        f"Each example as PyG 2.8.1 ships it, on the stand-in data ({meta['data']}), once per loader per round, "
        f"up to {args.rounds} interleaved rounds (n in each cell; the loaders' order alternating), one run at a "
        f"time, each in its own interpreter. Round k seeds Python's `random`, numpy and torch with k just before "
        f"the script runs "
        f"(seeds {', '.join(seeds)}; benchmarks/seeded_rounds.py), the same for both loaders. "
        f"Metric: mean ± sd (range; n) over the rounds; verdict: conveyor's mean minus PyG's, 'within noise' when "
        f"|diff| <= 2·sqrt(sd_c²/n_c + sd_p²/n_p) (the bound given). Epoch = one complete pass over the script's "
        f"training loader (timed from outside the script, its loop body included); epoch s = median (range) over "
        f"the rounds of a run's median epoch; ratio = conveyor / PyG round by round, median (range). "
        f"Machine: {meta['cpu_count']} cores, shared; 1-minute load before the runs {min(loads):.1f}-"
        f"{max(loads):.1f} (per row: its runs'); `uptime` at the end: {meta['uptime_at_end']}. PyG: torch_geometric "
        f"{meta['pyg']}, torch_sparse {meta['torch_sparse']}, pyg-lib {meta['pyg_lib']}.", "",
        "| example | conveyor's loader | PyG's loader | conveyor - PyG | epoch s, conveyor | epoch s, PyG | "
        "epoch time conveyor / PyG | how they ran (workers, torch threads) | load |",
        "|---|---|---|---|---|---|---|---|---|"]
    lines += [example_row(name, results) for name in names]
    return "\n".join(lines) + "\n"


def epochs_said(example: Example) -> str:
    if example.probe:
        return "its 2 passes"
    return f"{example.epochs} epoch{'s' if example.epochs != 1 else ''}"


def versions() -> dict:
    import torch_geometric
    import torch_geometric.typing as pyg_typing
    try:
        import torch_sparse
        sparse = torch_sparse.__version__
    except ImportError:
        sparse = "not installed"
    return {"pyg": torch_geometric.__version__, "torch_sparse": sparse,
            "pyg_lib": "installed" if pyg_typing.WITH_PYG_LIB else "not installed"}


def main(argv=None) -> None:
    args = parse_args(argv)
    out = Path(args.out or REPO / "benchmarks" / "results" / "pyg_examples_cpu.json")
    if args.merge:
        return merge(args, out)
    names, loaders = checked_names(args), args.loaders.split(",")
    meta = {"command": "python -m benchmarks.pyg_examples " + " ".join(argv if argv is not None else sys.argv[1:]),
            "cpu_count": os.cpu_count(), **versions(),
            "data": "2,000 nodes, 8 classes, 32 features, 16 in-edges each; MAG-typed with 800 authors, 40 "
                    "institutions, 96 fields; Cora for graph_sage_unsup"}
    results = {f"{n}|{loader}": [] for n in names for loader in loaders}
    out.parent.mkdir(parents=True, exist_ok=True)
    for name in names:  # an example's rounds together: the first examples named are done first
        for round_ in range(args.rounds):
            seed = args.first_seed + round_
            for loader in round_order(loaders, seed):
                record = run_example(name, loader, timeout=args.timeout, seed=seed)
                results[f"{name}|{loader}"].append(record)
                print(f"seed {seed} {name} {loader}: metric {record['metric']}, "
                      f"epochs {[round(s, 2) for s in epoch_seconds(record)]}, wall {record['wall_s']:.1f}s, "
                      f"load {record['load_before'][0]:.1f}" + (f", {record['error']}" if record["error"] else ""),
                      flush=True)
                write(out, results, args, meta)  # so far: a long run cut short keeps its rounds
    print(write(out, results, args, meta))


def write(out: Path, results: dict, args, meta: dict, uptime: bool = True) -> str:
    """The JSON and the table of the runs so far (examples not yet run: no row)."""
    if uptime:
        meta["uptime_at_end"] = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    done = {key: runs for key, runs in results.items() if runs}
    names = [n for n in args.examples.split(",") if all(done.get(f"{n}|{lo}") for lo in args.loaders.split(","))]
    text = markdown(done, argparse.Namespace(**{**vars(args), "examples": ",".join(names)}), meta) if names else ""
    out.write_text(json.dumps({"meta": meta, "args": vars(args), "results": results}, indent=1))
    out.with_suffix(".md").write_text(text)
    return text


if __name__ == "__main__":
    main()
