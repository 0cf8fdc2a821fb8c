"""A run's validation and test figures, by `trainer.inference`: sampled subgraphs through the batch
source (the training fanouts, the same subgraphs every epoch), or layer-wise over every
in-neighbour (trainer/loop/layerwise.py). Both give, per split, this process's (mean loss, accuracy,
node count) over the nodes its graph holds: a rank's own, to be summed over the ranks."""
from __future__ import annotations

from typing import Dict, Tuple

import torch

from conveyor.cache.options import parse_dtype
from conveyor.loader.seeds import STREAM_EVAL, eval_seed_batches, stream_seed
from conveyor.trainer.loop.epoch import evaluate
from conveyor.trainer.loop.layerwise import layerwise_logits, runs_whole_layers
from conveyor.trainer.loop.loss import correct, targets
from conveyor.trainer.loop.plan import LayerwisePlan, PipelinePlan, WholeLayerPlan

SPLITS = ("val", "test")
Figures = Dict[str, Tuple[float, float, int]]  # split -> (mean loss, accuracy, nodes)


def split_figures(run) -> Figures:
    """(loss, accuracy, nodes) of each split, 0 nodes for a split this graph lacks."""
    nodes = {s: getattr(run.graph, f"{s}_idx") for s in SPLITS}
    present = {s: idx for s, idx in nodes.items() if idx is not None and idx.numel()}
    figures = {s: (0.0, 0.0, 0) for s in SPLITS}
    if present:
        how = layerwise_figures if run.inference == "layerwise" else sampled_figures
        figures.update(how(run, present))
    return figures


def sampled_figures(run, splits: dict) -> Figures:
    eval_seed = stream_seed(run.seed, 0, STREAM_EVAL)
    figures = {}
    for split, idx in splits.items():
        batches = eval_seed_batches(idx, run.settings.trainer.eval_batch_size)
        loss, acc = evaluate(run.model, run.source.run(batches, eval_seed, "eval"), len(batches),
                             run.settings.trainer.progress and run.ctx.is_main, f"eval {split}",
                             run.precision.autocast, loss_fn=run.loss, degree=run.train_degree)
        figures[split] = (loss, acc, idx.numel())
    return figures


def layerwise_figures(run, splits: dict) -> Figures:
    """One layer-wise pass for all splits' nodes together, with a progress bar: whole layers at once
    where the model can (serial or async: no batch goes through the stages), else its batches drawn
    and gathered by the async pipeline's processes, or, in serial, planned at the first pass and
    kept for the run (trainer/loop/plan.py)."""
    nodes, trainer = torch.cat(list(splits.values())), run.settings.trainer
    feature_dtype = parse_dtype(run.settings.cache.dtype, None)
    if run.eval_plan is None:
        args = (run.graph, nodes, run.model.num_layers, trainer.eval_batch_size)
        whole = runs_whole_layers(run.model, run.graph, run.ctx.device, run.precision.autocast, feature_dtype)
        run.eval_plan = (WholeLayerPlan(*args) if whole else PipelinePlan(run.source, *args)
                         if run.source.asynchronous else LayerwisePlan(*args))
    logits = layerwise_logits(run.model, run.graph, nodes, trainer.eval_batch_size, run.ctx.device,
                              run.precision.autocast, feature_dtype, run.eval_plan,
                              trainer.progress and run.ctx.is_main)
    figures = {}
    for (split, idx), out in zip(splits.items(), logits.split([i.numel() for i in splits.values()])):
        y = targets(run.graph.y[idx])
        figures[split] = (float(run.loss(out, y)), float(correct(out, y)) / idx.numel(), idx.numel())
    return figures
