"""`weight_attr`: biased neighbour sampling as PyG defines it (pyg-lib's `neighbor_sample` with an
`edge_weight`), for every sampler.

A node with at most `fanout` in-neighbours takes them all, whatever their weights (as PyG does).
A node with more draws `fanout` distinct edges, successively, each with probability proportional to
its weight among those not drawn yet (sampling without replacement, "successive sampling").
pyg-lib draws this with Efraimidis and Spirakis' keys (the top `fanout` of log(u) / w, u uniform);
conveyor with the same keys in a range-safe form: edge i gets

    key_i = log(E_i) - log(w_i / w_max),   E_i = -log(u_i) ~ Exp(1),

and the `fanout` *smallest* keys win. -log(w_i / w_max) is the edge's `weight_keys` entry,
computed once per graph. key_i orders edges as E_i / w_i does, and the edge with the smallest
E_i / w_i among any set is edge i with probability w_i / sum(w) (the minimum of independent
exponential clocks of rates w_i), which taken step by step is successive sampling.

Zero weights. pyg-lib's key is -inf for a zero weight, so such an edge is drawn only when the node
has fewer than `fanout` edges of positive weight, to fill the draw up (which ones topk's ties
decide). conveyor does the same and makes the tie-break uniform: a zero weight's key is
ZERO_WEIGHT_KEY + log(E_i), above every positive weight's key, so zero-weight edges come after all
others, in a uniformly random order among themselves (the limit of equal weights going to 0).

Weights must be finite and >= 0 (a ConveyorError otherwise, before any sampling, as PyG leaves
NaN or negative weights undefined); their scale does not matter.
"""
from __future__ import annotations

import torch
from torch import Tensor

from conveyor.core import ConveyorError

# Above every positive weight's key, by a margin wider than log(E) spans: -log(w / w_max) <= 1455
# for float64 weights (the smallest subnormal against the largest float), and the samplers keep
# log(E) within [-40, 4].
ZERO_WEIGHT_KEY = 4096.0


def edge_weights(graph, weight_attr) -> Tensor | None:
    """The weights `weight_attr` names among the graph's edge attributes (CSC order) as float64,
    or None for uniform sampling; a ConveyorError naming the fix for anything a sampler cannot
    draw by."""
    if weight_attr is None:
        return None
    if not isinstance(weight_attr, str) or weight_attr not in graph.edge_attrs:
        names = ", ".join(sorted(graph.edge_attrs)) or "none"
        raise ConveyorError(
            f"weight_attr={weight_attr!r} names no edge attribute of the graph (its edge attributes: "
            f"{names}); pass the name of a [num_edges] tensor of non-negative edge weights the Data holds "
            f"(e.g. weight_attr='edge_weight'), or weight_attr=None to draw neighbours uniformly.")
    weights = graph.edge_attrs[weight_attr]
    fix = (f"give weight_attr={weight_attr!r} one finite weight >= 0 per edge, a float tensor of shape "
           f"[{graph.num_edges}] (e.g. edge_weight.clamp(min=0), or a [E, 1] tensor's .view(-1)), or "
           f"weight_attr=None to draw neighbours uniformly")
    if not isinstance(weights, Tensor) or weights.dtype == torch.bool or weights.is_complex():
        kind = weights.dtype if isinstance(weights, Tensor) else type(weights).__name__
        raise ConveyorError(f"the edge weights {weight_attr!r} are {kind}, not real numbers: {fix}.")
    if tuple(weights.shape) != (graph.num_edges,):
        raise ConveyorError(f"the edge weights {weight_attr!r} have shape {tuple(weights.shape)} for a graph "
                            f"of {graph.num_edges} edges: {fix}.")
    weights = weights.double()
    bad = ~torch.isfinite(weights) | (weights < 0)
    if bool(bad.any()):
        first = int(bad.nonzero()[0])
        raise ConveyorError(f"the edge weights {weight_attr!r} hold {int(bad.sum())} negative, NaN or "
                            f"infinite values (the first, {float(weights[first])}, at edge {first}): {fix}.")
    return weights


def weight_keys(weights: Tensor, dtype=torch.float64) -> Tensor:
    """Each edge's part of its sampling key: -log(w / w_max) >= 0 for a positive weight,
    ZERO_WEIGHT_KEY for a zero weight (see the module's docstring)."""
    top = weights.max() if weights.numel() else weights.new_tensor(1.0)
    # log(w_max) - log(w), not -log(w / w_max): the quotient of two extreme weights may underflow.
    keys = torch.log(top) - torch.log(weights)
    return torch.where(weights > 0, keys, torch.full_like(keys, ZERO_WEIGHT_KEY)).to(dtype)
