"""A sampler's statistics: neighbour counts over many draws, weighted cases, bad seeds (tests/samplers/)."""
from __future__ import annotations

import pytest
import torch

from conveyor.partition import Graph
from conveyor.samplers import SampledBatch
from tests.helpers.common import complete_in_graph


def neighbour_counts(sample_fn, graph: Graph, node: int, fanout: int, draws: int) -> torch.Tensor:
    """How often each in-neighbour of `node` is drawn at hop 1 over `draws` independent batches."""
    nbrs = graph.indices[graph.indptr[node]: graph.indptr[node + 1]].long()
    counts = torch.zeros(graph.num_nodes, dtype=torch.long)
    for _ in range(draws):
        batch = sample_fn(torch.tensor([node]))
        src = batch.edge_index_per_hop[0][0].cpu().long()
        counts.index_add_(0, batch.n_id.cpu().long()[src], torch.ones_like(src))
    return counts[nbrs]


def fan_rank_counts(batch: SampledBatch, degree: int, hop: int = 1) -> torch.Tensor:
    """On `complete_in_graph(degree, copies)`: how often each neighbour rank (0..degree-1) was drawn
    at `hop` by the fan centres, summed over the copies."""
    n_id = batch.n_id.cpu().long()
    src, dst = batch.edge_index_per_hop[hop - 1].cpu().long()
    centre = n_id[dst]
    keep = centre % (degree + 1) == 0
    rank = n_id[src[keep]] - centre[keep] - 1
    return torch.bincount(rank, minlength=degree)


BAD_SEEDS = [
    (torch.tensor([1, 2, 2]), "unique"),
    (torch.tensor([1, 400]), "0..299"),
    (torch.tensor([-1, 2]), "0..299"),
    (torch.tensor([[1, 2]]), "1-D"),
    (torch.tensor([1.0, 2.0]), "integer"),
]


def fused_state_is_clean(sampler) -> bool:
    """After a fused launch no node carries a mark and the task queue is empty: the next launch
    starts clean."""
    from conveyor.samplers import fused_kernel  # only once the test module has chosen the interpreter or not
    return bool((sampler._buf["state"] == fused_kernel.EMPTY.value).all() and (sampler._buf["queue"] == -1).all())


def multigraph(num_nodes=40, num_edges=600, seed=0, zero_weights=0.2) -> Graph:
    """A random graph that keeps its parallel edges (dedup=False, as conveyor.NeighborLoader builds
    PyG's graphs): ~600 edges over 1600 node pairs, so many pairs are joined more than once. Its
    edges carry "w", random weights of which about `zero_weights` are 0."""
    g = torch.Generator().manual_seed(seed)
    graph = Graph.from_edge_index(torch.randint(0, num_nodes, (2, num_edges), generator=g), num_nodes, dedup=False)
    weights = torch.rand(num_edges, generator=g)
    graph.edge_attrs["w"] = torch.where(torch.rand(num_edges, generator=g) < zero_weights, 0.0, weights)
    return graph


def assert_edge_positions(batch: SampledBatch, graph: Graph) -> None:
    """Each sampled edge's CSC position holds its neighbour (`graph.indices[pos] == n_id[src]`),
    lies in its target's CSC row, and no edge is drawn twice (parallel edges are separate edges)."""
    assert batch.edge_pos_per_hop is not None and len(batch.edge_pos_per_hop) == batch.num_hops
    for (src, dst), pos in zip(batch.edge_index_per_hop, batch.edge_pos_per_hop, strict=True):
        src, dst, pos = src.cpu(), dst.cpu(), pos.cpu()
        assert pos.dtype == torch.long and pos.shape == src.shape
        assert torch.equal(graph.indices[pos].long(), batch.n_id.cpu()[src])
        target = batch.n_id.cpu()[dst]
        assert bool(((graph.indptr[target] <= pos) & (pos < graph.indptr[target + 1])).all())
        assert torch.unique(pos).numel() == pos.numel()


def weighted_fans(weights, copies=1) -> Graph:
    """`complete_in_graph(len(weights), copies)` whose edges carry "w": the neighbour of rank r of
    every fan weighs weights[r] (a centre's CSC row holds its neighbours in rank order)."""
    graph = complete_in_graph(len(weights), copies)
    graph.edge_attrs["w"] = torch.tensor(weights, dtype=torch.float64).repeat(copies)
    return graph


def drawn_subsets(batches, ranks: int, hops=(1,)) -> torch.Tensor:
    """On `weighted_fans`: how often each set of neighbour ranks (as a bit mask, rank r = bit r)
    was what a fan centre drew at one of `hops`, over the batches: [2**ranks] counts. Only ranks
    below `ranks` may be drawn (an AssertionError otherwise)."""
    counts = torch.zeros(2**ranks, dtype=torch.long)
    for batch in batches:
        n_id = batch.n_id.cpu().long()
        for hop in hops:
            src, dst = batch.edge_index_per_hop[hop - 1].cpu().long()
            centre, rank = n_id[dst], n_id[src] - n_id[dst] - 1
            assert not rank.numel() or int(rank.max()) < ranks, f"rank {int(rank.max())} drawn"
            mask = torch.zeros(n_id.max() + 1, dtype=torch.long).index_add_(0, centre, 2**rank)
            counts += torch.bincount(mask[centre.unique()], minlength=2**ranks)
    return counts


def successive_sampling(weights, k: int) -> torch.Tensor:
    """The exact probability of each set of k ranks (bit masks, as `drawn_subsets`) under PyG's
    weighted draw without replacement: each pick in proportion to the weight among those left,
    uniformly among the zero-weight ones once no positive weight is left. By enumeration."""
    probabilities = torch.zeros(2 ** len(weights), dtype=torch.float64)

    def walk(mask: int, probability: float, left: int) -> None:
        if left == 0:
            probabilities[mask] += probability
            return
        rest = [i for i in range(len(weights)) if not mask >> i & 1]
        total = sum(weights[i] for i in rest)
        for i in rest:
            share = weights[i] / total if total > 0 else 1 / len(rest)
            if share:
                walk(mask | 1 << i, probability * share, left - 1)

    walk(0, 1.0, k)
    return probabilities


def assert_drawn_as(counts: torch.Tensor, probabilities: torch.Tensor) -> None:
    """Observed subset counts against exact probabilities: never a subset of probability 0 (a
    zero weight drawn while positive ones were left), and a chi-square fit (fixed seeds: the
    verdict repeats) with p > 1e-3."""
    from scipy import stats
    possible = probabilities > 0
    assert int(counts[~possible].sum()) == 0, counts.nonzero().squeeze(1).tolist()
    if int(possible.sum()) == 1:  # one possible set (every neighbour taken): nothing to fit
        return
    expected = probabilities[possible] * counts.sum() / probabilities[possible].sum()
    p = stats.chisquare(counts[possible].double().numpy(), expected.numpy()).pvalue
    assert p > 1e-3, (counts[possible].tolist(), expected.tolist(), p)


WEIGHTED_CASES = [  # (the weights of a fan's neighbours by rank, the fanout), for `weighted_fans`
    pytest.param([1.0, 2.0, 3.0, 0.0, 4.0, 10.0], 1, id="one pick in proportion to the weight"),
    pytest.param([1.0, 2.0, 3.0, 0.0, 4.0, 10.0], 3, id="three of six, a zero weight never drawn"),
    pytest.param([5.0, 0.0, 1.0, 0.0, 0.0], 4, id="zero weights fill the draw up, uniformly"),
    pytest.param([1e-300, 3e-300, 0.0], 1, id="tiny weights keep their ratio"),
    pytest.param([0.0, 1.0, 0.0], 3, id="a row no longer than the fanout is taken whole"),
]
BAD_WEIGHTS = [  # (the graph's edge attributes for E edges, words of the refusal of weight_attr="w")
    (lambda E: {}, "names no edge attribute"),
    (lambda E: {"w": torch.ones(5)}, "shape (5,)"),
    (lambda E: {"w": torch.ones(E, 1)}, ", 1)"),
    (lambda E: {"w": torch.ones(E, dtype=torch.bool)}, "not real numbers"),
    (lambda E: {"w": torch.ones(E).index_fill_(0, torch.tensor([7]), -1.0)}, "at edge 7"),
    (lambda E: {"w": torch.ones(E).index_fill_(0, torch.tensor([3]), float("nan"))}, "NaN"),
    (lambda E: {"w": torch.ones(E).index_fill_(0, torch.tensor([3]), float("inf"))}, "infinite"),
]
