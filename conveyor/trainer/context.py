"""Who this process trains as: alone (`LocalContext`) or as one rank of several (`RankContext`,
trainer/distributed/rank_context.py). Both have this interface, so `train()` has one code path; world size 1
runs the same steps as many, each rank-specific step being the identity here."""
from __future__ import annotations

from functools import cached_property
from typing import List

import torch

from conveyor.core.device import resolve_device, use_device
from conveyor.loader.seeds import EpochPlan
from conveyor.partition import Graph
from conveyor.trainer.early import configured_graph
from conveyor.trainer.outputs.checkpoint import prepare_out_dir
from conveyor.trainer.outputs.fingerprint import data_fingerprint
from conveyor.trainer.outputs.metrics import RunRecorder


class QuietRecorder:
    """The recorder of ranks other than 0: keeps the history, writes nothing."""

    def __init__(self, history):
        self.epochs = list(history or [])

    def scalar(self, tag, value, step) -> None:
        pass

    def epoch(self, record: dict) -> None:
        self.epochs.append(record)

    def write(self, final) -> None:
        pass

    def hparams(self, final) -> None:
        pass

    def close(self) -> None:
        pass


class LocalContext:
    """One process training on the whole graph."""
    rank, world_size = 0, 1

    def __init__(self, settings, graph: Graph | None = None):
        self.settings = settings
        self.device = use_device(resolve_device(settings.run.device))
        if graph is not None:  # handed over in Python (conveyor.fit): settings.data loads nothing
            self.graph = graph

    @property
    def is_main(self) -> bool:
        """The process that writes logs, metrics and checkpoints."""
        return self.rank == 0

    @cached_property
    def graph(self) -> Graph:
        return configured_graph(self.settings.data)  # on first use: after the out_dir checks (loaded early)

    def prepare_out_dir(self, settings):
        return prepare_out_dir(settings)

    def data_fingerprint(self) -> dict:
        return data_fingerprint(self.graph)

    def recorder(self, out_dir, config: dict, history):
        return RunRecorder(out_dir, config, history) if self.is_main else QuietRecorder(history)

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        return model

    def rank_seed(self, run_seed: int) -> int:
        return run_seed

    def seed_plan(self, run_seed: int) -> EpochPlan:
        """The training nodes, shuffled per epoch, in batches of trainer.batch_size."""
        return EpochPlan(self.graph.train_idx, self.settings.trainer.batch_size, run_seed)

    def reduce_epoch(self, stats: dict) -> dict:
        return stats

    def global_means(self, means: List[float], seen: int) -> tuple[List[float], int]:
        return list(means), seen
