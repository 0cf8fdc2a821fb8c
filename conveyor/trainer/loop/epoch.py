"""One training epoch and one evaluation pass over prepared batches.

Neither reads a device tensor per batch: loss and accuracy add up on the device (meter.py) and
come back every `log_every` batches (progress bar, TensorBoard's batch/loss) and once at the end.
"""
from __future__ import annotations

import math
import time
from contextlib import nullcontext

import torch
from tqdm import tqdm

from conveyor.core import ConveyorError
from conveyor.trainer.loop.interrupts import raise_if_stop_requested
from conveyor.trainer.loop.loss import default_loss, targets
from conveyor.trainer.loop.meter import DeviceMeter
from conveyor.trainer.models.edges import batch_inputs


def train_epoch(model, optimizer, batches, total: int, progress: bool = True, desc: str = "train",
                on_log=None, log_every: int = 50, autocast=nullcontext, loss_fn=default_loss,
                degree=None) -> dict:
    """Train on `batches`; every `log_every` batches and at the last (the `total`-th),
    `on_log(step, loss)` gets the mean loss of the batches since the previous call. Returns the
    epoch's figures. `autocast()`: the context of the forward pass and the loss (precision.py);
    `loss_fn(out, y)`: the objective (loss.py). `degree`: the whole graph's in-degrees, handed to
    the model by node (model.gcn_degrees=graph)."""
    model.train()
    meter, costs = DeviceMeter(), CostSum()
    train_s = 0.0
    bar = tqdm(batches, total=total, desc=desc, disable=None if progress else True, leave=False, dynamic_ncols=True)
    for step, pb in enumerate(bar):
        raise_if_stop_requested()
        t0 = time.perf_counter()
        with autocast():
            out = model(pb.x.float(), pb.batch.layers(), **batch_inputs(model, pb, degree))
            loss = loss_fn(out, targets(pb.y))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        meter.add(out, pb.y, loss)
        train_s += time.perf_counter() - t0  # on a GPU: time to queue the work, not to run it
        costs.add(pb)
        if (step + 1) % log_every == 0 or step + 1 == total:
            window_loss, _ = meter.read()
            if not math.isfinite(window_loss):  # before any checkpoint holds the weights it spoilt
                raise ConveyorError(non_finite_loss(window_loss, desc, step, log_every, optimizer))
            bar.set_postfix(loss=f"{window_loss:.3f}")
            if on_log is not None:
                on_log(step, window_loss)
        del pb, out, loss  # the batch's slots go back to the stages now, not after the next batch arrives
    loss, accuracy = meter.totals()  # no read unless batches came after the last
    return {"loss": loss, "train_acc": accuracy, "train_s": train_s, **costs.figures()}


def non_finite_loss(loss: float, desc: str, step: int, log_every: int, optimizer) -> str:
    first = step // log_every * log_every  # the window's first batch, 0-based
    return (f"the training loss became {loss} in {desc}, batches {first + 1}-{step + 1} (learning rate "
            f"{optimizer.param_groups[0]['lr']:g}): the weights diverged, so the run stops here and "
            f"its last checkpoint, written before this epoch, is kept as it was. Try a smaller "
            f"trainer.lr, trainer.precision=32 if it was bf16-mixed, or look for extreme values in "
            f"the features (data.normalize_features=true), in a fresh run (a resumed one takes the "
            f"checkpoint's optimizer, this learning rate included).")


TIERS = ("host_hits", "window_hits", "disk_rows", "disk_bytes")  # BatchCost's fields below the device


class CostSum:
    """The epoch's sum of the batches' BatchCosts and sizes (host numbers: no device reads)."""

    def __init__(self):
        self.batches = self.seeds = self.edges = 0
        self.sample_s = self.gather_s = 0.0
        self.hits = self.misses = self.host_bytes = 0
        self.tiers = dict.fromkeys(TIERS, 0)  # the host tier's counts (cache/host_tier.py)

    def add(self, pb, seeds: int | None = None) -> None:
        """One batch; `seeds`: what it trained on (None: its labelled seeds, `pb.y`)."""
        cost = pb.cost
        self.batches += 1
        self.seeds += pb.y.numel() if seeds is None else seeds
        self.edges += pb.batch.num_sampled_edges
        self.sample_s += cost.sample_s
        self.gather_s += cost.gather_s
        self.hits += cost.cache_hits
        self.misses += cost.cache_misses
        self.host_bytes += cost.bytes_from_host
        for key in TIERS:
            self.tiers[key] += getattr(cost, key)

    def figures(self) -> dict:
        return {"batches": self.batches, "sample_s": self.sample_s, "gather_s": self.gather_s,
                "sampled_edges": self.edges, "seeds": self.seeds,
                "cache": {"cache_hit_ratio": self.hits / max(self.hits + self.misses, 1),
                          "bytes_from_host": self.host_bytes, **self.tier_figures()}}

    def tier_figures(self) -> dict:
        """The share of the rows each tier served and the bytes read from disk, where a host tier
        served any (none: no keys, as before there were tiers)."""
        t = self.tiers
        below = t["host_hits"] + t["window_hits"] + t["disk_rows"]
        if not below:
            return {}
        rows = self.hits + self.misses
        return {"device_hit_ratio": self.hits / max(rows, 1), "host_hit_ratio": t["host_hits"] / max(rows, 1),
                "window_hit_ratio": t["window_hits"] / max(rows, 1), "disk_ratio": t["disk_rows"] / max(rows, 1),
                "disk_bytes": t["disk_bytes"]}


@torch.no_grad()
def evaluate(model, batches, total: int, progress: bool = False, desc: str = "eval",
             autocast=nullcontext, loss_fn=default_loss, degree=None) -> tuple[float, float]:
    """(mean loss, accuracy) over `batches`, read from the device once, at the end; `degree`: as
    train_epoch's."""
    model.eval()
    meter = DeviceMeter()
    for pb in tqdm(batches, total=total, desc=desc, disable=None if progress else True, leave=False):
        raise_if_stop_requested()
        with autocast():
            out = model(pb.x.float(), pb.batch.layers(), **batch_inputs(model, pb, degree))
            loss = loss_fn(out, targets(pb.y))
        meter.add(out, pb.y, loss)
        del pb, out, loss
    return meter.totals()
