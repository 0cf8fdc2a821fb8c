"""Fanout -1 takes every in-neighbour, in every sampler (as PyG's and DGL's -1)."""
import pytest
import torch

from conveyor.samplers import build_sampler
from tests.helpers import power_law_graph


def in_edge_keys(graph, targets):
    """(destination * N + source) of every edge into `targets`, sorted."""
    deg = graph.in_degree()[targets]
    starts = graph.indptr[targets]
    offsets = torch.arange(int(deg.sum())) - torch.repeat_interleave(deg.cumsum(0) - deg, deg)
    sources = graph.indices.long()[torch.repeat_interleave(starts, deg) + offsets]
    return torch.sort(torch.repeat_interleave(targets, deg) * graph.num_nodes + sources).values


def assert_every_in_neighbour_taken(batch, graph, hops=None):
    """Hop h's edges are exactly every in-edge of every node reached within h-1 hops."""
    n_id, counts = batch.n_id.cpu().long(), batch.num_nodes_per_hop.tolist()
    for h in hops or range(1, batch.num_hops + 1):
        src, dst = batch.edge_index_per_hop[h - 1].cpu().long()
        got = torch.sort(n_id[dst] * graph.num_nodes + n_id[src]).values
        assert torch.equal(got, in_edge_keys(graph, n_id[: counts[h - 1]])), f"hop {h}"


def assert_same_batch(a, b):
    assert torch.equal(a.n_id, b.n_id) and torch.equal(a.num_nodes_per_hop, b.num_nodes_per_hop)
    for ea, eb in zip(a.edge_index_per_hop, b.edge_index_per_hop):
        assert torch.equal(ea, eb)


@pytest.mark.parametrize("name", ["bsp", "fused", "pyg"])  # fused: Triton's interpreter on CPU
def test_minus_one_takes_every_neighbour_on_cora(name, cora):
    seeds = cora.train_idx[:40]
    batch = build_sampler(name, cora, [-1, -1], seed=3).sample(seeds)
    assert_every_in_neighbour_taken(batch, cora)
    big = int(cora.in_degree().max())
    assert_same_batch(batch, build_sampler(name, cora, [big, big + 100], seed=3).sample(seeds))
    with pytest.raises(AssertionError):  # the check sees a fanout that leaves neighbours out
        assert_every_in_neighbour_taken(build_sampler(name, cora, [2, 2], seed=3).sample(seeds), cora)


@pytest.mark.parametrize("name", ["bsp", "fused"])
def test_minus_one_beside_a_fanout(name):
    """-1 at hops 1 and 3, 3 neighbours at hop 2: the same batch as the largest degree there."""
    graph = power_law_graph()
    seeds = torch.arange(0, graph.num_nodes, 37)
    batch = build_sampler(name, graph, [-1, 3, -1], seed=5).sample(seeds)
    assert_every_in_neighbour_taken(batch, graph, hops=[1, 3])
    big = int(graph.in_degree().max())
    assert_same_batch(batch, build_sampler(name, graph, [big, 3, big], seed=5).sample(seeds))


def test_the_config_takes_minus_one_and_refuses_other_negatives():
    from conveyor.core import ConveyorError
    from tests.helpers import make_config
    assert make_config("data=cora", "sampler.fanouts=[-1,10]").sampler.fanouts == [-1, 10]
    with pytest.raises(ConveyorError, match=r"or -1 for every neighbour"):
        make_config("data=cora", "sampler.fanouts=[-2,10]")
