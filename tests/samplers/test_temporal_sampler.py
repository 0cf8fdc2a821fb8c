"""Temporal sampling as pyg-lib defines it (samplers/temporal.py, issue 49 item 2): each seed's own
subgraph, drawn only among in-edges not later than the seed's time (node- or edge-level), uniformly
or the latest ("last"); a typed graph's node types without time drawn freely; fused and pyg refuse
time by name before any work."""
import pytest
import torch

from conveyor.core import ConveyorError
from conveyor.partition import Graph
from conveyor.partition.hetero import typed_graph
from conveyor.samplers import check_temporal
from conveyor.samplers.temporal import TemporalSampler


def star(times, edge_level=False) -> Graph:
    """Node 0 with in-edges from nodes 1..n (node i's time times[i-1], or the edge's), and node 1
    with in-edges from every other node (a second hop)."""
    n = len(times)
    src = torch.cat([torch.arange(1, n + 1), torch.tensor([0, *range(2, n + 1)])])
    dst = torch.cat([torch.zeros(n, dtype=torch.long), torch.ones(n, dtype=torch.long)])
    time = torch.tensor(times)
    if edge_level:
        return Graph.from_edge_index(torch.stack([src, dst]), n + 1, dedup=False,
                                     edge_attrs={"t": torch.cat([time, time])})
    graph = Graph.from_edge_index(torch.stack([src, dst]), n + 1, dedup=False)
    graph.node_attrs = {"t": torch.cat([torch.tensor([100]), time])}
    return graph


def hop1(batch, seed_index=0):
    """The ids of seed `seed_index`'s first hop."""
    counts = batch.num_nodes_per_hop.tolist()
    new = torch.arange(counts[0], counts[1])
    return sorted(batch.n_id[new[batch.extras["batch"][new] == seed_index]].tolist())


@pytest.mark.parametrize("edge_level", [False, True])
def test_every_neighbour_not_later_than_the_seed_and_only_those(edge_level):
    times = [5, 1, 9, 3, 7, 3]  # of nodes (or edges from nodes) 1..6
    sampler = TemporalSampler(star(times, edge_level), [-1, -1], seed=0, time_attr="t")
    batch = sampler.sample_at(torch.tensor([0, 0, 0]), torch.tensor([3, 6, 0]))
    assert hop1(batch, 0) == [2, 4, 6] and hop1(batch, 1) == [1, 2, 4, 6] and hop1(batch, 2) == []
    assert batch.extras["batch"][:3].tolist() == [0, 1, 2]  # each seed its own subgraph
    if not edge_level:  # a seed's time defaults to its node's own (100): every neighbour
        assert hop1(sampler.sample(torch.tensor([0])), 0) == [1, 2, 3, 4, 5, 6]


def test_last_takes_the_latest_valid_neighbours():
    sampler = TemporalSampler(star([5, 1, 9, 3, 7, 3, 8]), [3], seed=0, time_attr="t", strategy="last")
    # valid at 7: nodes 1 (time 5), 2 (1), 4 (3), 5 (7), 6 (3); the latest three: 5, 1 and of the tie the later 6
    assert hop1(sampler.sample_at(torch.tensor([0]), torch.tensor([7]))) == [1, 5, 6]
    assert hop1(sampler.sample_at(torch.tensor([0]), torch.tensor([8]))) == [1, 5, 7]  # 9 is later: 8, 7, 5
    assert hop1(sampler.sample_at(torch.tensor([0]), torch.tensor([2]))) == [2]


def test_uniform_draws_each_valid_neighbour_equally_and_never_a_later_one():
    times = list(range(20))  # nodes 1..20 at times 0..19
    sampler = TemporalSampler(star(times), [4], seed=3, time_attr="t")
    counts = torch.zeros(22)
    for _ in range(2000):
        drawn = hop1(sampler.sample_at(torch.tensor([0]), torch.tensor([9])))
        assert len(drawn) == 4 and max(drawn) <= 10  # node i's time is i - 1
        counts[drawn] += 1
    share = counts[1:11] / 2000  # each of the 10 valid ones: 4 / 10
    assert float((share - 0.4).abs().max()) < 0.05 and counts[11:].sum() == 0


def test_the_same_seed_repeats_its_draws():
    a = TemporalSampler(star(list(range(20))), [3, 2], seed=7, time_attr="t")
    b = TemporalSampler(star(list(range(20))), [3, 2], seed=7, time_attr="t")
    seeds, times = torch.tensor([0, 1, 0]), torch.tensor([12, 15, 4])
    for _ in range(3):
        x, y = a.sample_at(seeds, times), b.sample_at(seeds, times)
        assert torch.equal(x.n_id, y.n_id) and all(torch.equal(p, q) for p, q in zip(x.edge_pos_per_hop,
                                                                                        y.edge_pos_per_hop))


def test_a_typed_graphs_untimed_node_type_is_drawn_freely():
    """PyG's single-link test, exactly: 'b' nodes at 0..9, 'c' at 1..10, seeds 'a' at 0..9 joined to
    the same-numbered b and c: each seed reaches its b (not later), never its c (later)."""
    ids = torch.arange(10).repeat(2, 1)
    graph = typed_graph({"a": 10, "b": 10, "c": 10}, {("b", "to", "a"): ids, ("c", "to", "a"): ids,
                                                     ("a", "to", "b"): ids},
                        node={("b", "t"): torch.arange(10), ("c", "t"): torch.arange(1, 11)})
    sampler = TemporalSampler(graph, [-1, -1], seed=0, time_attr="t")
    batch = sampler.sample_at(torch.arange(10), torch.arange(10))
    reached = batch.n_id[10:]
    assert sorted(reached[reached < 20].tolist()) == list(range(10, 20))  # every b, one per seed, never a c
    assert bool((batch.extras["batch"][10:] == reached - 10).all())
    back = batch.num_nodes_per_hop.tolist()
    assert back[2] - back[1] == 0  # a's time is unbounded, but each seed's own a is already in its subgraph


def test_time_is_refused_by_name_where_it_is_not_drawn():
    for name in ("fused", "pyg"):
        with pytest.raises(ConveyorError, match=f"drawn by sampler bsp.*got sampler {name}"):
            check_temporal("time", name, False, None)
    with pytest.raises(ConveyorError, match="replace=True"):
        check_temporal("time", "bsp", True, None)
    check_temporal(None, "fused", False, None)  # no time: nothing to refuse
    with pytest.raises(ConveyorError, match="neither a node-level nor an edge-level"):
        TemporalSampler(star([1, 2]), [1], time_attr="when")
    with pytest.raises(ConveyorError, match="edge-level temporal sampling needs each seed's time"):
        TemporalSampler(star([1, 2], edge_level=True), [1], time_attr="t").sample(torch.tensor([0]))
