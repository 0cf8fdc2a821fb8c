"""bsp's compiled CPU hops (samplers/bsp_compiled.py): SplitMix64's published stream in numba and in
torch's ops alike, Floyd's k-subsets uniform, draws that do not depend on how a hop is cut into
chunks, and a bitmap that no late chunk marks after the hop has read it."""
import itertools
import threading
import time

import numba
import numpy as np
import pytest
import torch
from scipy import stats

from conveyor.samplers import bsp, bsp_hop, bsp_threads, build_sampler
from conveyor.samplers.bsp import compiled_positions, sample_positions
from conveyor.samplers.bsp_compiled import splitmix64, splitmix_words, stream_draws
from conveyor.samplers.bsp_threads import Splitter
from tests.helpers import power_law_graph

# The first outputs of SplitMix64 seeded with 1234567 (Vigna's splitmix64.c, as java.util.SplittableRandom).
PUBLISHED = [6457827717110365317, 3203168211198807973, 9817491932198370423, 4593380528125082431,
             16408922859458223821]


@numba.njit
def stream(key, n):
    return splitmix64(np.uint64(key), np.uint64(n))


def test_splitmix64_is_the_published_stream_in_numba_and_in_torch():
    assert [int(stream(1234567, n)) for n in range(5)] == PUBLISHED
    unsigned = 1 << 64  # torch's int64 words hold the uint64's bits
    assert [x % unsigned for x in splitmix_words(1234567, torch.arange(5)).tolist()] == PUBLISHED
    counters = torch.randint(0, 1 << 40, (1000,), generator=torch.Generator().manual_seed(0))
    key = (1 << 62) - 12345  # near the top: the sums wrap
    assert ([x % unsigned for x in splitmix_words(key, counters).tolist()]
            == [int(stream(key, int(n))) for n in counters])


def test_a_hops_draws_are_both_halves_of_each_element():
    """Draw 2e of a hop's stream is element e's high 32 bits, draw 2e + 1 its low 32 bits."""
    assert stream_draws(1234567, torch.arange(10)).tolist() == [
        half for x in PUBLISHED for half in (x >> 32, x & 0xFFFFFFFF)]


@pytest.mark.parametrize("compiled", [True, False])
def test_floyd_draws_every_k_subset_alike(compiled, monkeypatch):
    """3 of 6 in-neighbours: each of the C(6, 3) = 20 subsets with probability 1/20 (chi-square over
    20,000 draws), on the compiled path and on torch's (the two draw the same picks)."""
    monkeypatch.setattr(bsp, "COMPILED", compiled)
    nodes = 20000
    start, deg = torch.arange(nodes) * 6, torch.full((nodes,), 6)
    pos, edges = sample_positions(start, deg, 3, torch.Generator().manual_seed(2))
    picks = (pos - start.index_select(0, edges[1])).view(nodes, 3).sort(1).values
    assert torch.equal(edges[1], torch.arange(nodes).repeat_interleave(3))
    subsets = {s: i for i, s in enumerate(itertools.combinations(range(6), 3))}
    counts = np.bincount([subsets[tuple(row)] for row in picks.tolist()], minlength=len(subsets))
    assert stats.chisquare(counts).pvalue > 1e-3, counts


def test_compiled_positions_do_not_depend_on_the_chunks(monkeypatch):
    """Low- and high-degree nodes mixed, drawn in one piece and in 16-edge chunks on three threads:
    the same positions and owners, low-degree nodes' every edge first."""
    monkeypatch.setattr(bsp_threads, "MIN_CHUNK", 16)
    monkeypatch.setattr(bsp_threads, "CHECK_S", float("inf"))  # split however busy the machine is
    g = torch.Generator().manual_seed(5)
    deg = torch.randint(0, 40, (3000,), generator=g)
    start = torch.cumsum(deg, 0) - deg
    one = compiled_positions(start, deg, 7, torch.Generator().manual_seed(9), Splitter(1))
    split = Splitter(3)
    many = compiled_positions(start, deg, 7, torch.Generator().manual_seed(9), split)
    split.settle()
    assert split.counts["split"] == 1
    assert torch.equal(one[0], many[0]) and torch.equal(one[1][1], many[1][1])
    few = int(deg[deg <= 7].sum())
    assert torch.equal(one[1][1, :few], torch.arange(3000)[deg <= 7].repeat_interleave(deg[deg <= 7]))


def test_no_late_chunk_marks_the_bitmap_after_the_hop_has_read_it(monkeypatch):
    """A worker late inside its chunk of draws and gathers (it takes one, then sleeps 0.2 s: the
    caller does that chunk too meanwhile) marks its sources after the caller is through: the hop
    waits for it before reading the bitmap, so the batches are one thread's (a mark landing later
    would add a node to a later hop or batch). The sleep only makes a missing wait show; the test
    passes on any machine."""
    monkeypatch.setattr(bsp_threads, "MIN_CHUNK", 1024)
    monkeypatch.setattr(bsp_threads, "CHECK_S", float("inf"))
    monkeypatch.setattr(bsp_hop, "CLAIM_FROM", 10**9)  # every hop marks the bitmap
    monkeypatch.setattr(bsp_hop, "SPLIT_FROM", 0)  # and is split
    draw, entered = bsp_hop.draw_positions, threading.Event()

    def late_draw(lo, hi, start, *arrays):
        if threading.current_thread().name.startswith("bsp"):
            entered.set()
            time.sleep(0.2)
        elif lo == 0 and hi < start.size:  # a split hop: the worker holds a chunk before the caller starts
            entered.wait(5)
            entered.clear()
        return draw(lo, hi, start, *arrays)
    monkeypatch.setattr(bsp_hop, "draw_positions", late_draw)
    graph = power_law_graph(2000, 40000)
    one, two = (build_sampler("bsp", graph, [10, 5], seed=4, threads=t) for t in (1, 2))
    for seeds in (torch.arange(0, 2000, 2), torch.arange(1, 2000, 2), torch.arange(0, 2000, 3)):
        a, b = one.sample(seeds), two.sample(seeds)
        assert torch.equal(a.n_id, b.n_id)
        assert all(torch.equal(x, y) for x, y in zip(a.edge_index_per_hop, b.edge_index_per_hop, strict=True))
    assert two.split.counts["workers"] > 0 and two.split.counts["twice"] > 0


def test_floyd_past_64_neighbours_takes_torchs_picks(monkeypatch):
    """Degrees up to 400 and 40 draws a node: a draw whose bit (offset mod 64) an earlier pick set
    is checked against the picks themselves (node_picks' scan) and the degrees at most 64 by their
    bits alone; both take the torch path's picks, bit for bit, and each node's picks are distinct."""
    g = torch.Generator().manual_seed(3)
    deg = torch.randint(0, 400, (4000,), generator=g)
    start = torch.cumsum(deg, 0) - deg
    compiled = sample_positions(start, deg, 40, torch.Generator().manual_seed(8))
    monkeypatch.setattr(bsp, "COMPILED", False)
    torch_ops = sample_positions(start, deg, 40, torch.Generator().manual_seed(8))
    assert torch.equal(compiled[0], torch_ops[0]) and torch.equal(compiled[1][1], torch_ops[1][1])
    pos, owner = compiled[0], compiled[1][1]
    assert torch.equal(torch.bincount(owner, minlength=4000), deg.clamp(max=40))
    assert torch.unique(pos).numel() == pos.numel()  # distinct within each node's CSC row
    assert bool(((pos >= start[owner]) & (pos < start[owner] + deg[owner])).all())


@pytest.mark.parametrize("claim_from", [0, 10**9])  # the hop sorts its new nodes / marks the bitmap
@pytest.mark.parametrize("bad_id", [-3, 10**6])
def test_a_neighbour_id_past_the_graph_is_an_index_error_before_any_write(claim_from, bad_id, monkeypatch):
    """numba checks no bounds: a corrupt `indices` (an id below 0 or past the last node) is found in
    the gathers, before a mark is written past the bitmap, and raised as torch's index ops raise it."""
    monkeypatch.setattr(bsp_hop, "CLAIM_FROM", claim_from)
    graph = power_law_graph()
    graph.indices[graph.indptr[5]:graph.indptr[6]] = bad_id
    sampler = build_sampler("bsp", graph, [1000], seed=1)
    with pytest.raises(IndexError, match=rf"hold {bad_id} at CSC position {int(graph.indptr[5])}, which is no node id"):
        sampler.sample(torch.tensor([5, 6]))
    assert not sampler.marked.any()
