"""One training run: data, sampler, cache, model, the epoch loop, evaluation, logging, checkpoints."""
from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf

from partition import ConveyorError, Graph
from samplers import build_sampler, default_sampler_name

from .batches import (STREAM_EVAL, STREAM_MODEL, STREAM_SAMPLER, SerialBatches, epoch_seed_batches,
                      eval_seed_batches, stream_seed)
from .checkpoint import checkpoint_path, load_checkpoint, save_checkpoint
from .config import check_config, resolve_device, use_device
from .loop import evaluate, train_epoch
from .metrics import RunRecorder, setup_logging
from .leftovers import sweep_leftovers
from .models import build_model
from .outdir import lock_out_dir, owns_out_dir
from .resume import apply_optimizer_settings, check_resumable

log = logging.getLogger("conveyor")


def load_graph(cfg_data) -> Graph:
    from partition.datasets import load_configured
    return load_configured(cfg_data)


def build_cache_for(cfg, graph: Graph, device: torch.device):
    from cache import build_cache
    c = cfg.cache
    return build_cache(str(c.policy), graph, capacity=c.capacity, device=device,
                       dtype=c.get("dtype"), reserve=c.get("reserve", "1GiB"),
                       prefetch=c.get("prefetch", 0), seed=int(cfg.run.seed))


def build_batch_source(cfg, graph: Graph, device: torch.device, recorder=None):
    """The stage(s) that turn seeds into prepared batches: in-process or a process pipeline.
    `recorder` (a RunRecorder, or None) takes the stages' own scalars for TensorBoard."""
    sampler_name = str(cfg.sampler.name)
    if sampler_name == "auto":
        sampler_name = default_sampler_name(device)
    if cfg.pipeline.name == "async":
        from .pipeline import AsyncBatches
        return AsyncBatches(cfg, graph, device, sampler_name, recorder)
    sampler = build_sampler(sampler_name, graph, list(cfg.sampler.fanouts), device=device,
                            seed=int(cfg.run.seed), deterministic=bool(cfg.sampler.get("deterministic", True)))
    return SerialBatches(sampler, build_cache_for(cfg, graph, device), graph.y, device)


def prepare_out_dir(cfg) -> tuple[Path, dict | None]:
    """run.out_dir and, when resuming, its checkpoint, checked against `cfg`. Without
    run.resume the checkpoint is only looked for, never read."""
    out_dir = Path(cfg.run.out_dir)
    has_checkpoint = checkpoint_path(out_dir).exists()
    if has_checkpoint and not cfg.run.resume:
        raise ConveyorError(f"run.out_dir={out_dir} already holds a run with a checkpoint; pass "
                            f"run.resume=true to continue it, or choose another run.out_dir.")
    if not has_checkpoint:
        if cfg.run.resume:
            log.info("run.resume=true but %s has no checkpoint: starting from epoch 1", out_dir)
        return out_dir, None
    state = load_checkpoint(out_dir)
    check_resumable(state.get("config"), OmegaConf.to_container(cfg, resolve=True), out_dir)
    return out_dir, state


def train(cfg: DictConfig, ctx=None) -> dict:
    """Train as configured; return the `final` figures written to metrics.json.
    `ctx`: a `trainer.distributed.RankContext` when this process is one of several DDP ranks."""
    check_config(cfg)
    main = ctx is None or ctx.rank == 0  # only rank 0 writes logs, metrics and checkpoints
    device = use_device(ctx.device if ctx else resolve_device(cfg.run.device))
    out_dir, state = ctx.prepare_out_dir(cfg) if ctx else prepare_out_dir(cfg)
    if main:
        setup_logging(out_dir)
        sweep_leftovers()  # of runs killed before they could clean up
    seed, epochs = int(cfg.run.seed), int(cfg.trainer.epochs)
    rseed = ctx.rank_seed(seed) if ctx else seed  # each rank its own sampling and dropout streams
    log.info("device %s, output %s", device, out_dir)

    graph = ctx.graph if ctx else load_graph(cfg.data)  # a rank trains on its own partition
    log.info("%r", graph)
    torch.manual_seed(seed)
    model = build_model(cfg.model, graph.x.size(1), int(graph.num_classes),
                        len(cfg.sampler.fanouts)).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=float(cfg.trainer.lr),
                                 weight_decay=float(cfg.trainer.get("weight_decay", 0.0)))
    start_epoch, history, best = 1, [], {"val_acc": -1.0, "test_acc": None, "epoch": None}
    config = OmegaConf.to_container(cfg, resolve=True)
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        apply_optimizer_settings(optimizer, state.get("config"), config)
        start_epoch, history, best = state["epoch"] + 1, state["history"], state["best"]
        log.info("resuming after epoch %d", state["epoch"])
    net = ctx.wrap(model) if ctx else model  # DDP: gradients all-reduced in backward

    recorder = RunRecorder(out_dir, config, history) if main else ctx.quiet_recorder(history)
    source = build_batch_source(cfg, graph, device, recorder)
    eval_every = int(cfg.trainer.get("eval_every", 1))
    eval_bs, bs = int(cfg.trainer.eval_batch_size), int(cfg.trainer.batch_size)
    progress = bool(cfg.trainer.progress) and main
    run_start = time.perf_counter()
    try:
        for epoch in range(start_epoch, epochs + 1):
            torch.manual_seed(stream_seed(rseed, epoch, STREAM_MODEL))  # dropout replays on resume
            seed_batches = (ctx.seed_batches(seed, epoch) if ctx else
                            epoch_seed_batches(graph.train_idx, bs, seed, epoch))
            step0 = (epoch - 1) * len(seed_batches)

            def on_batch(step, loss, pb):
                recorder.scalar("batch/loss", loss, step0 + step)

            t0 = time.perf_counter()
            stats = train_epoch(net, optimizer,
                                source.run(seed_batches, stream_seed(rseed, epoch, STREAM_SAMPLER)),
                                len(seed_batches), progress, f"epoch {epoch}/{epochs}", on_batch)
            epoch_time = time.perf_counter() - t0
            if ctx:  # global figures: loss and accuracy over all seeds, summed counts
                stats = ctx.reduce_epoch(stats)
            record = {"epoch": epoch, "loss": stats["loss"], "train_acc": stats["train_acc"],
                      "lr": optimizer.param_groups[0]["lr"],  # what the optimizer used
                      "epoch_time_s": epoch_time, "sample_s": stats["sample_s"],
                      "gather_s": stats["gather_s"], "train_s": stats["train_s"],
                      "sampled_edges": stats["sampled_edges"],
                      "sampled_edges_per_s": stats["sampled_edges"] / max(stats["sample_s"], 1e-9),
                      "throughput_seeds_per_s": stats["seeds"] / max(epoch_time, 1e-9)}
            record.update(stats.get("cache", {}))
            if epoch % eval_every == 0 or epoch == epochs:
                t1 = time.perf_counter()
                eval_seed = stream_seed(seed, 0, STREAM_EVAL)  # the same subgraphs every epoch
                for split in ("val", "test"):
                    idx = getattr(graph, f"{split}_idx")
                    n = 0 if idx is None else idx.numel()
                    batches = eval_seed_batches(idx, eval_bs) if n else []
                    acc = evaluate(model, source.run(batches, eval_seed), len(batches)) if n else 0.0
                    if ctx:  # each rank evaluated the nodes it owns: count them all
                        acc, n = ctx.global_accuracy(acc, n)
                    if n:
                        record[f"{split}_acc"] = acc
                record["eval_time_s"] = time.perf_counter() - t1
                if record.get("val_acc", -1.0) > best["val_acc"]:
                    best = {"val_acc": record["val_acc"], "test_acc": record.get("test_acc"), "epoch": epoch}
            log.info("epoch %d: loss %.4f train %.4f val %s test %s | %.2fs (sample %.2fs, gather %.2fs, "
                     "train %.2fs)", epoch, record["loss"], record["train_acc"],
                     _fmt(record.get("val_acc")), _fmt(record.get("test_acc")), epoch_time,
                     record["sample_s"], record["gather_s"], record["train_s"])
            recorder.epoch(record)
            if main:
                save_checkpoint(out_dir, {"epoch": epoch, "model": model.state_dict(),
                                          "optimizer": optimizer.state_dict(), "history": recorder.epochs,
                                          "best": best, "config": config})
    finally:
        source.close()
    last = recorder.epochs[-1] if recorder.epochs else {}
    final = {"epochs": len(recorder.epochs), "test_acc": last.get("test_acc"),
             "val_acc": last.get("val_acc"), "train_acc": last.get("train_acc"),
             "loss": last.get("loss"),
             "best_val_acc": best["val_acc"] if best["epoch"] is not None else None,
             "test_acc_at_best_val": best["test_acc"], "best_epoch": best["epoch"],
             "mean_epoch_time_s": sum(e["epoch_time_s"] for e in recorder.epochs) / max(len(recorder.epochs), 1),
             "wall_time_s": time.perf_counter() - run_start}
    recorder.write(final)
    recorder.close()
    best_note = (f"best val {_fmt(best['val_acc'])} at epoch {best['epoch']}"
                 if best["epoch"] is not None else "no validation split")
    log.info("done: test acc %s (%s); metrics in %s", _fmt(final["test_acc"]), best_note,
             out_dir / "metrics.json")
    return final


def _fmt(value) -> str:
    return "-" if value is None else f"{value:.4f}"


def run(cfg: DictConfig):
    """What `launch.py` calls: one training run, or the side-by-side comparison (mode=compare)."""
    check_config(cfg)
    if owns_out_dir():  # taken already when launch.py started the run (a Hydra callback)
        lock_out_dir(cfg.run.out_dir)
    if cfg.mode == "compare":
        from .compare import compare
        return compare(cfg)
    if int(cfg.run.world_size) > 1 or int(os.environ.get("WORLD_SIZE", 1)) > 1:  # or torchrun's
        from .distributed import train_distributed
        return train_distributed(cfg)
    return train(cfg)
