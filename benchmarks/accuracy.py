"""Accuracy with each (dataset, model)'s defaults against the published figures and PyG's reference.

    python -m benchmarks.accuracy [--datasets cora citeseer pubmed synthetic] [--models gcn gat sage]
                                  [--seeds 10] [--systems conveyor pyg] [--out PATH] [--doc PATH]

Per dataset and model, `--seeds` runs (run.seed 0, 1, ...) with the defaults `python launch.py
data=D model=M` takes (conf/data/planetoid/D_M.yaml where it exists), each scored by its
test accuracy at the best validation epoch (layer-wise, exact: trainer/loop/layerwise.py); beside it the
published full-batch figure (Kipf and Welling 2017 for GCN, and GraphSAGE is held to it;
Velickovic et al. 2018 for GAT) and PyG's reference (`mode=compare`'s, compare/reference.py) under
the same settings and seeds. On the synthetic graph: SAGE (the default run) beside an MLP, which
ignores the graph. Every finished run is saved at once into the JSON, and the markdown rewritten,
so the script can be stopped and started again: it skips the runs the JSON holds.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import torch

from conveyor.compare.reference import train_reference
from conveyor.config import load_settings
from conveyor.partition.datasets import load_configured
from conveyor.trainer.run import train

REPO = Path(__file__).resolve().parent.parent
# Test accuracy (%) as published, full-batch: GCN (Kipf and Welling 2017, table 2), GAT (Velickovic
# et al. 2018, table 2). GraphSAGE has no Planetoid figure of its own: it is held to GCN's.
PUBLISHED = {"gcn": {"cora": 81.5, "citeseer": 70.3, "pubmed": 79.0},
             "gat": {"cora": 83.0, "citeseer": 72.5, "pubmed": 79.0}}
PUBLISHED["sage"] = PUBLISHED["gcn"]
TOLERANCE = {"gcn": 1.5, "gat": 1.5, "sage": 2.0}  # points, issue #27
LINK_SECTION = "<!-- link accuracy"  # the doc's section that benchmarks/link_accuracy.py writes, kept here
SYNTHETIC_MODELS = ("sage", "mlp")


def final_figures(system: str, settings, out: Path, reference) -> dict:
    """One run's final figures: conveyor's trainer, or (system "pyg") `reference`, mode=compare's PyG
    reference for the task (compare.reference.train_reference or compare.link_reference's), on CPU."""
    if system == "conveyor":
        return train(settings).final
    return reference(settings, settings.compare, load_configured(settings.data), out, torch.device("cpu"))["final"]


def run_one(system: str, data: str, model: str, seed: int, tmp: Path) -> dict:
    """One run's figures: test accuracy at the best validation epoch, and how long it took."""
    out = tmp / f"{system}_{data}_{model}_{seed}"
    settings = load_settings([f"data={data}", f"model={model}", f"run.seed={seed}", "trainer.progress=false",
                              "run.device=cpu", "compare.pyg_workers=0", f"run.out_dir={out}"])
    start = time.perf_counter()
    final = final_figures(system, settings, out, train_reference)
    record = {"seed": seed, "test_acc_at_best_val": final["test_acc_at_best_val"], "best_epoch": final["best_epoch"],
              "test_acc_last": final["test_acc"], "wall_s": time.perf_counter() - start}
    if system == "conveyor":  # the trainer's dropout (PyG's reference runs PyG's own F.dropout)
        record["fast_dropout"] = settings.model.uses_fast_dropout()  # null: the built-in models only
    return record


def pairs(datasets: list, models: list) -> list:
    """(data, model) in the order they run: each model on the Planetoid sets, then synthetic with
    SAGE and the MLP."""
    planetoid = [(d, m) for m in models for d in datasets if d != "synthetic"]
    return planetoid + [("synthetic", m) for m in SYNTHETIC_MODELS if "synthetic" in datasets]


def load(path: Path) -> dict:
    return json.loads(path.read_text()) if path.exists() else {"runs": {}}


def key(system: str, data: str, model: str) -> str:
    return f"{system}/{data}/{model}"


def summary(runs: list, figure: str = "test_acc_at_best_val") -> dict | None:
    """Mean and sample std (points) of each run's `figure` over the seeds; None without runs."""
    accs = [100 * r[figure] for r in runs]
    if not accs:
        return None
    return {"mean": statistics.fmean(accs), "std": statistics.stdev(accs) if len(accs) > 1 else 0.0,
            "seeds": len(accs)}


def cell(s: dict | None, mark: str = "") -> str:
    return "-" if s is None else f"{s['mean']:.1f} ± {s['std']:.1f} ({s['seeds']}){mark}"


def other_dropout(model: str, runs: list) -> str:
    """"†" when a run drew other dropout masks than `model`'s default draws now (a run from before
    `model.fast_dropout`, which the JSON does not record, drew F.dropout's)."""
    default = load_settings([f"model={model}"], check_machine=False).model.uses_fast_dropout()
    return "†" if any(r.get("fast_dropout", False) != default for r in runs) else ""


def planetoid_row(report: dict, data: str, model: str) -> str:
    mine = report["runs"].get(key("conveyor", data, model), [])
    ours, pyg = summary(mine), summary(report["runs"].get(key("pyg", data, model), []))
    published = PUBLISHED[model][data]
    verdict = "-" if ours is None else (
        "yes" if ours["mean"] >= published - TOLERANCE[model] else "no")
    gap = "-" if ours is None or pyg is None else f"{ours['mean'] - pyg['mean']:+.1f}"
    return (f"| {data} | {model} | {cell(ours, other_dropout(model, mine))} | {published:.1f} | "
            f"{verdict} (±{TOLERANCE[model]:g}) | "
            f"{cell(pyg)} | {gap} |")


def markdown(report: dict) -> str:
    lines = [HEADER.format(**report["setup"]), "",
             "| data | model | conveyor (seeds) | published | within | PyG reference (seeds) | conveyor − PyG |",
             "|---|---|---|---|---|---|---|"]
    for data, model in report["pairs"]:
        if data != "synthetic":
            lines.append(planetoid_row(report, data, model))
    synthetic = [(m, summary(report["runs"].get(key("conveyor", "synthetic", m), []))) for m in SYNTHETIC_MODELS]
    if any(s for _, s in synthetic):
        lines += ["", "The synthetic graph (the default run, `python launch.py`, and the same with `model=mlp`):",
                  "", "| model | conveyor test acc at best val (seeds) |", "|---|---|"]
        lines += [f"| {m} | {cell(s, other_dropout(m, report['runs'].get(key('conveyor', 'synthetic', m), [])))} |"
                  for m, s in synthetic]
    if any(len(runs) < 10 for runs in report["runs"].values()):
        lines += ["", FEWER_SEEDS]
    if any(other_dropout(name.split("/")[2], runs) for name, runs in report["runs"].items()
           if name.startswith("conveyor/")):
        lines += ["", OTHER_DROPOUT]
    return "\n".join(lines + typed_graphs()) + "\n"


def typed_graphs() -> list:
    """The typed-graph tables `benchmarks/hetero.py` wrote (issue 38), kept in this page when it is rewritten."""
    found = [path for path in TYPED_RESULTS if path.exists()]
    if not found:
        return []
    lines = ["", "## Typed graphs (synthetic_mag)", "", TYPED_INTRO]
    for path in found:
        text = path.read_text().strip().replace("\n# ", "\n### ")
        lines += ["", "### " + text.removeprefix("# "), "", f"(`{path.relative_to(REPO)}`, and its JSON)"]
    return lines


TYPED_RESULTS = [REPO / "benchmarks" / "results" / name for name in
                 ("hetero_accuracy_cpu_s0.02.md", "hetero_accuracy_rgcn_cpu_s0.02.md", "hetero_loader_cpu_s0.05.md")]
TYPED_INTRO = ("Written by `python -m benchmarks.hetero` (its docstring says how each side runs): the same model "
               "(PyG's `to_hetero(GraphSAGE(...))`; in the rgcn table conveyor's R-GCN module, which PyG's loop "
               "runs as it is) trained by `conveyor.fit` and by PyG's own loop on the same `HeteroData`, seed by "
               "seed, and conveyor's `NeighborLoader` against PyG's with its worker processes.")


HEADER = """# Accuracy with the defaults

Generated by `benchmarks/accuracy.py` (JSON: `{json}`). Test accuracy (%) at the best validation
epoch, mean ± sample std over the seeds run (their count in brackets; seeds 0, 1, ...), with the
defaults of `python launch.py data=D model=M` (conf/data/planetoid/D_M.yaml where it exists; SAGE on
Cora keeps conf/data/cora.yaml's: hidden 64, fanouts [10, 10], 50 epochs), evaluated layer-wise
over every neighbour (exact: the full-graph forward's logits). Published: full-batch figures, GCN
from Kipf and Welling (2017), GAT from Velickovic et al. (2018); GraphSAGE is held to GCN's within
2 points. PyG reference: `mode=compare`'s (compare/reference.py: PyG's stock model, its
`NeighborLoader` sampling with {pyg_sampling}, in the training process) with the same settings and
seeds. How it ran: {machine}, CPU, {threads} torch thread(s) per run, one run at a time under
`nice`, load average {load} when the table was last written (other jobs share the 2 cores), torch
{torch}."""
OTHER_DROPOUT = (
    "**†** Measured with other dropout masks than the model's default draws now: conveyor's own "
    "(`model.fast_dropout`) are the default of the built-in models (sage, gcn, mlp) only, and a PyG "
    "model named by `model._target_` (gat) draws `F.dropout`'s, as written; runs that predate the option "
    "(the JSON does not record it) drew `F.dropout`'s. Both draw from the same distribution; "
    "[`benchmarks/results/dropout_accuracy_cpu.md`](../benchmarks/results/dropout_accuracy_cpu.md) "
    "measured its effect on test accuracy over 10 seeds: -0.34 ± 0.22 (sage, cora), -0.37 ± 0.68 "
    "(gat, cora), -0.26 ± 0.52 (gcn, pubmed). Remove a row's runs from the JSON and run the script "
    "again to measure it with the current defaults.")
FEWER_SEEDS = ("**Fewer seeds than 10** where the brackets say so: this shared 2-core machine's time ran out. "
               "`python -m benchmarks.accuracy --seeds 10` adds the missing ones (it skips the runs the JSON holds).")


def setup(out: Path) -> dict:
    import torch_geometric.typing as pyg_typing
    return {"json": str(out.relative_to(REPO)) if out.is_relative_to(REPO) else str(out),
            "machine": platform.platform(), "threads": torch.get_num_threads(), "torch": torch.__version__,
            "load": " / ".join(f"{x:.1f}" for x in os.getloadavg()),
            "pyg_sampling": "pyg-lib" if pyg_typing.WITH_PYG_LIB else "torch_sparse"}


def save(report: dict, out: Path, doc: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1))
    old = doc.read_text() if doc.exists() else ""
    link = old[old.index(LINK_SECTION):] if LINK_SECTION in old else ""  # benchmarks/link_accuracy.py's
    doc.write_text(markdown(report) + ("\n" + link if link else ""))


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)  # on 2 shared cores, 2 threads make every step 10-50x slower
    report = load(args.out)
    wanted = [list(p) for p in pairs(args.datasets, args.models)]  # lists, as JSON gives them back
    report["pairs"] = report.get("pairs", []) + [p for p in wanted if p not in report.get("pairs", [])]
    report["setup"] = setup(args.out)
    with tempfile.TemporaryDirectory() as tmp:
        for data, model in pairs(args.datasets, args.models):
            systems = ["conveyor"] if data == "synthetic" else args.systems
            for system, seed in ((s, seed) for seed in range(args.seeds) for s in systems):
                runs = report["runs"].setdefault(key(system, data, model), [])
                if any(r["seed"] == seed for r in runs):
                    continue
                result = run_one(system, data, model, seed, Path(tmp))
                runs.append(result)
                runs.sort(key=lambda r: r["seed"])
                save(report, args.out, args.doc)
                print(f"{system} {data} {model}: {result}", flush=True)
    save(report, args.out, args.doc)
    print(markdown(report))


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--datasets", nargs="+", default=["cora", "citeseer", "pubmed", "synthetic"])
    parser.add_argument("--models", nargs="+", default=["gcn", "gat", "sage"])
    parser.add_argument("--seeds", type=int, default=10, help="runs per system: seeds 0 .. N-1")
    parser.add_argument("--systems", nargs="+", default=["conveyor", "pyg"], choices=["conveyor", "pyg"])
    parser.add_argument("--threads", type=int, default=1, help="torch threads per run")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "accuracy.json")
    parser.add_argument("--doc", type=Path, default=REPO / "docs" / "accuracy.md")
    return parser.parse_args()


if __name__ == "__main__":
    main()
