"""The fused (persistent Triton kernel) sampler: bsp's semantics, Philox reproducibility, super-batches.

On CPU the kernel runs under Triton's interpreter (TRITON_INTERPRET=1, set here before the kernel
is defined); it is slow, so the graphs are small and most tests get many batches out of one
launch with `sample_many`. With CUDA the same tests run on the compiled kernel (marked `gpu`).
"""
import itertools
import os
import re
import subprocess
import sys
from pathlib import Path

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
from scipy import stats  # noqa: E402

from conveyor.core import ConveyorError
from conveyor.partition import Graph  # noqa: E402
from conveyor.samplers import build_sampler, fused
from conveyor.samplers.checks import assert_valid_batch, same_batch  # noqa: E402
from conveyor.samplers.fused import FusedSampler, canonical_order  # noqa: E402
from tests.helpers import (  # noqa: E402
    BAD_SEEDS,
    BAD_WEIGHTS,
    WEIGHTED_CASES,
    assert_drawn_as,
    assert_edge_positions,
    chain_graph,
    complete_in_graph,
    drawn_subsets,
    fused_state_is_clean,
    multigraph,
    power_law_graph,
    random_graph,
    star_graph,
    successive_sampling,
    weighted_fans,
    with_isolated,
)

DEVICES = [
    pytest.param("cpu", marks=pytest.mark.skipif(
        not fused.INTERPRETED, reason="CPU needs the kernel defined under TRITON_INTERPRET=1")),
    pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(
        not torch.cuda.is_available() or fused.INTERPRETED, reason="needs CUDA and the compiled kernel")]),
]


def copies(graph: Graph, k: int) -> Graph:
    """k disjoint copies of a graph; node v of copy c is c * n + v. Sampling the same seeds in
    every copy gives k independent draws from one launch."""
    n = graph.num_nodes
    edges = graph.edge_index()
    return Graph.from_edge_index(torch.cat([edges + c * n for c in range(k)], 1), k * n)


GRAPHS = {
    "random": lambda: random_graph(),
    "power_law": lambda: power_law_graph(),
    "star": lambda: star_graph(),
    "big_hub": lambda: star_graph(3000),
    "chain": lambda: chain_graph(),
    "isolated": lambda: with_isolated(random_graph(100, 400)),
    "single_node": lambda: Graph.from_edge_index(torch.empty(2, 0, dtype=torch.long), 1),
    "self_loop": lambda: Graph.from_edge_index(torch.zeros(2, 1, dtype=torch.long), 1),
}





@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", GRAPHS)
@pytest.mark.parametrize("fanouts", [[15, 10, 5], [3, 3], [5000, 5000]])  # the last: above every degree
def test_structure(name, fanouts, device):
    """Seed sets of several sizes, one launch: each batch is a valid bsp-style batch."""
    graph = GRAPHS[name]()
    sampler = build_sampler("fused", graph, fanouts, device=device, seed=3)
    g = torch.Generator().manual_seed(0)
    perm = torch.randperm(graph.num_nodes, generator=g)
    seed_sets = [perm[:1], perm[:17], perm, perm[:0], perm.flip(0)[:5]]
    batches = sampler.sample_many(seed_sets)
    assert sampler.num_launches == 1
    for seeds, batch in zip(seed_sets, batches):
        assert batch.n_id.device.type == device
        assert_valid_batch(batch, graph, seeds, fanouts)
    assert fused_state_is_clean(sampler)


@pytest.mark.parametrize("device", DEVICES)
def test_degree_zero_seeds_hubs_and_leaves(device):
    graph = with_isolated(chain_graph(10), extra=5)
    sampler = build_sampler("fused", graph, [4, 4], device=device)
    seeds = torch.tensor([0, 12, 11])  # in-degree 0 and isolated nodes
    batch = sampler.sample(seeds)
    assert_valid_batch(batch, graph, seeds, [4, 4])
    assert batch.num_nodes_per_hop.tolist() == [3, 3, 3] and batch.num_sampled_edges == 0
    empty = sampler.sample(torch.empty(0, dtype=torch.long))
    assert empty.n_id.numel() == 0 and empty.num_nodes_per_hop.tolist() == [0, 0, 0]
    # A hub with 3000 in-neighbours and leaves in the same chunk; fanout 7 < 3000.
    graph = star_graph(3000)
    seeds = torch.tensor([0, 5, 1, 2999])
    batch = build_sampler("fused", graph, [7, 7], device=device).sample(seeds)
    assert_valid_batch(batch, graph, seeds, [7, 7])
    assert batch.edge_index_per_hop[0].size(1) == 7 + 3 * 1


@pytest.mark.parametrize("device", DEVICES)
def test_same_seed_same_batch_and_reseeding(device):
    graph = power_law_graph()
    seeds = torch.arange(0, 400, 7)
    a = build_sampler("fused", graph, [5, 5], device=device, seed=11).sample(seeds)
    sampler = build_sampler("fused", graph, [5, 5], device=device, seed=11)
    b = sampler.sample(seeds)
    c = sampler.sample(seeds)  # the stream moves on
    sampler.manual_seed(11)
    d = sampler.sample(seeds)
    other = build_sampler("fused", graph, [5, 5], device=device, seed=12).sample(seeds)
    if device == "cpu":  # the interpreter runs programs in turn: even the order of ids repeats
        assert same_batch(a, b) and same_batch(b, d)
    # On CUDA the order of ids within a hop may depend on timing: compare canonical forms.
    a, b, c, d, other = (canonical_order(x, graph.num_nodes) for x in (a, b, c, d, other))
    assert same_batch(a, b) and same_batch(b, d)
    assert not torch.equal(b.edge_index_per_hop[1], c.edge_index_per_hop[1])
    assert not torch.equal(b.edge_index_per_hop[1], other.edge_index_per_hop[1])


@pytest.mark.parametrize("device", DEVICES)
def test_super_batch_draws_what_single_batches_draw(device):
    """sample_many takes consecutive stream positions: exactly the batches of repeated sample()."""
    graph = random_graph()
    seed_sets = [torch.arange(0, 300, 11), torch.arange(5, 40), torch.tensor([7]), torch.arange(0, 300, 11)]
    many = build_sampler("fused", graph, [6, 4, 2], device=device, seed=5).sample_many(seed_sets)
    single = FusedSampler(graph, [6, 4, 2], device=device, seed=5, deterministic=True)
    one_by_one = [single.sample(s) for s in seed_sets]
    for seeds, batch, ref in zip(seed_sets, many, one_by_one):
        assert_valid_batch(batch, graph, seeds, [6, 4, 2])
        assert same_batch(canonical_order(batch, graph.num_nodes), ref)
    # Same seeds at different stream positions: independent draws.
    assert not same_batch(one_by_one[0], one_by_one[3])
    # deterministic=True numbers each hop's new nodes in ascending global id, as bsp does.
    counts = one_by_one[0].num_nodes_per_hop.tolist()
    for lo, hi in zip(counts, counts[1:]):
        segment = one_by_one[0].n_id[lo:hi]
        assert torch.equal(segment, segment.sort().values)


@pytest.mark.parametrize("device", DEVICES)
def test_uniform_without_replacement_and_independent_hops(device):
    """A node with 20 in-neighbours, fanout 5: each neighbour with probability 1/4, each pair with
    probability 5*4/(20*19) = 1/19 (Floyd must give uniform subsets, not just uniform marginals),
    and its hop-2 draw overlaps its hop-1 draw by 5*5/20 = 1.25 on average (independent hops).
    100 copies of the node, 12 batches: 1200 independent draws from one launch."""
    k = 100
    graph = copies(complete_in_graph(20), k)
    centres = torch.arange(k) * 21
    batches = build_sampler("fused", graph, [5, 5], device=device, seed=0).sample_many([centres] * 12)
    firsts, overlaps = [], []
    for batch in batches:
        n_id, (hop1, hop2) = batch.n_id.cpu(), [e.cpu() for e in batch.edge_index_per_hop]
        order = torch.argsort(hop1[1], stable=True)
        assert torch.equal(hop1[1][order], torch.arange(k).repeat_interleave(5))
        first = (n_id[hop1[0][order]] % 21 - 1).view(k, 5)  # hop 1: the 5 picks of each centre
        second = torch.zeros(k, 20, dtype=torch.bool)
        second[hop2[1], n_id[hop2[0]] % 21 - 1] = True  # hop 2 of the centres (local ids 0..k-1)
        overlaps.append(second.gather(1, first).sum(1))
        firsts.append(first)
    firsts = torch.cat(firsts).sort(1).values  # [1200, 5]
    assert bool((firsts.diff(dim=1) > 0).all())  # without replacement
    counts = torch.bincount(firsts.flatten(), minlength=20)
    assert stats.chisquare(counts.numpy()).pvalue > 1e-3, counts
    i, j = torch.triu_indices(5, 5, 1)
    pairs = torch.bincount((firsts[:, i] * 20 + firsts[:, j]).flatten(), minlength=400).view(20, 20)
    assert stats.chisquare(pairs[tuple(torch.triu_indices(20, 20, 1))].numpy()).pvalue > 1e-3
    mean = torch.cat(overlaps).double().mean().item()
    assert 1.15 < mean < 1.35, mean  # sd of the mean is about 0.025


def counts_per_copy(batches, n: int, k: int) -> torch.Tensor:
    """|N_1|, |N_2| of each copy of a graph in `copies(graph, k)`: one row per (batch, copy)."""
    rows = []
    for batch in batches:
        level = torch.bucketize(torch.arange(batch.n_id.numel()), batch.num_nodes_per_hop, right=True)
        copy = batch.n_id.cpu() // n
        rows.append(torch.stack([torch.bincount(copy[level <= h], minlength=k) for h in (1, 2)], 1))
    return torch.cat(rows).double()


@pytest.mark.parametrize("device", DEVICES)
def test_node_counts_match_bsp_in_distribution(device):
    """On a power-law graph the number of nodes within h hops has bsp's distribution
    (20 copies of the graph, 8 batches: 160 draws from one launch)."""
    graph, k = power_law_graph(), 20
    n = graph.num_nodes
    seeds = torch.arange(0, n, 40)
    batch_seeds = [torch.cat([seeds + c * n for c in range(k)])] * 8
    fused_counts = counts_per_copy(build_sampler("fused", copies(graph, k), [3, 3], device=device, seed=1)
                                   .sample_many(batch_seeds), n, k)
    bsp = build_sampler("bsp", copies(graph, k), [3, 3], seed=1)
    bsp_counts = counts_per_copy([bsp.sample(s) for s in batch_seeds], n, k)
    for hop in (0, 1):
        p = stats.mannwhitneyu(fused_counts[:, hop].numpy(), bsp_counts[:, hop].numpy()).pvalue
        assert p > 1e-3, (hop, fused_counts[:, hop].mean(), bsp_counts[:, hop].mean())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("weight_attr", [None, "w"])
def test_overflow_reruns_with_bigger_buffers(device, weight_attr):
    """Buffers at 1% of the worst case overflow; the kernel reports it, the call reruns and returns
    the batch that big buffers give (edge positions too; drawn by weight too), and the state
    stays clean."""
    graph = power_law_graph()
    graph.edge_attrs["w"] = torch.rand(graph.num_edges, generator=torch.Generator().manual_seed(0))
    seeds = [torch.arange(0, 400, 9), torch.arange(3, 60)]
    options = dict(device=device, seed=4, deterministic=True, weight_attr=weight_attr)
    small = FusedSampler(graph, [15, 10, 5], buffer_scale=0.01, **options)
    batches = small.sample_many(seeds)
    assert small.num_launches > 1
    reference = FusedSampler(graph, [15, 10, 5], **options).sample_many(seeds)
    for s, batch, ref in zip(seeds, batches, reference):
        assert_valid_batch(batch, graph, s, [15, 10, 5])
        assert_edge_positions(batch, graph)
        assert same_batch(batch, ref)
    assert fused_state_is_clean(small)
    launches = small.num_launches
    small.sample_many(seeds)  # the grown buffers are kept
    assert small.num_launches == launches + 1


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("deterministic", [True, False])
def test_edge_positions_follow_their_edges(device, deterministic):
    """On a graph that keeps its parallel edges, single batches and a super-batch, canonical order
    or not: each edge comes with its CSC position (`graph.indices[pos] == n_id[src]`, inside its
    target's row); hop 2's fanout is above every degree, so each target gets every in-edge, each
    parallel edge apart, at the positions of its whole CSC row."""
    graph = multigraph()
    sampler = FusedSampler(graph, [3, 100], device=device, seed=5, deterministic=deterministic)
    assert sampler.parallel_edges
    seed_sets = [torch.tensor([0, 5, 9, 17]), torch.arange(0, 40, 3), torch.tensor([33])]
    batches = [sampler.sample(s) for s in seed_sets] + sampler.sample_many(seed_sets)
    parallel = 0
    for seeds, batch in zip(seed_sets * 2, batches):
        assert_valid_batch(batch, graph, seeds, [3, 100])
        assert_edge_positions(batch, graph)
        n_id, (src, dst), pos = batch.n_id.cpu(), *[t.cpu() for t in (batch.edge_index_per_hop[1],
                                                                        batch.edge_pos_per_hop[1])]
        for local in dst.unique().tolist():
            v = int(n_id[local])
            assert torch.equal(pos[dst == local].sort().values, torch.arange(graph.indptr[v], graph.indptr[v + 1]))
            parallel += int(src[dst == local].unique().numel() < int((dst == local).sum()))
    assert parallel > 0  # some target drew one neighbour through two edges


def test_canonical_order_puts_parallel_edges_in_one_order():
    """However the kernel's timing ordered a hop's edges, canonical_order gives one order, positions
    with their edges; parallel edges (same neighbour, same target) are ordered by position."""
    graph = multigraph()
    batch = FusedSampler(graph, [100, 100], seed=1, deterministic=False).sample(torch.tensor([0, 5, 9]))
    g = torch.Generator().manual_seed(0)
    perms = [torch.randperm(e.size(1), generator=g) for e in batch.edge_index_per_hop]
    shuffled = type(batch)(batch.n_id, batch.num_nodes_per_hop,
                           [e[:, p] for e, p in zip(batch.edge_index_per_hop, perms)],
                           [q[p] for q, p in zip(batch.edge_pos_per_hop, perms)])
    a, b = canonical_order(batch, graph.num_nodes, True), canonical_order(shuffled, graph.num_nodes, True)
    assert same_batch(a, b) and a.edge_pos_per_hop is not None
    assert_edge_positions(a, graph)
    for (src, dst), pos in zip(a.edge_index_per_hop, a.edge_pos_per_hop):
        key = dst * a.n_id.numel() + src
        assert bool((key.diff() >= 0).all()) and bool((pos.diff()[key.diff() == 0] > 0).all())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("weights, fanout", WEIGHTED_CASES)
def test_weighted_draws_are_pygs_successive_sampling(weights, fanout, device):
    """weight_attr in the kernel (its WEIGHTED variant): a fan centre with more neighbours than the
    fanout draws `fanout` of them without replacement, each pick in proportion to the weight among
    those left, at hop 1 and again, independently, at hop 2: the frequencies of the drawn sets
    against their exact probabilities (enumerated), 2400 draws from one launch; zero weights only
    when no positive one is left."""
    copies = 100
    graph = weighted_fans(weights, copies)
    centres = torch.arange(copies) * (len(weights) + 1)
    sampler = build_sampler("fused", graph, [fanout, fanout], device=device, seed=0, weight_attr="w")
    batches = sampler.sample_many([centres] * 12)
    assert sampler.num_launches == 1
    for batch in batches:
        assert_valid_batch(batch, graph, centres, [fanout, fanout])
    assert_drawn_as(drawn_subsets(batches, len(weights), hops=(1, 2)), successive_sampling(weights, fanout))


@pytest.mark.parametrize("device", DEVICES)
def test_weighted_draws_agree_with_bsp(device):
    """fused and bsp draw the same sets with the same frequencies (a chi-square test of
    homogeneity over the 20 possible sets of 3 of 6 neighbours), on a hub whose row spans several
    of the kernel's tiles."""
    weights = [float(w) for w in range(1, 7)] + [0.0] * 200  # 206 in-neighbours, 6 of them weighted
    copies = 20
    graph = weighted_fans(weights, copies)
    centres = torch.arange(copies) * (len(weights) + 1)
    in_kernel = build_sampler("fused", graph, [3], device=device, seed=0, weight_attr="w")
    fused_batches = in_kernel.sample_many([centres] * 40)
    bsp = build_sampler("bsp", graph, [3], seed=0, weight_attr="w")
    bsp_batches = [bsp.sample(centres) for _ in range(40)]
    counts = [drawn_subsets(b, 6) for b in (fused_batches, bsp_batches)]  # (no zero weight is drawn)
    assert all(int(c.sum()) == 800 for c in counts)
    table = torch.stack(counts)
    table = table[:, table.sum(0) > 0]
    assert stats.chi2_contingency(table.numpy()).pvalue > 1e-3, table


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("weight_attr", [None, "w"])
def test_a_fanout_of_0_draws_nothing_at_that_hop(weight_attr, device):
    """PyG's meaning of num_neighbors 0, in both kernels: no pick at that hop, the others as ever."""
    graph = multigraph()
    seeds = torch.tensor([0, 5, 9])
    sampler = FusedSampler(graph, [0, 3, 0], device=device, seed=0, weight_attr=weight_attr)
    batch = sampler.sample(seeds)
    assert_valid_batch(batch, graph, seeds, [0, 3, 0])
    assert [e.size(1) for e in batch.edge_index_per_hop] == [0, 9, 0] and fused_state_is_clean(sampler)


@pytest.mark.parametrize("attributes, words", BAD_WEIGHTS)
def test_bad_weight_attr(attributes, words):
    graph = random_graph()
    graph.edge_attrs.update(attributes(graph.num_edges))
    device = "cuda" if torch.cuda.is_available() else "cpu"
    with pytest.raises(ConveyorError, match=re.escape(words)):
        build_sampler("fused", graph, [5], device=device, weight_attr="w")


@pytest.mark.parametrize("seeds, words", BAD_SEEDS)
def test_bad_seeds(seeds, words):
    sampler = build_sampler("fused", random_graph(), [5], device="cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(ConveyorError, match=words):
        sampler.sample_many([torch.tensor([0]), seeds])
    assert sampler.num_launches == 0


def test_bad_configuration():
    with pytest.raises(ConveyorError, match="fanouts"):
        build_sampler("fused", random_graph(), [5, -3])  # (0 draws nothing, as PyG: #41)
    with pytest.raises(ConveyorError, match="at most 128"):  # Floyd tile: fanout 200 < degree 201
        build_sampler("fused", star_graph(300), [200])
    if not torch.cuda.is_available():
        with pytest.raises(ConveyorError, match="CUDA is not available"):
            build_sampler("fused", random_graph(), [5], device="cuda")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or fused.INTERPRETED, reason="needs CUDA and the compiled kernel")
def test_the_variants_a_gpu_compiles_do_not_spill():
    """What the GPU's own compiler made of the kernel (tests/samplers/test_fused_compile.py checks sm_90
    without a GPU): super-batches of 1, 4 and 8 within the register cap, nothing spilled, for the
    uniform kernel and the weighted one (weight_attr)."""
    graph = power_law_graph()
    graph.edge_attrs["w"] = torch.rand(graph.num_edges)
    samplers = [FusedSampler(graph, [15, 10, 5], device="cuda", seed=0, weight_attr=w) for w in (None, "w")]
    for sampler, count in itertools.product(samplers, (1, 4, 8)):
        compiled = sampler.compile(count)
        assert compiled["spilled_bytes"] == 0, compiled
        assert 0 < compiled["registers"] <= fused.MAX_REGISTERS and compiled["programs_per_sm"] >= 1, compiled
        sms = torch.cuda.get_device_properties(0).multi_processor_count
        assert compiled["programs"] == compiled["programs_per_sm"] * sms, compiled


def test_cpu_without_interpreter_is_a_clear_error():
    code = ("import os; os.environ.pop('TRITON_INTERPRET', None)\n"
            "from conveyor.core import ConveyorError\nfrom conveyor.samplers import build_sampler\n"
            "from tests.helpers import random_graph\n"
            "try:\n    build_sampler('fused', random_graph(), [5], device='cpu')\n"
            "except ConveyorError as e:\n    print(e)\n")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         cwd=Path(__file__).resolve().parents[2], timeout=120)
    assert "fused needs CUDA or TRITON_INTERPRET=1" in out.stdout, out.stderr[-2000:]


def test_auto_is_bsp_until_fused_is_validated_on_a_gpu():
    """sampler=auto stays on bsp, on CUDA too, until the GPU validation suite has passed (README)."""
    from conveyor.samplers import resolve_sampler_name
    from conveyor.samplers.bsp import BSPSampler
    assert resolve_sampler_name("auto", "cuda") == resolve_sampler_name("auto", "cpu") == "bsp"
    assert resolve_sampler_name("fused", "cpu") == "fused"
    assert isinstance(build_sampler("auto", random_graph(), [3, 3]), BSPSampler)
