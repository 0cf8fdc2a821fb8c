"""One training run, as named steps: start (out_dir, data, model, optimizer, lr schedule, batch
source), then per epoch train, evaluate when due, step the lr schedule, record and checkpoint (the
best validation epoch's model too) until the last epoch or early stopping; finish with the final
figures.

The same steps run alone and as one rank of a data-parallel group: the context (trainer/context.py's
LocalContext, or trainer/distributed/rank_context.py's RankContext) answers the few questions where
the two differ (which graph, which seeds, who writes, how figures add up over ranks).
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Callable, Dict, List

import torch

from conveyor.cache import CacheSpec
from conveyor.core import ConveyorError
from conveyor.core.memory import gib
from conveyor.loader.pipeline_loader import LoaderParts, PipelineLoader
from conveyor.loader.seeds import STREAM_MODEL, SeedPlan, limited, stream_seed
from conveyor.partition import Graph, is_typed
from conveyor.pipeline import batch_source
from conveyor.samplers import SamplerSpec
from conveyor.trainer.context import LocalContext
from conveyor.trainer.link_task import METRIC as LINK_METRIC
from conveyor.trainer.link_task import LinkTask
from conveyor.trainer.loop.epoch import train_epoch
from conveyor.trainer.loop.evaluation import split_figures
from conveyor.trainer.loop.layerwise import layerwise_obstacle, resolve_inference, too_large_for_layerwise
from conveyor.trainer.loop.link import train_link_epoch
from conveyor.trainer.loop.loss import default_loss
from conveyor.trainer.loop.precision import Precision, resolve_precision
from conveyor.trainer.loop.schedule import build_scheduler, step_scheduler
from conveyor.trainer.models.adapter import unwrapped
from conveyor.trainer.models.edges import edge_spec
from conveyor.trainer.models.gcn import training_degree
from conveyor.trainer.models.hetero import typed_model
from conveyor.trainer.models.portable import portable_spec, with_weights
from conveyor.trainer.models.sampled import build_model
from conveyor.trainer.outputs.checkpoint import BEST, checkpoint_path, restore_weights, save_checkpoint
from conveyor.trainer.outputs.fingerprint import check_same_data
from conveyor.trainer.outputs.leftovers import sweep_leftovers
from conveyor.trainer.outputs.metrics import HeldRecords, setup_logging
from conveyor.trainer.outputs.provenance import provenance
from conveyor.trainer.outputs.resume import apply_optimizer_settings
from conveyor.trainer.settings import TrainingSettings

log = logging.getLogger("conveyor")
NO_BEST = {"val_acc": None, "test_acc": None, "epoch": None}


def no_best(metric: str) -> dict:
    """The best figures before any evaluation: the validation and test `metric` (acc; auc for links)."""
    return {f"val_{metric}": None, f"test_{metric}": None, "epoch": None}


@dataclass
class TrainResult:
    """What `train()` returns: the trained model (on its device) and metrics.json's contents."""
    model: torch.nn.Module
    history: List[Dict[str, Any]]  # one record per epoch, as in metrics.json's "epochs"
    final: Dict[str, Any]  # metrics.json's "final"


@dataclass
class Run:
    """What one training run holds between its steps."""
    settings: TrainingSettings
    ctx: Any  # LocalContext or distributed.RankContext
    out_dir: Path
    graph: Graph
    model: torch.nn.Module
    net: torch.nn.Module  # the model, or DDP around it
    optimizer: torch.optim.Optimizer
    scheduler: Any  # a torch.optim.lr_scheduler, or None (trainer.lr_schedule=none)
    inference: str  # "layerwise" or "sampled" (trainer/loop/layerwise.py, resolve_inference)
    recorder: Any
    source: PipelineLoader  # the one batch source: epoch(e) yields the pipeline's PreparedBatches
    precision: Precision
    start_epoch: int = 1
    best: dict = field(default_factory=lambda: dict(NO_BEST))
    stopped_epoch: int | None = None  # the last epoch, when early stopping ended the run
    started: float = field(default_factory=time.perf_counter)
    train_degree: torch.Tensor | None = None  # model.gcn_degrees=graph: the graph's, on the device
    eval_plan: Any = None  # layer-wise evaluation's batches: the pipeline's (async) or kept (trainer/loop/plan.py)
    loss: Callable = default_loss  # loss(out, y) -> scalar (trainer/loop/loss.py)
    portable: dict = field(default_factory=dict)  # how conveyor.load rebuilds the model (portable.py)
    data: dict = field(default_factory=dict)  # the data's fingerprint, in every checkpoint (fingerprint.py)
    link: Any = None  # task=link: its LinkTask (trainer/link_task.py); None: node classification
    metric: str = "acc"  # the figure the best epoch, early stopping and the plateau schedule read (val_<metric>)

    @property
    def seed(self) -> int:
        return self.settings.run.seed

    @property
    def epochs(self) -> int:
        return self.settings.trainer.epochs


def loader_parts(settings: TrainingSettings, device: torch.device, recorder=None, attributes=None,
                 sampler=None) -> LoaderParts:
    """The pipeline the settings describe: the sampler and the feature cache as specs, each from its
    own settings; `recorder` (a RunRecorder, or None) takes the stages' own scalars for TensorBoard;
    `attributes`: the graph's edge attributes the model takes (trainer/models/edges.py), or None;
    `sampler`: another sampler or spec than the settings' (task=link: its link batches)."""
    seed = settings.run.seed
    sampler = SamplerSpec.of(settings.sampler, seed, device) if sampler is None else sampler
    return LoaderParts(sampler, CacheSpec(settings.cache, seed),
                       torch.device(device), settings.pipeline, settings.trainer.largest_batch_ratio, recorder,
                       attributes)


def build_loader(settings: TrainingSettings, graph: Graph, plan: SeedPlan, device: torch.device,
                 recorder=None, model: torch.nn.Module | None = None, sampler=None) -> PipelineLoader:
    """The run's one batch source: a `PipelineLoader` of `plan`'s seeds over the pipeline the
    settings describe (in-process or a process pipeline), carrying the edge attributes `model`
    takes, started now, so that its start-up is no epoch's time. The loop iterates its `epoch(e)`;
    evaluation runs its other passes through it."""
    attributes = None if model is None else edge_spec(model, graph)
    return PipelineLoader(graph, loader_parts(settings, device, recorder, attributes, sampler), plan).start()


def build_batch_source(settings: TrainingSettings, graph: Graph, device: torch.device, recorder=None):
    """The pipeline's batch source alone, as the loader builds it (for the pipeline's own tests and
    benchmarks, which look at its processes and statistics)."""
    p = loader_parts(settings, device, recorder)
    return batch_source(graph, p.sampler, p.features, p.device, p.settings, p.batch_ratio, p.recorder)


def train(settings: TrainingSettings, ctx=None, model: torch.nn.Module | None = None,
          make_optimizer: Callable | None = None, loss: Callable | None = None) -> TrainResult:
    """Train with these settings (checked as they were built, at the entry point), alone or (with
    a `distributed.RankContext`) as one DDP rank. `model` replaces the one `settings.model`
    describes (it must follow the contract of `trainer.models`, `forward(x, layers)`: wrap it
    with `adapter.wrap_module`); `make_optimizer(parameters)` replaces Adam; `loss(out, y)` the
    default objective (trainer/loop/loss.py)."""
    run = start_run(settings, ctx or LocalContext(settings), model, make_optimizer)
    run.loss = loss or default_loss
    run.portable = portable_spec(run.model)
    try:
        run.train_degree = training_degree(settings.model.gcn_degrees, run.graph, run.model, run.ctx.device)
        for epoch in range(run.start_epoch, run.epochs + 1):
            if patience_ran_out(run):
                break
            record = train_one_epoch(run, epoch)
            if epoch % settings.trainer.eval_every == 0 or epoch == run.epochs:
                record.update(evaluate_splits(run, epoch))
            step_scheduler(run.scheduler, record, f"val_{run.metric}")
            end_epoch(run, record)
    finally:
        run.source.close()
    return finish_run(run)


def start_run(settings: TrainingSettings, ctx, model=None, make_optimizer=None) -> Run:
    """Check out_dir (before any data is read), then load the graph, build the model, the
    optimizer and its lr schedule, restore a checkpoint to resume from, and open the recorder and
    the batch source."""
    trainer = settings.trainer
    out_dir, state = open_out_dir(settings, ctx)
    precision = resolve_precision(trainer.precision, ctx.device)
    precision.apply()
    log.info("device %s, precision %s, output %s", ctx.device, precision.name, out_dir)
    link = LinkTask(settings, ctx.graph) if settings.task.name == "link" else None
    graph = ctx.graph if link is None else link.graph  # a rank trains on its own partition
    log.info("%r", graph)
    data = ctx.data_fingerprint()
    if state is not None:
        check_same_data(state.get("data"), data, checkpoint_path(out_dir))
    model = run_model(settings, graph, model, link).to(ctx.device)
    encoder = model if link is None else model.encoder
    inference = resolve_inference(trainer.inference, encoder, graph.num_nodes, trainer.layerwise_max_nodes)
    log_model_choices(encoder, trainer, inference, graph)
    if link is None:
        check_validation_nodes(trainer, ctx, graph)
    optimizer = (make_optimizer or partial(torch.optim.Adam, lr=trainer.lr,
                                           weight_decay=trainer.weight_decay))(model.parameters())
    scheduler = build_scheduler(trainer, optimizer)
    config = settings.to_dict()
    metric = "acc" if link is None else LINK_METRIC
    start_epoch, history, best = 1, [], no_best(metric)
    if state is not None:
        start_epoch, history, best = resume(state, model, optimizer, scheduler, config, out_dir)
        best = best_kept(best, out_dir, metric)
    recorder = ctx.recorder(out_dir, config, history)
    edges = edge_spec(model, graph)
    if edges:  # the console's start-up stays short: the line where the run reads some
        log.info("edge features: %s", ", ".join(edges.edge))
    plan = epoch_plan(settings, ctx, link)
    source = build_loader(settings, graph, plan, ctx.device, recorder, model,
                          None if link is None else link.sampler(ctx.device))
    return Run(settings, ctx, out_dir, graph, model, ctx.wrap(model), optimizer, scheduler, inference,
               recorder, source, precision, start_epoch, best, data=data, link=link, metric=metric)


def epoch_plan(settings: TrainingSettings, ctx, link) -> SeedPlan:
    """The context's (or the link task's) seed plan, cut to trainer.max_batches batches an epoch."""
    plan = ctx.seed_plan(settings.run.seed) if link is None else link.seed_plan(ctx, settings.run.seed)
    plan = limited(plan, settings.trainer.max_batches)
    if settings.trainer.max_batches is not None:
        log.info("trainer.max_batches=%d: %d of the epoch's batches", settings.trainer.max_batches, len(plan))
    return plan


def run_model(settings: TrainingSettings, graph: Graph, model, link) -> torch.nn.Module:
    """The model the settings describe (seeded by run.seed), or the one given; for task=link, as
    the encoder of a LinkModel whose output is model.hidden wide."""
    torch.manual_seed(settings.run.seed)
    if model is None and is_typed(graph):  # a typed graph's model: trainer/models/hetero.py
        model = typed_model(settings.model, graph, len(settings.sampler.fanouts),
                            None if link is None else settings.model.hidden)
    elif model is None:
        out_dim = int(graph.num_classes) if link is None else settings.model.hidden
        model = build_model(settings.model, graph.x.size(1), out_dim, len(settings.sampler.fanouts))
    else:
        log.info("model: the given %s (the model settings unused)", type(unwrapped(model)).__name__)
    return model if link is None else link.model(model)


def log_model_choices(model, trainer, inference: str, graph: Graph) -> None:
    """What the run makes of the model, said at start-up, in one line: its evaluation (and why
    `auto` is not layer-wise, where the model cannot be or the graph is too large) and whose
    dropout masks it draws."""
    asked = trainer.inference
    obstacle = layerwise_obstacle(model) if asked == "auto" else None
    dropout = ("conveyor's masks (model.fast_dropout)" if getattr(model, "fast_dropout", False)
               else "torch's F.dropout, as the model is written")
    if obstacle is not None:
        log.warning("evaluation: sampled, not layer-wise: %s; dropout: %s", obstacle, dropout)
    elif asked == "auto" and too_large_for_layerwise(graph.num_nodes, trainer.layerwise_max_nodes):
        log.info("evaluation: sampled, the %s val/test nodes' neighbourhoods at the training fanouts, not a "
                 "layer-wise pass: the graph's %s nodes are above trainer.layerwise_max_nodes=%s "
                 "(trainer.inference=layerwise asks for one); dropout: %s", f"{split_nodes(graph):,}",
                 f"{graph.num_nodes:,}", f"{trainer.layerwise_max_nodes:,}", dropout)
    else:
        log.info("evaluation: %s; dropout: %s", inference, dropout)


def split_nodes(graph: Graph) -> int:
    """The validation and test nodes, together."""
    return sum(0 if idx is None else idx.numel() for idx in (getattr(graph, "val_idx", None),
                                                              getattr(graph, "test_idx", None)))


def open_out_dir(settings: TrainingSettings, ctx) -> tuple:
    """Check run.out_dir and read the checkpoint to resume from, before any data is read; then
    (rank 0) open the run's log, with the checks' warnings in it, and sweep what killed runs left."""
    held = HeldRecords()
    try:
        out_dir, state = ctx.prepare_out_dir(settings)
        if ctx.is_main:
            setup_logging(out_dir)
    finally:
        held.replay()
    if ctx.is_main:
        sweep_leftovers()  # of runs killed before they could clean up
        if state is None and settings.run.resume:
            log.info("run.resume=true but %s has no checkpoint: starting from epoch 1", out_dir)
    return out_dir, state


def resume(state: dict, model, optimizer, scheduler, config: dict, out_dir) -> tuple[int, list, dict]:
    """Restore the checkpoint `state` into the model, the optimizer and the lr schedule, with the
    optimizer settings configured now (trainer/outputs/resume.py); the epoch to start from, the history
    and the best figures so far."""
    restore_weights(model, optimizer, state, out_dir)
    if scheduler is not None and "scheduler" in state:
        scheduler.load_state_dict(state["scheduler"])
    elif scheduler is not None:
        log.warning("the checkpoint holds no lr schedule state: %s starts afresh", config["trainer"]["lr_schedule"])
    apply_optimizer_settings(optimizer, state.get("config"), config)
    log.info("resuming after epoch %d", state["epoch"])
    return state["epoch"] + 1, state["history"], state["best"]


def best_kept(best: dict, out_dir: Path, metric: str) -> dict:
    """The checkpoint's best figures, if best.pt still holds that epoch's model; else (moved or
    deleted since) said, and the best counted afresh from here, so that nothing cites a lost file."""
    if best.get("epoch") is None or (Path(out_dir) / BEST).is_file():
        return best
    log.warning("%s is gone, so the best epoch so far (%d, val %s %s) has no model: the best epoch is "
                "counted afresh from this resume", Path(out_dir) / BEST, best["epoch"], metric,
                _fmt(best.get(f"val_{metric}")))
    return no_best(metric)


def check_validation_nodes(trainer, ctx, graph: Graph) -> None:
    """Early stopping and the plateau schedule watch the validation accuracy: refuse them, before
    the first epoch, on a graph without validation nodes (on any rank)."""
    uses = [f"trainer.patience={trainer.patience}"] if trainer.patience else []
    uses += ["trainer.lr_schedule=plateau"] if trainer.lr_schedule == "plateau" else []
    if not uses:
        return
    local = 0 if graph.val_idx is None else graph.val_idx.numel()
    if ctx.global_means([], local)[1] == 0:
        raise ConveyorError(f"{' and '.join(uses)} watch the validation accuracy, but the graph "
                            f"has no validation nodes (val_idx); give it some, or use "
                            f"trainer.patience=null and another trainer.lr_schedule.")


def train_one_epoch(run: Run, epoch: int) -> dict:
    """One pass over this epoch's training batches; the epoch's record (global over ranks)."""
    rseed = run.ctx.rank_seed(run.seed)  # each rank its own sampling and dropout streams
    torch.manual_seed(stream_seed(rseed, epoch, STREAM_MODEL))  # dropout replays on resume
    first_step = (epoch - 1) * len(run.source)

    def on_log(step, loss):  # the mean loss of the batches since the previous call
        run.recorder.scalar("batch/loss", loss, first_step + step)

    start = time.perf_counter()
    batches = run.source.epoch(epoch)
    progress = run.settings.trainer.progress and run.ctx.is_main
    common = (run.net, run.optimizer, batches, len(run.source), progress, f"epoch {epoch}/{run.epochs}", on_log,
              run.settings.trainer.log_every, run.precision.autocast)
    stats = (train_epoch(*common, run.loss, run.train_degree) if run.link is None
             else train_link_epoch(*common, degree=run.train_degree))
    seconds = time.perf_counter() - start
    stats = run.ctx.reduce_epoch(stats)  # loss and accuracy over all seeds, summed counts
    return {"epoch": epoch, "loss": stats["loss"], "train_acc": stats["train_acc"],
            "lr": run.optimizer.param_groups[0]["lr"],  # what the optimizer used
            "epoch_time_s": seconds, "batches": stats["batches"], "sample_s": stats["sample_s"],
            "gather_s": stats["gather_s"],
            "train_s": stats["train_s"], "sampled_edges": stats["sampled_edges"],
            "sampled_edges_per_s": stats["sampled_edges"] / max(stats["sample_s"], 1e-9),
            "throughput_seeds_per_s": stats["seeds"] / max(seconds, 1e-9), **stats["cache"],
            **_peak_memory(run.ctx.device)}


def evaluate_splits(run: Run, epoch: int) -> dict:
    """Validation and test accuracy and loss (over every rank's nodes), as trainer.inference says
    (trainer/loop/evaluation.py); keeps the best validation epoch."""
    start = time.perf_counter()
    figures = node_figures(run) if run.link is None else run.link.figures(
        run.model, run.ctx.device, run.precision.autocast, run.settings.trainer.progress and run.ctx.is_main)
    figures["eval_time_s"] = time.perf_counter() - start
    val, test = f"val_{run.metric}", f"test_{run.metric}"
    if val in figures and (run.best[val] is None or figures[val] > run.best[val]):
        run.best = {val: figures[val], test: figures.get(test), "epoch": epoch}
    return figures


def node_figures(run: Run) -> dict:
    """Validation's and test's accuracy and loss, over every rank's nodes."""
    figures = {}
    for split, (loss, acc, seen) in split_figures(run).items():
        (loss, acc), seen = run.ctx.global_means([loss, acc], seen)  # each rank evaluated its own nodes
        if seen:
            figures[f"{split}_acc"], figures[f"{split}_loss"] = acc, loss
    return figures


def patience_ran_out(run: Run) -> bool:
    """Early stopping: trainer.patience evaluations since the best validation accuracy, none of
    them better. Read from the history, so a resumed run counts the evaluations before it too
    (and one that had stopped stops again at once, unless given more patience)."""
    patience, best_epoch, val = run.settings.trainer.patience, run.best["epoch"], f"val_{run.metric}"
    if not patience or best_epoch is None:
        return False
    history = run.recorder.epochs
    since = sum(1 for e in history if val in e and e["epoch"] > best_epoch)
    if since < int(patience):
        return False
    run.stopped_epoch = history[-1]["epoch"]
    log.info("early stop after epoch %d: no better val %s in %d evaluations since epoch %d (%.4f)",
             run.stopped_epoch, run.metric, since, best_epoch, run.best[val])
    return True


def end_epoch(run: Run, record: dict) -> None:
    """Log the epoch, record it (metrics.json, TensorBoard) and checkpoint it: `best.pt` first
    when it is the best so far, so that `last.pt` never names a best epoch `best.pt` lacks."""
    m = run.metric
    log.info("epoch %d: loss %.4f train %.4f val %s test %s%s | %.2fs (sample %.2fs, gather %.2fs, "
             "train %.2fs)%s", record["epoch"], record["loss"], record["train_acc"],
             _fmt(record.get(f"val_{m}")), _fmt(record.get(f"test_{m}")), link_figures_said(run, record),
             record["epoch_time_s"], record["sample_s"], record["gather_s"], record["train_s"],
             f", eval {record['eval_time_s']:.2f}s" if "eval_time_s" in record else "")
    if "disk_ratio" in record:  # a host tier over features on disk (cache/host_tier.py)
        log.info("epoch %d feature rows: device %.1f%%, host %.1f%%, prefetched %.1f%%, read from disk %.1f%% "
                 "(%s read)", record["epoch"], *(100 * record[k] for k in (
                     "device_hit_ratio", "host_hit_ratio", "window_hit_ratio", "disk_ratio")),
                 gib(record["disk_bytes"]))
    run.recorder.epoch(record)
    if not run.ctx.is_main:
        return
    model = {"epoch": record["epoch"], "model": run.model.state_dict(), "config": run.recorder.config,
             "data": run.data, "conveyor": provenance(), "module": with_weights(run.portable, run.model)}
    if run.best["epoch"] == record["epoch"]:
        save_checkpoint(run.out_dir, {**model, "best": run.best}, BEST)
    scheduler = {} if run.scheduler is None else {"scheduler": run.scheduler.state_dict()}
    save_checkpoint(run.out_dir, {**model, "optimizer": run.optimizer.state_dict(),
                                  "history": run.recorder.epochs, "best": run.best, **scheduler})


def link_figures_said(run: Run, record: dict) -> str:
    """task=link: which figure the epoch line's val and test are, and Hits@K beside them."""
    if run.link is None:
        return ""
    hits = run.link.figure_names[1]
    if f"val_{hits}" not in record:
        return " (auc)"
    return f" (auc; {hits} val {_fmt(record['val_' + hits])} test {_fmt(record['test_' + hits])})"


def finish_run(run: Run) -> TrainResult:
    """The final figures, written to metrics.json; the result train() returns."""
    history, m = run.recorder.epochs, run.metric
    last = history[-1] if history else {}
    best = run.best
    final = {"epochs": len(history), f"test_{m}": last.get(f"test_{m}"), f"val_{m}": last.get(f"val_{m}"),
             "train_acc": last.get("train_acc"), "loss": last.get("loss"),
             f"best_val_{m}": best[f"val_{m}"], f"test_{m}_at_best_val": best[f"test_{m}"],
             "best_epoch": best["epoch"], "inference": run.inference,
             "stopped_early": run.stopped_epoch is not None, "stopped_epoch": run.stopped_epoch,
             "mean_epoch_time_s": sum(e["epoch_time_s"] for e in history) / max(len(history), 1),
             "wall_time_s": time.perf_counter() - run.started}
    if run.link is not None:  # the last evaluation's other figures (Hits@K, loss, accuracy)
        final.update({f"{split}_{name}": last.get(f"{split}_{name}") for split in ("val", "test")
                      for name in run.link.figure_names if f"{split}_{name}" not in final})
    run.recorder.write(final)
    run.recorder.hparams(final)
    run.recorder.close()
    if best["epoch"] is not None:
        log.info("done: test %s %s at the best val %s %s (epoch %d, %s); at the last evaluation "
                 "%s; metrics in %s", m, _fmt(best[f"test_{m}"]), m, _fmt(best[f"val_{m}"]), best["epoch"],
                 run.out_dir / BEST, _fmt(final[f"test_{m}"]), run.out_dir / "metrics.json")
    else:
        log.info("done: test %s %s (no validation split); metrics in %s", m, _fmt(final[f"test_{m}"]),
                 run.out_dir / "metrics.json")
    return TrainResult(run.model, list(history), final)


def _peak_memory(device: torch.device) -> dict:
    """This process's peak device allocation so far (CUDA), for the epoch's record. Not reset per
    epoch: the batch sources measure a training batch's memory from the same counter."""
    return {"peak_memory_bytes": torch.cuda.max_memory_allocated(device)} if device.type == "cuda" else {}


def _fmt(value) -> str:
    return "-" if value is None else f"{value:.4f}"
