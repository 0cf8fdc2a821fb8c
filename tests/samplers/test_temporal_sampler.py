"""Temporal sampling as pyg-lib defines it (samplers/temporal.py, issue 49 item 2): each seed's own
subgraph, drawn only among in-edges not later than the seed's time (node- or edge-level), uniformly
or the latest ("last"); a typed graph's node types without time drawn freely; fused and pyg refuse
time by name before any work."""
import pytest
import torch

from conveyor.core import ConveyorError
from conveyor.partition import Graph
from conveyor.partition.hetero import typed_graph
from conveyor.samplers import sampler_entry
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
    for name in ("fused", "pyg"):  # asked of the registry's entry, as every door asks it
        with pytest.raises(ConveyorError, match=rf"sampler {name} does not draw .*temporal sampling \(time_attr\).*"
                                                rf"\(bsp\)"):
            sampler_entry(name).check(disjoint=True, draws="per_node", temporal=True)
    with pytest.raises(ConveyorError, match="replace=True"):
        sampler_entry("bsp").check(replace=True, disjoint=True, draws="per_node", temporal=True)
    sampler_entry("bsp").check(typed=True, disjoint=True, draws="per_node", temporal=True)  # bsp draws it
    with pytest.raises(ConveyorError, match="neither a node-level nor an edge-level"):
        TemporalSampler(star([1, 2]), [1], time_attr="when")
    with pytest.raises(ConveyorError, match="edge-level temporal sampling needs each seed's time"):
        TemporalSampler(star([1, 2], edge_level=True), [1], time_attr="t").sample(torch.tensor([0]))


def random_timed_graph(edge_level: bool, seed: int = 0) -> Graph:
    """40 nodes, 400 edges (repeats kept), times 0..19 with many ties, given in edge order."""
    g = torch.Generator().manual_seed(seed)
    edges = torch.randint(40, (2, 400), generator=g)
    time = torch.randint(20, (400 if edge_level else 40,), generator=g)
    if edge_level:
        return Graph.from_edge_index(edges, 40, dedup=False, edge_attrs={"t": time})
    graph = Graph.from_edge_index(edges, 40, dedup=False)
    graph.node_attrs = {"t": time}
    return graph


def valid_positions(graph: Graph, node: int, limit: int, edge_level: bool) -> list:
    """Node `node`'s CSC positions not later than `limit`, latest last (ties: CSC order)."""
    first, end = int(graph.indptr[node]), int(graph.indptr[node + 1])
    time = graph.edge_attrs["t"] if edge_level else graph.node_attrs["t"][graph.indices.long()]
    ok = [p for p in range(first, end) if int(time[p]) <= limit]
    return sorted(ok, key=lambda p: (int(time[p]), p))


@pytest.mark.parametrize("edge_level", [False, True])
@pytest.mark.parametrize("strategy", ["uniform", "last"])
def test_the_time_sorted_rows_draw_the_graphs_own_edges(edge_level, strategy):
    """The rows are sorted by time inside the sampler, but every drawn position is the graph's own
    CSC position: its source is the node it added, its row the node that drew it, and it is one of
    that row's valid edges; `last` takes exactly the latest valid ones (ties: the later position)."""
    graph = random_timed_graph(edge_level)
    sampler = TemporalSampler(graph, [3, -1], seed=1, time_attr="t", strategy=strategy)
    seeds, times = torch.arange(40), torch.randint(20, (40,), generator=torch.Generator().manual_seed(2))
    batch = sampler.sample_at(seeds, times)
    owner = batch.extras["batch"]
    for hop, (edges, pos) in enumerate(zip(batch.edge_index_per_hop, batch.edge_pos_per_hop)):
        assert torch.equal(graph.indices[pos].long(), batch.n_id[edges[0]])
        row = torch.searchsorted(graph.indptr, pos, right=True) - 1
        assert torch.equal(row, batch.n_id[edges[1]])
        by_row = {}
        for p, target in zip(pos.tolist(), edges[1].tolist()):
            by_row.setdefault(target, []).append(p)
        for target, drawn in by_row.items():
            valid = valid_positions(graph, int(batch.n_id[target]), int(times[owner[target]]), edge_level)
            assert len(set(drawn)) == len(drawn) and set(drawn) <= set(valid)
            wanted = len(valid) if hop == 1 else min(3, len(valid))
            assert len(drawn) == wanted
            if strategy == "last":
                assert sorted(drawn) == sorted(valid[len(valid) - wanted:])
    assert int(batch.num_nodes_per_hop[-1]) > 3 * 40  # the check reached a real neighbourhood


def test_a_typed_graphs_relations_are_sorted_apart():
    """Two relations into one node type, each sorted by time within its own sub-row: each draws
    among its own valid edges only, at its own fanout, and the positions are the graph's."""
    g = torch.Generator().manual_seed(5)
    ab, cb = torch.randint(30, (2, 200), generator=g), torch.randint(30, (2, 200), generator=g)
    times = {("a", "to", "b"): torch.randint(10, (200,), generator=g),
             ("c", "to", "b"): torch.randint(10, (200,), generator=g)}
    graph = typed_graph({"a": 30, "b": 30, "c": 30}, {("a", "to", "b"): ab, ("c", "to", "b"): cb},
                        edge={(e, "t"): t for e, t in times.items()})
    sampler = TemporalSampler(graph, {("a", "to", "b"): [2], ("c", "to", "b"): [-1]}, seed=0, time_attr="t",
                              strategy="last")
    seeds = torch.arange(30, 60)  # every b
    limit = torch.randint(10, (30,), generator=g)
    batch = sampler.sample_at(seeds, limit)
    (edges,), (pos,) = batch.edge_index_per_hop, batch.edge_pos_per_hop
    relation = graph.edge_attrs["edge_type"][pos].long()
    edge_time = torch.cat([times[("a", "to", "b")], times[("c", "to", "b")]])[graph.edge_ids[pos]]
    assert bool((edge_time <= limit[edges[1]]).all())
    assert torch.equal(graph.indices[pos].long(), batch.n_id[edges[0]])
    for seed in range(30):
        for r, edge_type in enumerate(times):
            source = (ab if r == 0 else cb)
            valid = ((source[1] == seed) & (times[edge_type] <= limit[seed])).sum()
            drawn = ((edges[1] == seed) & (relation == r)).sum()
            assert int(drawn) == (min(2, int(valid)) if r == 0 else int(valid))
