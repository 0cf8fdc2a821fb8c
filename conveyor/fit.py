"""`fit()`: the command line's run, from Python, on a graph in memory.

It composes the same Hydra config as `launch.py` (conf/, with `data=memory`: the graph is the one
given, nothing is loaded) with the keyword arguments and `overrides` (the command line's
`KEY=VALUE` strings), builds and checks the same settings (conveyor/config.py) and runs the same
`trainer.run.train`.
"""
from __future__ import annotations

from pathlib import PurePath
from typing import Callable, Optional, Sequence

import torch
from omegaconf import OmegaConf

from conveyor.partition import ConveyorError, Graph
from conveyor.partition.datasets import check_trainable
from conveyor.trainer.context import LocalContext
from conveyor.trainer.run import TrainResult, train

from .compose import compose_config
from .config import settings_from_config

# fit()'s keyword arguments and the config keys they set.
KEYWORDS = {"fanouts": "sampler.fanouts", "batch_size": "trainer.batch_size", "epochs": "trainer.epochs",
            "lr": "trainer.lr", "out_dir": "run.out_dir", "device": "run.device", "seed": "run.seed"}


def fit(graph, model=None, *, optimizer: Optional[Callable] = None, overrides: Sequence[str] = (),
        **keywords) -> TrainResult:
    """Train on `graph` and return a `TrainResult` (`.model`, `.history`, `.final`).

    graph: a `conveyor.Graph` or a PyG `Data` (x, y, edge_index, train/val/test masks or ids).
    model: None (`conf/model/sage.yaml`), a config option name (`"gcn"`, `"gat"`), or your own
        `torch.nn.Module` with `forward(x, layers)` (docs/design.md, "Models"); with `num_layers`
        and `inference_per_layer(layer, x, edge_index, batch_size)` too, it is evaluated
        layer-wise over full neighbourhoods (`trainer.inference`), else sampled.
    optimizer: `make(parameters) -> torch.optim.Optimizer`, e.g.
        `functools.partial(torch.optim.SGD, lr=0.1)`; default Adam with `trainer.lr`.
    keywords: fanouts, batch_size, epochs, lr, out_dir, device, seed (see KEYWORDS).
    overrides: any other key as on the command line, e.g. `["pipeline=async", "model.hidden=64"]`.
    """
    graph = check_trainable(as_graph(graph), "given to fit()")
    named = model if model is None or isinstance(model, str) else None
    cfg = compose_config(["data=memory", *([f"model={named}"] if named else []), *overrides])
    for key, value in keyword_values(keywords).items():
        OmegaConf.update(cfg, key, value, merge=False)
    settings = settings_from_config(cfg)
    if settings.data.name != "memory" or settings.mode != "train" or settings.run.world_size != 1:
        raise ConveyorError("fit() trains one process on the graph it is given: leave data=..., "
                            "mode=... and run.world_size out of its overrides (use launch.py for "
                            "datasets, mode=compare and data-parallel runs).")
    given = model if isinstance(model, torch.nn.Module) else None
    return train(settings, LocalContext(settings, graph=graph), model=given, make_optimizer=optimizer)


def keyword_values(keywords: dict) -> dict:
    """fit()'s keywords as the config keys they set (a path as its text)."""
    values = {}
    for name, value in keywords.items():
        if name not in KEYWORDS:
            raise ConveyorError(f"fit() has no keyword {name!r}; use one of {', '.join(KEYWORDS)}, or "
                                f"overrides=['KEY=VALUE'] for any other config key.")
        values[KEYWORDS[name]] = (list(value) if name == "fanouts" else str(value) if isinstance(value, PurePath)
                                  else value)
    return values


def as_graph(graph) -> Graph:
    if isinstance(graph, Graph):
        return graph
    if hasattr(graph, "edge_index") or type(graph).__name__ in ("Data", "HeteroData"):
        return Graph.from_data(graph)
    raise ConveyorError(f"fit() trains on a conveyor.Graph or a PyG Data, got a "
                        f"{type(graph).__name__}; build one with Graph.from_edge_index(...) or "
                        f"torch_geometric.data.Data(x=..., y=..., edge_index=..., train_mask=...).")
