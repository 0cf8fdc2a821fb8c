"""Which nodes a static cache keeps: every policy is a ranking, and a cache of k rows keeps the
first k nodes of it.

- degree (PaGraph): by out-degree, highest first. A node with many out-edges is an in-neighbour of
  many nodes, so uniform neighbour sampling draws it often. Ties go to the smaller id.
- random: a seeded random permutation, the baseline.
- optimal: by access count in a recorded trace of sampled batches, the best any static cache can do
  on that trace (PaGraph's "optimal" line). Offline, for benchmarks only.
- none: nothing is cached.
"""
from __future__ import annotations

from typing import Iterable, Optional

import torch
from torch import Tensor

from conveyor.core import ConveyorError
from conveyor.partition import Graph

POLICIES = ("degree", "random", "optimal", "none")


def rank_descending(score: Tensor) -> Tensor:
    """Node ids by score, highest first; stable, so equal scores keep ascending id order."""
    return torch.sort(score, descending=True, stable=True).indices


def degree_ranking(graph: Graph) -> Tensor:
    return rank_descending(graph.out_degree())


def random_ranking(num_nodes: int, seed: int) -> Tensor:
    return torch.randperm(num_nodes, generator=torch.Generator().manual_seed(int(seed)))


def trace_ranking(trace: Iterable, num_nodes: int) -> Tensor:
    """Rank by how often each node appears in the trace (a list of n_id tensors or batches)."""
    ids = [torch.as_tensor(getattr(t, "n_id", t)).reshape(-1).cpu().long() for t in trace]
    ids = torch.cat(ids) if ids else torch.empty(0, dtype=torch.long)
    check_ids(ids, num_nodes, "the optimal policy's trace")
    return rank_descending(torch.bincount(ids, minlength=num_nodes))


def check_ids(ids: Tensor, num_nodes: int, what: str) -> None:
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= num_nodes):
        raise ConveyorError(f"{what} holds node ids from {int(ids.min())} to {int(ids.max())}, but "
                            f"the graph has {num_nodes} nodes (ids 0..{num_nodes - 1}); was it "
                            f"recorded on another graph or partition?")


def check_ranking(ranking, num_nodes: int) -> Tensor:
    """A precomputed ranking (e.g. a partition's saved degree order): unique ids, best first.
    It may be shorter than the graph; nodes it leaves out are never cached."""
    ranking = torch.as_tensor(ranking)
    if ranking.dim() != 1 or ranking.dtype.is_floating_point or ranking.dtype == torch.bool:
        raise ConveyorError(f"ranking must be a 1-D tensor of node ids, best first; got shape "
                            f"{tuple(ranking.shape)} and dtype {ranking.dtype}.")
    ranking = ranking.cpu().long()
    check_ids(ranking, num_nodes, "ranking")
    if torch.unique(ranking).numel() != ranking.numel():
        raise ConveyorError("ranking lists some node ids more than once; each node may take only "
                            "one cache slot, so pass unique ids (best first).")
    return ranking


def policy_ranking(policy: str, graph: Graph, ranking=None, trace=None, seed: int = 0
                   ) -> Optional[Tensor]:
    """The node order a cache of this policy fills in (None for `none`)."""
    if policy not in POLICIES:
        raise ConveyorError(f"unknown cache policy {policy!r}; choose one of degree (PaGraph: "
                            f"highest out-degree first), random, none (or optimal, offline, for "
                            f"benchmarks), e.g. cache=degree.")
    if ranking is not None and policy != "degree":
        raise ConveyorError(f"ranking= replaces the degree order, so it needs policy 'degree', not "
                            f"{policy!r}.")
    if trace is not None and policy != "optimal":
        raise ConveyorError(f"trace= is only read by the optimal policy, not {policy!r}.")
    if policy == "none":
        return None
    if policy == "degree":
        return degree_ranking(graph) if ranking is None else check_ranking(ranking, graph.num_nodes)
    if policy == "random":
        return random_ranking(graph.num_nodes, seed)
    if trace is None:
        raise ConveyorError("the optimal policy ranks nodes by how often a recorded trace reads "
                            "them: pass trace=[n_id, ...] (the sampled batches of an epoch).")
    return trace_ranking(trace, graph.num_nodes)
