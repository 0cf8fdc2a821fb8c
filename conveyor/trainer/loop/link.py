"""The link task's epoch and evaluation (trainer/link_task.py holds the rest of the task).

Training: each prepared batch is a link batch (samplers/link.py): its seed nodes' embeddings from
the encoder over the sampled hops, the scores of its links (the batch's extras: `edge_label_index`
in local ids, `edge_label` 1 for a training edge, 0 for a random negative), binary cross-entropy
with logits. As the node epoch (epoch.py), nothing is read from the device per batch: loss and
accuracy (a link predicted when its score is above 0) add up there (meter.py).

Evaluation: the encoder layer by layer over every in-neighbour (layerwise.py: exact embeddings)
of the links' endpoints, then the decoder; ROC-AUC (the probability that a random positive
scores above a random negative, ties counting half) and Hits@K (OGB's: the share of positives
scored above the K-th highest negative) over the split's positives and negatives.
"""
from __future__ import annotations

import math
import time
from contextlib import nullcontext

import torch
import torch.nn.functional as F
from torch import Tensor
from tqdm import tqdm

from conveyor.core import ConveyorError
from conveyor.trainer.loop.epoch import CostSum, non_finite_loss
from conveyor.trainer.loop.interrupts import raise_if_stop_requested
from conveyor.trainer.loop.layerwise import layerwise_logits
from conveyor.trainer.loop.meter import DeviceMeter
from conveyor.trainer.models.edges import batch_inputs


def train_link_epoch(model, optimizer, batches, total: int, progress: bool = True, desc: str = "train",
                     on_log=None, log_every: int = 50, autocast=nullcontext, degree=None) -> dict:
    """Train on the link batches `batches`, as epoch.train_epoch trains on node batches (its
    arguments; the loss is BCE on the batch's link labels)."""
    model.train()
    meter, costs, train_s = DeviceMeter(), CostSum(), 0.0
    bar = tqdm(batches, total=total, desc=desc, disable=None if progress else True, leave=False, dynamic_ncols=True)
    for step, pb in enumerate(bar):
        raise_if_stop_requested()
        t0 = time.perf_counter()
        labels = pb.batch.extras["edge_label"].float()
        with autocast():  # batch_inputs: degrees, edge inputs, and a typed encoder's n_id
            out = model(pb.x.float(), pb.batch.layers(), pb.batch.extras["edge_label_index"],
                        **batch_inputs(model, pb, degree))
            loss = F.binary_cross_entropy_with_logits(out.float(), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        meter.add(out.detach().view(-1, 1), labels.view(-1, 1), loss)  # one "row" per link
        train_s += time.perf_counter() - t0
        costs.add(pb, seeds=labels.numel())  # the links it scored, negatives included
        if (step + 1) % log_every == 0 or step + 1 == total:
            window_loss, _ = meter.read()
            if not math.isfinite(window_loss):
                raise ConveyorError(non_finite_loss(window_loss, desc, step, log_every, optimizer))
            bar.set_postfix(loss=f"{window_loss:.3f}")
            if on_log is not None:
                on_log(step, window_loss)
        del pb, out, loss
    loss, accuracy = meter.totals()
    return {"loss": loss, "train_acc": accuracy, "train_s": train_s, **costs.figures()}


@torch.no_grad()
def link_scores(model, graph, links: Tensor, batch_size: int, device, autocast=nullcontext, feature_dtype=None,
                plan=None, progress: bool = False) -> Tensor:
    """The scores (logits, on the host) of `links` ([2, P] global ids) from the encoder's exact
    embeddings over `graph` (layer by layer, every in-neighbour) and the decoder."""
    nodes, local = torch.unique(links, return_inverse=True)
    z = link_embeddings(model, graph, nodes, batch_size, device, autocast, feature_dtype, plan, progress)
    return model.score(z.to(device), local.to(device)).float().cpu()


@torch.no_grad()
def link_embeddings(model, graph, nodes: Tensor, batch_size: int, device, autocast=nullcontext, feature_dtype=None,
                    plan=None, progress: bool = False) -> Tensor:
    """The encoder's exact embeddings (on the host) of `nodes` (sorted global ids) over `graph`,
    the model left in eval mode for the decoder."""
    z = layerwise_logits(model.encoder, graph, nodes, batch_size, device, autocast, feature_dtype, plan, progress)
    model.eval()
    return z


def roc_auc(scores: Tensor, labels: Tensor) -> float:
    """The area under the ROC curve: the Mann-Whitney U statistic over the positives' average
    ranks (ties count half), as sklearn's roc_auc_score; nan without both classes."""
    positive = labels > 0.5
    n_pos, n_neg = int(positive.sum()), int((~positive).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    values, inverse, counts = torch.unique(scores.double(), return_inverse=True, return_counts=True)
    last = torch.cumsum(counts, 0).double()
    ranks = (last - (counts.double() - 1) / 2)[inverse]  # each tie group's average rank, from 1
    return float((ranks[positive].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def hits_at_k(scores: Tensor, labels: Tensor, k: int) -> float:
    """OGB's Hits@K: the share of positives scored strictly above the K-th highest negative
    (every positive, when there are fewer than K negatives)."""
    positive = labels > 0.5
    negatives = scores[~positive]
    if negatives.numel() < k:
        return 1.0
    kth = torch.topk(negatives, k).values[-1]
    return float((scores[positive] > kth).double().mean())


def link_figures(scores: Tensor, labels: Tensor, k: int) -> dict:
    """A split's figures by name: auc, hits@K, loss (mean BCE), acc (sign against label)."""
    return {"auc": roc_auc(scores, labels), f"hits@{k}": hits_at_k(scores, labels, k),
            "loss": float(F.binary_cross_entropy_with_logits(scores, labels)),
            "acc": float(((scores > 0) == (labels > 0.5)).double().mean())}
