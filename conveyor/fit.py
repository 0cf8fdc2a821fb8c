"""`fit()`: the command line's run, from Python, on a graph in memory.

It composes the same Hydra config as `launch.py` (conf/, with `data=memory`: the graph is the one
given, nothing is loaded) with the keyword arguments and `overrides` (the command line's
`KEY=VALUE` strings), builds and checks the same settings (conveyor/config.py), runs the command
line's checks of a dataset on the graph (conveyor/given.py), takes the `run.out_dir` lock
(trainer/outputs/outdir.py) and runs the same `trainer.run.train`.
"""
from __future__ import annotations

import dataclasses
import threading
from pathlib import PurePath
from typing import Callable, Optional, Sequence

import torch
from omegaconf import OmegaConf

from conveyor.compose import compose_config
from conveyor.config import settings_from_config
from conveyor.core import ConveyorError
from conveyor.given import (
    check_loss,
    check_model_argument,
    check_model_shapes,
    check_sizes,
    checked_graph,
    checked_link_graph,
)
from conveyor.partition.hetero import is_typed
from conveyor.pipeline.guard import check_main_guard, stop_if_reimported
from conveyor.trainer.context import LocalContext
from conveyor.trainer.models.adapter import wrap_module
from conveyor.trainer.models.hetero import wrap_typed
from conveyor.trainer.outputs.outdir import lock_out_dir, remove_if_refused
from conveyor.trainer.run import TrainResult, train
from conveyor.trainer.settings import TASKS

# fit()'s keyword arguments and the config keys they set.
ONE_RUN = threading.Lock()  # held by the fit() that is training (train_locked)
KEYWORDS = {"fanouts": "sampler.fanouts", "batch_size": "trainer.batch_size", "epochs": "trainer.epochs",
            "lr": "trainer.lr", "out_dir": "run.out_dir", "device": "run.device", "seed": "run.seed",
            "fast_dropout": "model.fast_dropout", "edge_type": "task.edge_type"}


def fit(graph, model=None, *, task: str = "node", loss: Optional[Callable] = None,
        optimizer: Optional[Callable] = None, overrides: Sequence[str] = (), **keywords) -> TrainResult:
    """Train on `graph` and return a `TrainResult` (`.model`, `.history`, `.final`).

    graph: a `conveyor.Graph` or a PyG `Data` (x, y, edge_index, train/val/test masks or ids); y
        holds class ids (-1: unlabelled, allowed in val/test only) or float [N, C] 0/1 targets. A
        PyG `HeteroData` trains its one node type with `y` (and its masks), with a typed model.
    model: None (`conf/model/sage.yaml`), a config option name (`"gcn"`, `"gat"`), or a module
        instance: a stock PyG model (any `BasicGNN`: GraphSAGE, GCN, GAT, GIN; run hop by hop),
        any module with `forward(x, edge_index)` (run on each batch's subgraph), or one with
        conveyor's `forward(x, layers)` (docs/design.md §5); on a HeteroData a `to_hetero(...)`'d model
        (run layer by layer) or `forward(x_dict, edge_index_dict)`. `result.model` is that instance.
    loss: `loss(out, y) -> scalar tensor` over the seeds; default cross-entropy on class ids,
        BCE-with-logits on float [N, C] targets (trainer/loop/loss.py).
    optimizer: `make(parameters) -> torch.optim.Optimizer`, e.g.
        `functools.partial(torch.optim.SGD, lr=0.1)`; default Adam with `trainer.lr`.
    task: "node" (node classification) or "link" (link prediction: the edges split as PyG's
        RandomLinkSplit, the model as the encoder of a dot-product decoder; `task.*` overrides;
        labels and node splits are not read; `loss` is not taken). On a HeteroData `edge_type`
        names the (src, rel, dst) to predict, split with its reverse (docs/usage.md).
    keywords: fanouts, batch_size, epochs, lr, out_dir, device, seed, fast_dropout, edge_type (see KEYWORDS).
        A given module runs as written: its dropouts draw F.dropout's masks unless
        `fast_dropout=True` asks for conveyor's faster ones (trainer/models/dropout.py).
    overrides: any other key as on the command line, e.g. `["pipeline=serial", "model.hidden=64"]`.
    """
    stop_if_reimported("conveyor.fit()")  # a stage process running an unguarded script again
    check_model_argument(model)
    check_loss(loss)
    check_task(task, loss)
    graph = checked_graph(graph) if task == "node" else checked_link_graph(graph)
    settings = fit_settings(model if isinstance(model, str) else None, [f"task={task}", *overrides], keywords)
    if settings.pipeline.choose(graph)[0] == "async":
        check_main_guard("conveyor.fit()", ())  # its stages get conveyor's specs: no script is run again
    given = model if isinstance(model, torch.nn.Module) else None
    if given is not None and task == "node":
        check_model_shapes(given, graph, settings.sampler.fanouts)
    check_sizes(graph, settings, given)  # before any allocation: never the OOM killer
    result = train_locked(settings, graph, None if given is None else wrap_given(given, graph, settings),
                          optimizer, loss)
    return result if given is None else dataclasses.replace(result, model=given)


def train_locked(settings, graph, model, optimizer, loss) -> TrainResult:
    """train() in run.out_dir, locked as the command takes it (one run per folder); a run refused
    before its first checkpoint leaves no folder behind, as the command's."""
    with ONE_RUN:  # a run sets torch's seeds, precision and the log: fit()s in threads run in turn
        lock_out_dir(settings.run.out_dir)
        try:
            return train(settings, LocalContext(settings, graph=graph), model=model, make_optimizer=optimizer,
                         loss=loss)
        except ConveyorError:
            remove_if_refused(settings.run.out_dir)
            raise


def check_task(task, loss) -> None:
    if task not in TASKS:
        raise ConveyorError(f"fit(task=...) is one of {', '.join(TASKS)}, got {task!r}.")
    if task == "link" and loss is not None:
        raise ConveyorError("fit(task='link') trains with binary cross-entropy on the links' scores; "
                            "loss= is for node classification: leave it out.")


def wrap_given(given: torch.nn.Module, graph, settings) -> torch.nn.Module:
    """The user's module with the trainer's contract: a typed graph's (to_hetero's, or one of
    forward(x_dict, edge_index_dict): trainer/models/hetero.py), or any other (models/adapter.py)."""
    if is_typed(graph):
        return wrap_typed(given, graph, settings.model.hidden)
    return wrap_module(given, fast_dropout=settings.model.uses_fast_dropout(given=True))


def fit_settings(option: Optional[str], overrides: Sequence[str], keywords: dict):
    """The run's settings: the config with `data=memory`, `model=option`, the overrides and the
    keywords, checked as the command line checks them."""
    cfg = compose_config(["data=memory", *([f"model={option}"] if option else []), *overrides])
    for key, value in keyword_values(keywords).items():
        OmegaConf.update(cfg, key, value, merge=False)
    settings = settings_from_config(cfg)
    if settings.data.name != "memory" or settings.mode != "train" or settings.run.world_size != 1:
        raise ConveyorError("fit() trains one process on the graph it is given: leave data=..., "
                            "mode=... and run.world_size out of its overrides (use the conveyor command for "
                            "datasets, mode=compare and data-parallel runs).")
    return settings


def keyword_values(keywords: dict) -> dict:
    """fit()'s keywords as the config keys they set (a path as its text)."""
    values = {}
    for name, value in keywords.items():
        if name not in KEYWORDS:
            raise ConveyorError(f"fit() has no keyword {name!r}; use one of {', '.join(KEYWORDS)}, or "
                                f"overrides=['KEY=VALUE'] for any other config key.")
        values[KEYWORDS[name]] = (list(value) if name in ("fanouts", "edge_type") and value is not None
                                  else str(value) if isinstance(value, PurePath) else value)
    return values
