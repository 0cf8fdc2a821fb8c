"""Recall@K of the link task: a recommender's figure, as PyG's `LinkPredRecall` and its
recommender_system.py example compute it.

For each source node of the split's positive links, every candidate destination (a typed graph's
nodes of the edge type's destination type; an untyped graph's every node) is scored from the exact
embeddings, the pairs already known (edges of the split's message-passing graph, which a
recommender would not recommend again) are left out, and the K best are its recommendations;
its recall is the share of its held-out positives among them. Recall@K is the mean over the
sources. Scores come from the run's decoder: a matrix product for `dot`, the decoder over every
pair, in chunks, for `mlp`.
"""
from __future__ import annotations

import torch
from torch import Tensor

PAIRS_PER_CHUNK = 1 << 20  # pairs scored at once (the mlp decoder holds hidden floats per pair)


def recall_at_k(sources: Tensor, top: Tensor, truth: Tensor) -> float:
    """The mean over `sources` ([S] ids) of the share of each one's true destinations (the
    pairs of `truth`, [2, P] ids) found among its row of `top` ([S, K] ids; -1: no pick)."""
    if sources.numel() == 0:
        return float("nan")
    width = int(torch.cat([truth.reshape(-1), top.reshape(-1), sources]).max()) + 1
    true_keys = torch.unique(truth[0] * width + truth[1])
    found = torch.isin(sources[:, None] * width + top, true_keys) & (top >= 0)
    per_source = torch.bincount(torch.searchsorted(sources, torch.unique(truth, dim=1)[0].contiguous()),
                                minlength=sources.numel())
    return float((found.sum(1).double() / per_source.clamp(min=1)).mean())


@torch.no_grad()
def top_destinations(model, z_src: Tensor, z_dst: Tensor, known: Tensor, k: int) -> Tensor:
    """[S, min(K, D)]: each source's K best-scored destinations (positions in `z_dst`), best
    first, leaving out the `known` pairs ([2, E]: source row, destination position); -1 where
    fewer than K are left."""
    k = min(k, z_dst.size(0))
    chunk = max(1, PAIRS_PER_CHUNK // max(z_dst.size(0), 1))
    picks = []
    for start in range(0, z_src.size(0), chunk):
        scores = pair_scores(model, z_src[start:start + chunk], z_dst).float()
        inside = (known[0] >= start) & (known[0] < start + scores.size(0))
        scores[known[0, inside] - start, known[1, inside]] = -torch.inf
        values, index = torch.topk(scores, k, dim=1)
        picks.append(torch.where(torch.isfinite(values), index, torch.full_like(index, -1)))
    return torch.cat(picks).cpu() if picks else torch.empty(0, k, dtype=torch.long)


def pair_scores(model, z_src: Tensor, z_dst: Tensor) -> Tensor:
    """[S, D] scores of every (source, destination) pair by the model's decoder."""
    if model.decoder is None:  # dot: one matrix product
        return z_src @ z_dst.t()
    rows, cols = z_src.size(0), z_dst.size(0)
    pairs = torch.stack([torch.arange(rows, device=z_src.device).repeat_interleave(cols),
                         rows + torch.arange(cols, device=z_src.device).repeat(rows)])
    return model.score(torch.cat([z_src, z_dst]), pairs).view(rows, cols)


@torch.no_grad()
def split_recall(model, z: Tensor, nodes: Tensor, links: Tensor, labels: Tensor, candidates: Tensor,
                 known: Tensor, k: int, device) -> float:
    """Recall@K of one split (module doc). `z`: the embeddings of `nodes` (sorted global ids,
    holding every link endpoint and every candidate); `candidates`: the destinations ranked
    (sorted ids); `known`: [2, E] the message-passing graph's pairs to leave out."""
    positives = links[:, labels > 0.5]
    sources = torch.unique(positives[0])
    known = known[:, torch.isin(known[0], sources) & torch.isin(known[1], candidates)]
    known = torch.stack([torch.searchsorted(sources, known[0]), torch.searchsorted(candidates, known[1])])
    rows = torch.searchsorted(nodes, torch.cat([sources, candidates]))
    picked = z[rows].to(device)
    top = top_destinations(model, picked[:sources.numel()], picked[sources.numel():], known.to(device), k)
    ids = torch.where(top >= 0, candidates[top.clamp(min=0)], top)
    return recall_at_k(sources, ids, positives)
