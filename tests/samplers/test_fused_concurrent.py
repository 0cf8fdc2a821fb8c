"""The fused sampler with its programs running concurrently (tests/samplers/threaded_interpreter.py).

The plain interpreter runs the programs of a launch one after another, so program 0 does all the
work and the kernel's cross-program protocol (claiming chunks and task slots, pushing tasks while
others run, the termination count, the waits between phases, the cleanup) is never exercised.
Here each program is a thread, interleaved at random at its memory operations, with 2 to 8
programs, over graphs of every shape; every batch must satisfy the batch contract, the state must
be clean after every launch, and the sampled subgraph must be the sequential interpreter's (the
random draws depend on the seed only, never on which program runs a task).

Small graphs and fanouts: a threaded launch costs ~0.2-0.8 s of interpreter time.
"""
import itertools
import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402

from conveyor.samplers import fused  # noqa: E402
from conveyor.samplers.checks import assert_valid_batch, same_batch  # noqa: E402
from conveyor.samplers.fused import FusedSampler, canonical_order  # noqa: E402
from tests.helpers import (  # noqa: E402
    assert_edge_positions,
    chain_graph,
    fused_state_is_clean,  # noqa: E402
    multigraph,
    power_law_graph,
    random_graph,
    star_graph,
    with_isolated,
)
from tests.samplers.threaded_interpreter import threaded_programs  # noqa: E402

pytestmark = pytest.mark.skipif(not fused.INTERPRETED, reason="runs the kernel under Triton's interpreter")

GRAPHS = {
    "random": lambda: random_graph(120, 800),
    "power_law": lambda: power_law_graph(150, 1200),
    "star": lambda: star_graph(60),  # a hub with 60 in-neighbours: Floyd rows next to take-all rows
    "chain": lambda: chain_graph(40),  # in-degree 1 (0 for node 0): take-all only
    "isolated": lambda: with_isolated(random_graph(60, 300), extra=10),
}
FANOUTS = [[3, 2], [4, 3, 2]]
# Two grids per case, so that every case runs with 2..8 programs over the module.
PROGRAMS = itertools.cycle([(2, 5), (3, 8), (4, 6), (2, 7), (3, 4)])
CASES = [pytest.param(name, fanouts, next(PROGRAMS), id=f"{name}-{len(fanouts)}hops")
         for name in GRAPHS for fanouts in FANOUTS]





def seed_sets(graph, count: int, sizes) -> list:
    g = torch.Generator().manual_seed(count)
    return [torch.randperm(graph.num_nodes, generator=g)[:size] for size in sizes]


def check_threaded(graph, fanouts, programs, calls, harness_seed, **options):
    """Run `calls` (each a list of seed sets: one sample_many, or one sample if a single set) on a
    sampler with `programs` threaded programs and on the sequential interpreter, both with
    sampler seed 7: the same batches (edge positions included), each valid, the state clean after
    every launch."""
    reference = FusedSampler(graph, fanouts, device="cpu", seed=7, **options)
    expected = [reference.sample_many(seeds) for seeds in calls]
    sampler = FusedSampler(graph, fanouts, device="cpu", seed=7, num_programs=programs, **options)
    for seeds, want in zip(calls, expected):
        launches = sampler.num_launches
        with threaded_programs(seed=harness_seed, timeout=60) as run:
            got = sampler.sample_many(seeds) if len(seeds) > 1 else [sampler.sample(seeds[0])]
        assert run.launches == sampler.num_launches - launches and run.programs == programs * run.launches
        assert fused_state_is_clean(sampler), (programs, harness_seed, [s.tolist() for s in seeds])
        for s, batch, ref in zip(seeds, got, want):
            assert_valid_batch(batch, graph, s, fanouts)
            assert_edge_positions(batch, graph)
            canonical = [canonical_order(b, graph.num_nodes, sampler.parallel_edges) for b in (batch, ref)]
            assert same_batch(*canonical), (programs, harness_seed, s.tolist())
    return sampler


@pytest.mark.parametrize("name, fanouts, grids", CASES)
def test_single_batches(name, fanouts, grids):
    """Five consecutive launches of one batch each (one node, a few, a quarter of the graph, all
    of it), on each of two grids: each launch starts from the state the previous one left."""
    graph = GRAPHS[name]()
    n = graph.num_nodes
    calls = [[s] for s in seed_sets(graph, 0, [1, 7, n // 4, n, 5])]
    for i, programs in enumerate(grids):
        sampler = check_threaded(graph, fanouts, programs, calls, harness_seed=100 * i + len(fanouts))
        assert sampler.num_launches == len(calls)


@pytest.mark.parametrize("name, fanouts, grids", CASES)
def test_super_batches(name, fanouts, grids):
    """Two super-batches of six batches (overlapping seed sets, an empty one, the whole graph):
    the batches of a launch share the queue and the counters but must not mix."""
    graph = GRAPHS[name]()
    n = graph.num_nodes
    calls = [seed_sets(graph, 1, [12, 12, 0, 1, n // 3, 30]), seed_sets(graph, 2, [n, 3, 20, 20, 9, 1])]
    for i, programs in enumerate(grids):
        check_threaded(graph, fanouts, programs, calls, harness_seed=200 + 10 * i + len(fanouts))


@pytest.mark.parametrize("programs", [3, 6])
def test_overflow_reruns(programs):
    """Buffers at 5% of the worst case: tasks, records and edges past the capacities are dropped
    while other programs run, the launch must still terminate, and the rerun with bigger buffers
    must give the sequential interpreter's batches."""
    graph = power_law_graph(150, 1200)
    calls = [seed_sets(graph, 3, [40, 5]), seed_sets(graph, 4, [60])]
    sampler = check_threaded(graph, [4, 3, 2], programs, calls, harness_seed=300 + programs, buffer_scale=0.05)
    assert sampler.num_launches > len(calls)  # the first launch overflowed


@pytest.mark.parametrize("programs", [3, 5])
def test_weighted_draws_on_parallel_edges(programs):
    """The WEIGHTED kernel on a graph with parallel edges and zero weights, its programs running
    concurrently: single batches and a super-batch, buffers at 5% of the worst case (overflow
    reruns), each batch the sequential interpreter's, edge positions included."""
    graph = multigraph(60, 900, seed=programs)
    calls = [seed_sets(graph, 5, [30]), seed_sets(graph, 6, [4, 50, 0, 12]), seed_sets(graph, 7, [60])]
    sampler = check_threaded(graph, [3, 2], programs, calls, harness_seed=400 + programs, buffer_scale=0.05,
                             weight_attr="w")
    assert sampler.weighted and sampler.parallel_edges and sampler.num_launches > len(calls)
