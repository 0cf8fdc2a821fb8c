"""One rank's answers to who it trains as (`RankContext`, the interface of trainer/context.py's
`LocalContext`): its part of the graph, its seeds and streams, DDP wrapping, and the reductions that
make rank 0 report global figures. trainer/distributed/ranks.py starts the ranks."""
from __future__ import annotations

import copy
import logging
import math
from dataclasses import dataclass, field
from typing import List, Optional

import torch
import torch.distributed as dist
from torch import Tensor
from torch.nn.parallel import DistributedDataParallel

from conveyor.core import ConveyorError
from conveyor.core.errors import ProcessDied
from conveyor.loader.seeds import EqualPlan
from conveyor.partition import Graph
from conveyor.trainer.context import QuietRecorder
from conveyor.trainer.outputs.checkpoint import prepare_out_dir
from conveyor.trainer.outputs.fingerprint import data_fingerprint
from conveyor.trainer.outputs.metrics import RunRecorder

log = logging.getLogger("conveyor")



class RankFailed(RuntimeError):
    """One rank of a data-parallel run failed; the others were stopped."""


class RankDied(RankFailed, ProcessDied):
    """One rank was killed, or exited without a note: the message says all there is."""


# -- what a rank trains on ----------------------------------------------------------------------

def rank_seed(run_seed: int, rank: int) -> int:
    """Rank `rank`'s own random streams (shuffle, sampling, dropout); rank 0 keeps the run seed."""
    return (int(run_seed) + 0x9E3779B97F4A7C15 * int(rank)) % (2**62)


def num_batches_per_epoch(train_counts: List[int], batch_size: int) -> int:
    """Batches every rank runs per epoch: enough for the largest partition at `batch_size`."""
    n = math.ceil(max(train_counts) / batch_size)
    if min(train_counts) < n:
        raise ConveyorError(
            f"the partitions' training-node counts {train_counts} are too uneven for "
            f"trainer.batch_size={batch_size}: every rank must run {n} batches per epoch but one "
            f"has only {min(train_counts)} training nodes; use fewer ranks (run.world_size) or a "
            f"larger batch size.")
    return n


def rank_seed_batches(train_idx: Tensor, num_batches: int, run_seed: int, epoch: int,
                      rank: int) -> List[Tensor]:
    """This rank's training nodes shuffled for `epoch`, cut into exactly `num_batches` batches
    (sizes differ by at most one), so that every rank steps the optimizer equally often."""
    return [train_idx[p] for p in EqualPlan(train_idx, num_batches, rank_seed(run_seed, rank)).positions(epoch)]


# -- one rank ------------------------------------------------------------------------------------

# Per-epoch figures that add up over ranks, and those that are means over the seeds trained;
# any other number (stage times, hit ratios) is averaged over the ranks.
SUMMED = ("seeds", "sampled_edges", "bytes_from_host", "hits", "misses", "disk_bytes")
PER_SEED = ("loss", "train_acc")


@dataclass
class RankContext:
    """What `train()` needs to know when it runs as one rank of `world_size`: the interface of
    trainer/distributed/context.py's LocalContext, answered for one rank of a DDP group."""
    rank: int
    world_size: int
    device: torch.device
    graph: Graph  # this rank's partition, in local ids
    node_ids: Tensor  # global id of each local node
    num_batches: int  # training batches per epoch, the same on every rank
    whole: dict = field(default_factory=dict)  # the partitioning's header: the whole graph's shapes and digest
    ddp: Optional[DistributedDataParallel] = None

    def data_fingerprint(self) -> dict:
        """The whole graph's, the same on every rank (trainer/outputs/fingerprint.py)."""
        return data_fingerprint(self.graph, self.whole)

    @property
    def is_main(self) -> bool:
        """Rank 0: the one that writes logs, metrics and checkpoints."""
        return self.rank == 0

    def wrap(self, model):
        """DDP over `model` (rank 0's initial weights are broadcast to every rank)."""
        ids = [self.device.index] if self.device.type == "cuda" else None
        self.ddp = DistributedDataParallel(model, device_ids=ids)
        return self.ddp

    def rank_seed(self, run_seed: int) -> int:
        return rank_seed(run_seed, self.rank)

    def seed_plan(self, run_seed: int) -> EqualPlan:
        """This rank's training nodes in the batches every rank has as many of."""
        return EqualPlan(self.graph.train_idx, self.num_batches, self.rank_seed(run_seed))

    def prepare_out_dir(self, settings):
        """Rank 0 checks run.out_dir and reads the checkpoint; every rank resumes from it."""
        payload = [None]
        if self.rank == 0:
            try:
                payload = [prepare_out_dir(settings)]
            except ConveyorError as error:
                payload = [error]
        dist.broadcast_object_list(payload, src=0)  # on the current CUDA device under NCCL
        if isinstance(payload[0], ConveyorError):
            raise payload[0]
        return payload[0]

    def recorder(self, out_dir, config: dict, history):
        return RunRecorder(out_dir, config, history) if self.is_main else QuietRecorder(history)

    def reduce_epoch(self, stats: dict) -> dict:
        """One epoch's figures over all ranks: summed counts, per-seed means, mean times."""
        leaves = sorted(_numeric_leaves(stats))
        seeds = stats["seeds"]
        totals = self.all_reduce([v * seeds if path[-1] in PER_SEED else v for path, v in leaves])
        all_seeds = max(totals[[path for path, _ in leaves].index(("seeds",))], 1.0)
        out = copy.deepcopy(stats)
        for (path, local), total in zip(leaves, totals):
            key = path[-1]
            value = (total if key in SUMMED else total / all_seeds if key in PER_SEED
                     else total / self.world_size)
            _set_leaf(out, path, round(value) if isinstance(local, int) else value)
        return out

    def global_means(self, means: List[float], seen: int) -> tuple[List[float], int]:
        """Means (accuracy, loss) over every rank's evaluated nodes, from this rank's means over
        its `seen` nodes; and the total node count."""
        *sums, total = self.all_reduce([m * seen for m in means] + [seen])
        return [s / max(total, 1.0) for s in sums], int(total)

    def all_reduce(self, values: List[float]) -> List[float]:
        """Element-wise sums over the ranks (float64: counts stay exact up to 2**53)."""
        on = self.device if dist.get_backend() == "nccl" else torch.device("cpu")
        tensor = torch.tensor(values, dtype=torch.float64, device=on)
        dist.all_reduce(tensor)
        return tensor.tolist()


def _numeric_leaves(stats: dict, prefix=()):
    for key, value in stats.items():
        if isinstance(value, dict):
            yield from _numeric_leaves(value, prefix + (key,))
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            yield prefix + (key,), value


def _set_leaf(tree: dict, path: tuple, value) -> None:
    for key in path[:-1]:
        tree = tree[key]
    tree[path[-1]] = value
