"""`mode=compare`: conveyor beside the plain PyG reference, on the same data, config and seeds.

Runs both systems for `compare.seeds` seeds (run.seed, run.seed + 1, ...) and writes into
`run.out_dir`:
  conveyor/seed<s>/, pyg/seed<s>/   each run's own metrics.json and TensorBoard files (conveyor's: checkpoints)
  tensorboard/<system>_seed<s>/     both systems' curves under the same tags, so TensorBoard overlays them
  comparison.json, comparison.md    per-run curves, per-system summaries, the table
  comparison.png                    validation accuracy against epoch and against training time

Training time is the sum of the epochs' training times (sampling, feature gathering and model
steps; evaluation excluded, as both systems evaluate identically). The time-to-accuracy target is
`compare.target_val_acc`, or when null 0.98 x the best epoch of the reference's mean validation curve.
How each system ran (conveyor: pipeline, sampler, cache, device; the reference: NeighborLoader's
worker processes, device) is in comparison.json's `setup`, the table and the plot's title.
"""
from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import numpy as np
import torch

from conveyor.compare.link_reference import train_link_reference
from conveyor.compare.reference import require_neighbor_sampling, require_reference_model, train_reference
from conveyor.compare.settings import CompareSettings
from conveyor.compare.typed_link_reference import train_typed_link_reference
from conveyor.core import ConveyorError
from conveyor.core.device import resolve_device, use_device
from conveyor.partition.datasets import dataset_entry, load_configured
from conveyor.partition.hetero import is_typed
from conveyor.samplers import SamplerSpec
from conveyor.trainer.outputs.metrics import setup_logging
from conveyor.trainer.run import train
from conveyor.trainer.settings import TrainingSettings

log = logging.getLogger("conveyor")

SYSTEMS = ("conveyor", "pyg")
TARGET_FRACTION = 0.98  # of the reference's best mean val acc, when compare.target_val_acc is null
CURVE_KEYS = ("loss", "train_acc", "val_acc", "test_acc", "epoch_time_s")
METRIC_NAMES = {"acc": "accuracy", "auc": "ROC-AUC"}  # val_<metric>: what the comparison reads, by task


def curve_keys(metric: str) -> tuple:
    """The curves kept per evaluated epoch: node classification's accuracy, or task=link's ROC-AUC."""
    return tuple(k.replace("_acc", f"_{metric}") if k.startswith(("val", "test")) else k for k in CURVE_KEYS)


def compare(settings: TrainingSettings, options: CompareSettings) -> dict:
    """Run both systems for every seed, then write and print the comparison; return comparison.json's dict."""
    require_neighbor_sampling()
    target = _check(settings, options)
    out_dir = Path(settings.run.out_dir)
    setup_logging(out_dir)
    device = use_device(resolve_device(settings.run.device))
    graph = load_configured(settings.data)
    link = settings.task.name == "link"
    if not link and (graph.val_idx is None or graph.val_idx.numel() == 0):
        raise ConveyorError(f"dataset {settings.data.name!r} has no validation split; mode=compare plots and "
                            f"targets validation accuracy, so give it val_idx.")
    seeds = [settings.run.seed + i for i in range(options.seeds)]
    log.info("comparing conveyor with the PyG reference on %r, %d seeds; output %s", graph, len(seeds), out_dir)
    runs, model = run_both(settings, options, graph, seeds, out_dir, device)
    result = summarise(runs, target, "auc" if link else "acc")
    result.update({"task": settings.task.name, "data": settings.data.name, "model": _model_label(settings.model),
                   "fanouts": list(settings.sampler.fanouts), "batch_size": settings.trainer.batch_size,
                   "epochs": settings.trainer.epochs, "seeds": seeds, "device": str(device),
                   "setup": {"conveyor": conveyor_setup(settings, model, device, runs["conveyor"], graph),
                             "pyg": runs["pyg"][0]["final"]["setup"]}})
    write_outputs(result, runs, out_dir)
    return result


def run_both(settings: TrainingSettings, options: CompareSettings, graph, seeds: list, out_dir: Path,
             device) -> tuple[dict, object]:
    """Each system's curves per seed, and conveyor's last trained model."""
    runs, model = {name: [] for name in SYSTEMS}, None
    link = settings.task.name == "link"
    metric, reference_of = ("auc", train_link_reference) if link else ("acc", train_reference)
    if link and is_typed(graph):  # PyG's LinkNeighborLoader on the HeteroData (typed_link_reference.py)
        reference_of = train_typed_link_reference
    for seed in seeds:
        result = train(_seed_settings(settings, seed, out_dir / "conveyor" / f"seed{seed}"))
        model = result.model.encoder if link else result.model
        setup_logging(out_dir)  # train() pointed the log file at its own directory
        runs["conveyor"].append(_curves(seed, {"epochs": result.history, "final": result.final}, metric))
        pyg_dir = out_dir / "pyg" / f"seed{seed}"
        reference = reference_of(_seed_settings(settings, seed, pyg_dir), options, graph, pyg_dir, device)
        runs["pyg"].append(_curves(seed, reference, metric))
    return runs, model


def write_outputs(result: dict, runs: dict, out_dir: Path) -> None:
    write_tensorboard(out_dir / "tensorboard", runs, result.get("metric", "acc"))
    (out_dir / "comparison.json").write_text(json.dumps(result, indent=1))
    table = markdown_table(result)
    (out_dir / "comparison.md").write_text(table)
    plot(result, out_dir / "comparison.png")
    print(table)
    log.info("comparison written to %s (comparison.md, comparison.json, comparison.png, tensorboard/)",
             out_dir)


def _check(settings: TrainingSettings, options: CompareSettings) -> float | None:
    """What only mode=compare refuses; the time-to-accuracy target (None: from the reference)."""
    if settings.run.world_size != 1:
        raise ConveyorError("mode=compare runs each system in one process; set run.world_size=1.")
    if dataset_entry(settings.data.name, settings.data._target_).typed and settings.task.name != "link":
        raise ConveyorError(f"mode=compare trains PyG's homogeneous reference; data={settings.data.name} is a typed "
                            f"graph: `python -m benchmarks.hetero` compares conveyor with PyG on it (task=link "
                            f"compares typed graphs too).")
    require_reference_model(settings.model)
    if settings.run.resume:
        raise ConveyorError("mode=compare cannot resume; drop run.resume=true and choose a new run.out_dir.")
    out_dir = Path(settings.run.out_dir)
    if any((out_dir / name).exists() for name in ("comparison.json",) + SYSTEMS):
        raise ConveyorError(f"run.out_dir={out_dir} already holds a comparison; choose another run.out_dir.")
    target = options.target_val_acc
    return None if target is None else float(target)


def conveyor_setup(settings: TrainingSettings, model, device, runs: list, graph) -> dict:
    """How conveyor ran: model, pipeline processes (auto's choice for `graph`), sampler, cache (and
    the hit ratio it reached)."""
    pipeline, cache = settings.pipeline, settings.cache
    name, why = pipeline.choose(graph)
    asynchronous = name == "async"
    hit_ratios = [r["cache_hit_ratio"] for r in runs if r.get("cache_hit_ratio") is not None]
    return {"model": _model_name(model), "parameters": sum(p.numel() for p in model.parameters()),
            "pipeline": name if pipeline.name != "auto" else f"{name} ({why})",
            "processes": ("sampler, loader and trainer processes" if asynchronous
                          else "sampling and gathering in the training process"),
            "stage_threads": pipeline.stage_threads if asynchronous else None,
            "sampler": SamplerSpec.of(settings.sampler, 0, device).name,
            "cache": cache.policy, "cache_capacity": str(cache.capacity),
            "cache_hit_ratio": float(np.mean(hit_ratios)) if hit_ratios else None,
            "evaluation": runs[0]["final"].get("inference") if runs else None,
            "torch_threads": torch.get_num_threads(), "device": str(device)}


def _model_label(model) -> str:
    """`model.name`, and the class when `model._target_` names one (its name may be a default's)."""
    return f"{model.name} ({model._target_})" if model._target_ is not None else model.name


def _model_name(model) -> str:
    """`PerHopGNN(GAT)`, `SampledGNN(sage)`, or a user's own class."""
    if hasattr(model, "gnn"):  # PerHopGNN: a PyG BasicGNN run hop by hop
        return f"{type(model).__name__}({type(model.gnn).__name__})"
    kind = getattr(model, "kind", None)  # SampledGNN: sage, gcn or mlp
    return f"{type(model).__name__}({kind})" if kind else type(model).__name__


def describe_setup(setup: dict) -> dict:
    """One line per system saying how it ran, for the table and the plot."""
    c, p = setup["conveyor"], setup["pyg"]
    hit = "" if c["cache_hit_ratio"] is None else f", hit ratio {c['cache_hit_ratio']:.2f}"
    workers = (f"{p['workers']} persistent worker process{'es' if p['workers'] > 1 else ''}"
               if p["workers"] else "no worker processes (samples in the training process)")
    return {"conveyor": f"{c['model']}, pipeline={c['pipeline']} ({c['processes']}), sampler {c['sampler']}, "
                        f"cache {c['cache']} (capacity {c['cache_capacity']}{hit}), "
                        f"{c['evaluation']} evaluation, device {c['device']}",
            "pyg": f"{p['model']}, {p['loader']} with {workers}, {p['sampling']} sampling, "
                   f"{p['evaluation']} evaluation, device {p['device']}"}


def _seed_settings(settings: TrainingSettings, seed: int, out_dir: Path) -> TrainingSettings:
    """The same settings with this run's seed and output directory."""
    return settings.replace(mode="train", run={"seed": seed, "out_dir": str(out_dir)})


def _curves(seed: int, metrics: dict, metric: str = "acc") -> dict:
    """One run's evaluated epochs as parallel lists, with the training time accumulated up to each."""
    epochs = metrics["epochs"]
    train_time = np.cumsum([e["epoch_time_s"] for e in epochs])
    evaluated = [i for i, e in enumerate(epochs) if f"val_{metric}" in e]
    curves = {"seed": seed, "epoch": [epochs[i]["epoch"] for i in evaluated],
              "train_time_s": [float(train_time[i]) for i in evaluated]}
    for key in curve_keys(metric):
        curves[key] = [epochs[i].get(key) for i in evaluated]
    # The median resists the stalls of a shared machine and the first epoch's warm-up.
    curves["median_epoch_time_s"] = float(np.median([e["epoch_time_s"] for e in epochs]))
    curves["final"] = metrics["final"]
    curves["cache_hit_ratio"] = epochs[-1].get("cache_hit_ratio")  # conveyor's runs only
    return curves


def _mean_std(values) -> dict:
    """Mean and sample standard deviation over seeds (0 for one seed); None when there is nothing."""
    values = [v for v in values if v is not None]
    if not values:
        return {"mean": None, "std": None, "n": 0}
    std = float(np.std(values, ddof=1)) if len(values) > 1 else 0.0
    return {"mean": float(np.mean(values)), "std": std, "n": len(values)}


def _reach(curves: dict, target: float, metric: str = "acc") -> tuple[int | None, float | None]:
    """(epoch, training time) of the first evaluation at or above `target`, or (None, None)."""
    for epoch, time_s, acc in zip(curves["epoch"], curves["train_time_s"], curves[f"val_{metric}"]):
        if acc is not None and acc >= target:
            return epoch, time_s
    return None, None


def summarise(runs: dict, target: float | None, metric: str = "acc") -> dict:
    """Per-system summaries and the target (when None: 0.98 x the reference's best mean val
    `metric`: accuracy, or ROC-AUC for task=link)."""
    val, test, source = f"val_{metric}", f"test_{metric}", f"compare.target_val_acc (the val {metric})"
    if target is None:
        target = TARGET_FRACTION * float(np.mean([r[val] for r in runs["pyg"]], axis=0).max())
        source = f"{TARGET_FRACTION} x the reference's best mean val {metric}"
    if metric == "acc":
        source = source.replace(" (the val acc)", "")
    systems = {}
    for name in SYSTEMS:
        for curves in runs[name]:
            curves["epochs_to_target"], curves["time_to_target_s"] = _reach(curves, target, metric)
        systems[name] = {
            "runs": runs[name],
            "summary": {
                f"final_{val}": _mean_std(r[val][-1] for r in runs[name]),
                f"final_{test}": _mean_std(r[test][-1] for r in runs[name]),
                f"best_{val}": _mean_std(max(r[val]) for r in runs[name]),
                "epoch_time_s": _mean_std(r["median_epoch_time_s"] for r in runs[name]),
                "epochs_to_target": _mean_std(r["epochs_to_target"] for r in runs[name]),
                "time_to_target_s": _mean_std(r["time_to_target_s"] for r in runs[name]),
            }}
    c, p = systems["conveyor"]["summary"], systems["pyg"]["summary"]
    ratios = {key: _ratio(c[key]["mean"], p[key]["mean"]) for key in ("epoch_time_s", "time_to_target_s")}
    return {"metric": metric, f"target_{val}": float(target), "target_source": source, "systems": systems,
            "conveyor_over_pyg": ratios}


def _ratio(a, b):
    return None if a is None or b is None or b == 0 else a / b


# The table's columns: (header, summary key, decimals).
COLUMNS = (("final val acc", "final_val_acc", 4), ("final test acc", "final_test_acc", 4),
           ("best val acc", "best_val_acc", 4), ("median epoch time (s)", "epoch_time_s", 3),
           ("epochs to target", "epochs_to_target", 1), ("time to target (s)", "time_to_target_s", 3))


def columns(metric: str) -> tuple:
    """COLUMNS for the comparison's metric (acc, or auc for task=link)."""
    return tuple((h.replace(" acc", f" {metric}"), k.replace("_acc", f"_{metric}"), d) for h, k, d in COLUMNS)


def format_cell(stat: dict, decimals: int, num_runs: int) -> str:
    """`mean ± std`, with `(k/n)` when only k of the n runs contributed (e.g. reached the target)."""
    if stat["mean"] is None:
        return "not reached"
    cell = f"{stat['mean']:.{decimals}f} ± {stat['std']:.{decimals}f}"
    return cell if stat["n"] == num_runs else f"{cell} ({stat['n']}/{num_runs})"


def markdown_table(result: dict) -> str:
    num_runs, metric = len(result["seeds"]), result.get("metric", "acc")
    task = "" if metric == "acc" else f"task={result['task']}, "
    lines = [f"# conveyor vs PyG reference: {task}data={result['data']}, model={result['model']}",
             "",
             f"fanouts {result['fanouts']}, batch size {result['batch_size']}, {result['epochs']} epochs, "
             f"seeds {result['seeds']}, device {result['device']}; mean ± sample std over seeds. "
             f"Target val {metric} {result[f'target_val_{metric}']:.4f} ({result['target_source']}); "
             f"times are training time (evaluation excluded).",
             "",
             *(f"- {name}: {line}" for name, line in describe_setup(result["setup"]).items()),
             "",
             "| system | " + " | ".join(header for header, _, _ in columns(metric)) + " |",
             "|---|" + "---|" * len(COLUMNS)]
    for name in SYSTEMS:
        summary = result["systems"][name]["summary"]
        cells = [format_cell(summary[key], decimals, num_runs) for _, key, decimals in columns(metric)]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    ratios = result["conveyor_over_pyg"]
    lines += ["", "conveyor / pyg: median epoch time " + _fmt_ratio(ratios["epoch_time_s"]) +
              ", time to target " + _fmt_ratio(ratios["time_to_target_s"]), ""]
    return "\n".join(lines)


def _fmt_ratio(value) -> str:
    return "n/a" if value is None else f"{value:.2f}x"


def write_tensorboard(tb_dir: Path, runs: dict, metric: str = "acc") -> None:
    """Every run's curves under the same tags in `tb_dir/<system>_seed<s>`, so they overlay.

    `compare/<key>` is indexed by epoch; `compare/val_acc_by_train_ms` by the training time in
    milliseconds, and the events' wall time is also the training time, so TensorBoard's
    "relative" axis reads as time-to-accuracy.
    """
    from torch.utils.tensorboard import SummaryWriter
    base = time.time()
    for name in SYSTEMS:
        for curves in runs[name]:
            with SummaryWriter(log_dir=str(tb_dir / f"{name}_seed{curves['seed']}")) as writer:
                for i, epoch in enumerate(curves["epoch"]):
                    walltime = base + curves["train_time_s"][i]
                    for key in curve_keys(metric):
                        if curves[key][i] is not None:
                            writer.add_scalar(f"compare/{key}", curves[key][i], epoch, walltime=walltime)
                    writer.add_scalar(f"compare/val_{metric}_by_train_ms", curves[f"val_{metric}"][i],
                                      round(1000 * curves["train_time_s"][i]), walltime=walltime)


def plot(result: dict, path: Path) -> None:
    """Validation accuracy against epoch and against training time: mean over seeds, ± std band."""
    from matplotlib.figure import Figure  # no pyplot: renders with Agg, no display needed
    fig = Figure(figsize=(11, 4.2), layout="constrained")
    by_epoch, by_time = fig.subplots(1, 2, sharey=True)
    metric = result.get("metric", "acc")
    for name, colour in zip(SYSTEMS, ("tab:blue", "tab:orange")):
        runs = result["systems"][name]["runs"]
        acc = np.array([r[f"val_{metric}"] for r in runs], dtype=float)
        mean, std = acc.mean(0), acc.std(0)
        for ax, x in ((by_epoch, np.array(runs[0]["epoch"])),
                      (by_time, np.mean([r["train_time_s"] for r in runs], axis=0))):
            ax.plot(x, mean, color=colour, marker="o", markersize=3, label=name)
            ax.fill_between(x, mean - std, mean + std, color=colour, alpha=0.2, linewidth=0)
    for ax, xlabel in ((by_epoch, "epoch"), (by_time, "training time (s)")):
        ax.axhline(result[f"target_val_{metric}"], color="grey", linestyle="--", linewidth=1, label="target")
        ax.set_xlabel(xlabel)
        ax.grid(alpha=0.3)
    by_epoch.set_ylabel(f"validation {METRIC_NAMES[metric]}")
    by_epoch.legend(loc="lower right")
    how = describe_setup(result["setup"])
    fig.suptitle(f"{result['data']} · {result['model']} · {len(result['seeds'])} seeds "
                 f"(mean ± std) · {result['device']}\n"
                 + "\n".join(f"{name}: {line}" for name, line in how.items()), fontsize=9)
    fig.savefig(path, dpi=110)
