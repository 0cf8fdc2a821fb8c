import pickle
import re

import pytest
import torch
from scipy import stats

from conveyor.core import ConveyorError
from conveyor.partition import Graph
from conveyor.samplers import SamplerSpec, bsp, bsp_hop, build_sampler
from conveyor.samplers.checks import assert_valid_batch
from tests.helpers import (
    BAD_SEEDS,
    BAD_WEIGHTS,
    WEIGHTED_CASES,
    assert_drawn_as,
    assert_edge_positions,
    chain_graph,
    complete_in_graph,
    drawn_subsets,
    fan_rank_counts,
    multigraph,
    power_law_graph,
    random_graph,
    star_graph,
    successive_sampling,
    weighted_fans,
    with_isolated,
)

GRAPHS = {
    "random": lambda: random_graph(),
    "power_law": lambda: power_law_graph(),
    "star": lambda: star_graph(),
    "chain": lambda: chain_graph(),
    "isolated": lambda: with_isolated(random_graph(100, 400)),
}


@pytest.mark.parametrize("name", GRAPHS)
@pytest.mark.parametrize("fanouts", [[15, 10, 5], [3, 3], [1], [1000, 1000]])
def test_structure(name, fanouts):
    graph = GRAPHS[name]()
    sampler = build_sampler("bsp", graph, fanouts, seed=3)
    g = torch.Generator().manual_seed(0)
    for batch_size in (1, 17, graph.num_nodes, 5):  # after the whole graph, the map reset by a fill (FILL_FROM)
        seeds = torch.randperm(graph.num_nodes, generator=g)[:batch_size]
        assert_valid_batch(sampler.sample(seeds), graph, seeds, fanouts)


def test_degree_zero_seeds_and_empty_seeds():
    graph = with_isolated(chain_graph(10), extra=5)
    sampler = build_sampler("bsp", graph, [4, 4])
    seeds = torch.tensor([0, 12, 11])  # in-degree 0 and isolated nodes
    batch = sampler.sample(seeds)
    assert_valid_batch(batch, graph, seeds, [4, 4])
    assert batch.num_nodes_per_hop.tolist() == [3, 3, 3] and batch.num_sampled_edges == 0
    empty = sampler.sample(torch.empty(0, dtype=torch.long))
    assert empty.n_id.numel() == 0 and empty.num_nodes_per_hop.tolist() == [0, 0, 0]


def test_same_seed_same_batch_and_reseeding():
    graph = power_law_graph()
    seeds = torch.arange(0, 400, 7)
    a = build_sampler("bsp", graph, [5, 5], seed=11).sample(seeds)
    sampler = build_sampler("bsp", graph, [5, 5], seed=11)
    b = sampler.sample(seeds)
    c = sampler.sample(seeds)  # the stream moves on
    sampler.manual_seed(11)
    d = sampler.sample(seeds)
    assert torch.equal(a.n_id, b.n_id)
    assert all(torch.equal(x, y) for x, y in zip(a.edge_index_per_hop, b.edge_index_per_hop))
    assert not torch.equal(b.edge_index_per_hop[1], c.edge_index_per_hop[1])
    assert torch.equal(d.n_id, b.n_id)


def test_uniform_without_replacement_chi_square():
    """Each fan centre has 20 in-neighbours; with fanout 5 each is drawn with probability 1/4, at
    hop 1 and again (independently) at hop 2. 4000 draws per hop, chi-square against uniform."""
    copies, degree = 400, 20
    graph = complete_in_graph(degree, copies)
    centres = torch.arange(copies) * (degree + 1)
    sampler = build_sampler("bsp", graph, [5, 5], seed=0)
    batches = [sampler.sample(centres) for _ in range(10)]
    for hop in (1, 2):
        counts = sum(fan_rank_counts(b, degree, hop) for b in batches)
        assert counts.sum() == 5 * copies * 10
        p = stats.chisquare(counts.numpy()).pvalue
        assert p > 1e-3, (hop, counts, p)


def test_a_pickled_sampler_goes_on_with_the_same_stream():
    """The async pipeline pickles a sampler object into its process: the copy draws what the
    original would have drawn next."""
    graph = random_graph(300, 2000, seed=4)
    sampler = build_sampler("bsp", graph, [5, 3], seed=9)
    sampler.sample(torch.arange(20))
    assert "cpu_hops" in sampler.__dict__  # the compiled hops' numpy views, made by the first batch
    copy = pickle.loads(pickle.dumps(sampler))
    ahead, copied = sampler.sample(torch.arange(30, 60)), copy.sample(torch.arange(30, 60))
    assert torch.equal(ahead.n_id, copied.n_id)
    assert all(torch.equal(a, b) for a, b in zip(ahead.edge_index_per_hop, copied.edge_index_per_hop))
    # The copy's views are of its own tensors (numpy's pickled would be copies of the graph and maps).
    assert copy.cpu_hops.local.ctypes.data == copy.local.data_ptr() != sampler.local.data_ptr()
    assert copy.cpu_hops.indices.ctypes.data == copy.indices.data_ptr()


def test_hops_draw_independently():
    """A seed samples again at hop 2, independently: its two 5-of-20 draws overlap by
    5 * 5 / 20 = 1.25 neighbours on average (hypergeometric), not by 5 (a reused draw) nor 0."""
    copies, degree = 4000, 20
    graph = complete_in_graph(degree, copies)
    sampler = build_sampler("bsp", graph, [5, 5], seed=1)
    batch = sampler.sample(torch.arange(copies) * (degree + 1))
    hop1, hop2 = (e[:, e[1] < copies] for e in batch.edge_index_per_hop)  # edges into the seeds
    key1 = set((hop1[1] * 10**6 + hop1[0]).tolist())
    overlap = sum(k in key1 for k in (hop2[1] * 10**6 + hop2[0]).tolist()) / copies
    # The overlap's variance is 5 * 1/4 * 3/4 * 15/19 = 0.74 a seed: the mean's sd is 0.0136.
    assert 1.19 < overlap < 1.31, overlap


def int32_power_law() -> Graph:
    graph = power_law_graph(2000, 40000)
    return Graph(graph.indptr, graph.indices.int())


SAME_AS_TORCH = {**GRAPHS, "int32 power_law": int32_power_law, "larger random": lambda: random_graph(5000, 100000)}


# BITMAP_FROM and CLAIM_FROM 0 sort every hop, a huge one marks every hop in the bitmap, 10 switches by size.
@pytest.mark.parametrize("bitmap_from", [0, 10, 10**9])
@pytest.mark.parametrize("name", SAME_AS_TORCH)
@pytest.mark.parametrize("fanouts", [[15, 10, 5], [3, 3], [-1, 2]])
@pytest.mark.parametrize("draws", ["per_hop", "per_node"])
def test_compiled_hops_draw_the_batches_of_torchs_ops(name, fanouts, bitmap_from, draws, monkeypatch):
    """The CPU's compiled hops (samplers/bsp_compiled.py) draw bit for bit the batches of the same
    draws in torch's vectorised ops, CUDA's path (same seed, same picks, same order, same dtypes),
    batch after batch from one generator, whichever way a hop deduplicates its new nodes."""
    monkeypatch.setattr(bsp, "BITMAP_FROM", bitmap_from)
    monkeypatch.setattr(bsp_hop, "CLAIM_FROM", bitmap_from)
    graph = SAME_AS_TORCH[name]()
    compiled = build_sampler("bsp", graph, fanouts, seed=5, draws=draws)
    monkeypatch.setattr(bsp, "COMPILED", False)
    torch_ops = build_sampler("bsp", graph, fanouts, seed=5, draws=draws)
    assert all(compiled.compiled) and not any(torch_ops.compiled)
    g = torch.Generator().manual_seed(1)
    for batch_size in (1, 17, 300, graph.num_nodes, 300):
        seeds = torch.randperm(graph.num_nodes, generator=g)[:batch_size]
        a, b = compiled.sample(seeds), torch_ops.sample(seeds)
        assert torch.equal(a.n_id, b.n_id) and a.n_id.dtype == b.n_id.dtype
        assert torch.equal(a.num_nodes_per_hop, b.num_nodes_per_hop)
        for x, y in zip(a.edge_index_per_hop + a.edge_pos_per_hop, b.edge_index_per_hop + b.edge_pos_per_hop,
                        strict=True):
            assert torch.equal(x, y) and x.dtype == y.dtype


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("once", [False, True])
def test_edge_positions_keep_parallel_edges_apart(once, weighted):
    """On a graph that keeps its parallel edges, each edge's CSC position comes with it (its
    attributes' row); a node with fewer in-edges than the fanout gets every one of them, each
    parallel edge on its own, at the positions of its whole CSC row."""
    graph = multigraph()
    seeds = torch.tensor([0, 5, 9, 17])
    sampler = build_sampler("bsp", graph, [3, 100], seed=2, draws="per_node" if once else "per_hop",
                            weight_attr="w" if weighted else None)
    batch = sampler.sample(seeds)
    assert_edge_positions(batch, graph)
    if not once:
        assert_valid_batch(batch, graph, seeds, [3, 100])
    drawn = batch.edge_index_per_hop[0].size(1) if once else 0  # per_node: hop 2 repeats hop 1's edges first
    src, dst = batch.edge_index_per_hop[1][:, drawn:]
    positions, parallel = batch.edge_pos_per_hop[1][drawn:], 0
    for local in dst.unique().tolist():  # hop 2 takes every in-edge of each of its targets
        v = int(batch.n_id[local])
        assert torch.equal(positions[dst == local].sort().values, torch.arange(graph.indptr[v], graph.indptr[v + 1]))
        parallel += int((src[dst == local].unique().numel() < (dst == local).sum()))
    assert parallel > 0  # some target drew one neighbour through two edges


def test_the_batch_check_catches_a_wrong_edge_position():
    graph = multigraph()
    seeds = torch.tensor([0, 5])
    batch = build_sampler("bsp", graph, [3, 3], seed=2).sample(seeds)
    assert_valid_batch(batch, graph, seeds, [3, 3])
    pos = batch.edge_pos_per_hop[0]
    twin = pos.clone()
    twin[1] = twin[0]  # two edges at one position
    wrong = pos.clone()
    wrong[0] = (pos[0] + 1) % graph.num_edges if graph.indices[(pos[0] + 1) % graph.num_edges] != \
        graph.indices[pos[0]] else (pos[0] + graph.num_edges // 2) % graph.num_edges
    for bad, words in ((twin, "drawn twice|not the edge's neighbour"), (wrong, "position")):
        batch.edge_pos_per_hop[0] = bad
        with pytest.raises(AssertionError, match=words):
            assert_valid_batch(batch, graph, seeds, [3, 3])


@pytest.mark.parametrize("weights, fanout", WEIGHTED_CASES)
def test_weighted_draws_are_pygs_successive_sampling(weights, fanout):
    """weight_attr: a fan centre with more neighbours than the fanout draws `fanout` of them
    without replacement, each pick in proportion to the weight among those left (pyg-lib's
    weighted draw), at hop 1 and again, independently, at hop 2: the frequencies of the drawn sets
    against their exact probabilities (enumerated), 8000 draws; zero weights only when no
    positive one is left."""
    copies = 1000
    graph = weighted_fans(weights, copies)
    centres = torch.arange(copies) * (len(weights) + 1)
    sampler = build_sampler("bsp", graph, [fanout, fanout], seed=0, weight_attr="w")
    batches = [sampler.sample(centres) for _ in range(4)]
    for batch in batches:
        assert_valid_batch(batch, graph, centres, [fanout, fanout])
    assert_drawn_as(drawn_subsets(batches, len(weights), hops=(1, 2)), successive_sampling(weights, fanout))


def test_a_sampler_spec_carries_weight_attr():
    """SamplerSpec(weight_attr=...) crosses a pickle and builds a sampler that draws by weight:
    with one positive weight per fan and fanout 1, every centre draws that neighbour."""
    graph = weighted_fans([0.0, 0.0, 2.0, 0.0], copies=300)
    centres = torch.arange(300) * 5
    spec = pickle.loads(pickle.dumps(SamplerSpec("bsp", [1], seed=3, weight_attr="w")))
    batch = spec.build(graph, "cpu").sample(centres)
    src, dst = batch.edge_index_per_hop[0]
    assert torch.equal(batch.n_id[src] - batch.n_id[dst], torch.full((300,), 3))
    unweighted = SamplerSpec("bsp", [1], seed=3).build(graph, "cpu").sample(centres)
    src, dst = unweighted.edge_index_per_hop[0]
    assert (unweighted.n_id[src] - unweighted.n_id[dst] != 3).sum() > 150  # ~3 in 4 without the weights


@pytest.mark.parametrize("attributes, words", BAD_WEIGHTS)
def test_bad_weight_attr(attributes, words):
    graph = random_graph()
    graph.edge_attrs.update(attributes(graph.num_edges))
    with pytest.raises(ConveyorError, match=re.escape(words)) as refusal:
        build_sampler("bsp", graph, [5], weight_attr="w")
    assert "weight_attr=None" in str(refusal.value)  # the fix, named


@pytest.mark.parametrize("seeds, words", BAD_SEEDS)
def test_bad_seeds(seeds, words):
    """Refused before any draw, and nothing of the refused call left behind (the compiled claim of
    the seeds finds a repeat after it gave the first copies their local ids): the next call samples
    what a fresh sampler does."""
    graph = random_graph()
    sampler = build_sampler("bsp", graph, [5, 5])
    with pytest.raises(ConveyorError, match=words):
        sampler.sample(seeds)
    good = torch.tensor([2, 1, 7])
    after, fresh = sampler.sample(good), build_sampler("bsp", graph, [5, 5]).sample(good)
    assert torch.equal(after.n_id, fresh.n_id)
    assert all(torch.equal(a, b) for a, b in zip(after.edge_index_per_hop, fresh.edge_index_per_hop))


@pytest.mark.parametrize("weight_attr", [None, "w"])
def test_a_fanout_of_0_draws_nothing_at_that_hop(weight_attr):
    """PyG's meaning of num_neighbors 0 (check_fanouts takes it since #41), drawn by weight or not."""
    graph = multigraph()
    seeds = torch.tensor([0, 5, 9])
    for fanouts in ([2, 0], [0, 3]):
        batch = build_sampler("bsp", graph, fanouts, seed=0, weight_attr=weight_attr).sample(seeds)
        assert_valid_batch(batch, graph, seeds, fanouts)
        assert [e.size(1) for e in batch.edge_index_per_hop][fanouts.index(0)] == 0


@pytest.mark.parametrize("fanouts", [[], [5, -2], ["a"], [2.5]])
def test_bad_fanouts(fanouts):
    with pytest.raises(ConveyorError, match="fanouts"):
        build_sampler("bsp", random_graph(), fanouts)


def test_unknown_sampler():
    with pytest.raises(ConveyorError, match="unknown sampler 'magic'"):
        build_sampler("magic", random_graph(), [5])


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_structure_on_cuda():
    graph = power_law_graph()
    seeds = torch.arange(0, 400, 3)
    batch = build_sampler("bsp", graph, [15, 10, 5], device="cuda").sample(seeds)
    assert batch.n_id.is_cuda
    assert_valid_batch(batch, graph, seeds, [15, 10, 5])
