"""bsp's own CPU threads (samplers/bsp_threads.py): the batches of one thread bit for bit, a caller
that never waits long for a late worker inside a hop, each thread's place (its own bitmap), and
freed memory kept for the next batch."""
import os
import pickle
import platform
import subprocess
import sys
import threading
import time

import pytest
import torch

from conveyor.core.cores import usable_cores
from conveyor.samplers import bsp_hop, bsp_threads, build_sampler
from conveyor.samplers.bsp_threads import SpareCores, Splitter
from tests.helpers import REPO, power_law_graph, random_graph


@pytest.mark.parametrize("threads", [2, 3])
@pytest.mark.parametrize("draws", ["per_hop", "per_node"])
@pytest.mark.parametrize("weight_attr", [None, "w"])
def test_threads_draw_the_batches_of_one_thread_bit_for_bit(threads, draws, weight_attr, monkeypatch):
    monkeypatch.setattr(bsp_threads, "MIN_CHUNK", 16)  # small graphs' hops split into chunks too
    monkeypatch.setattr(bsp_hop, "SPLIT_FROM", 0)
    monkeypatch.setattr(bsp_threads, "CHECK_S", float("inf"))  # split however busy the machine is
    graph = power_law_graph(2000, 40000)
    graph.edge_attrs = {"w": torch.rand(graph.num_edges, generator=torch.Generator().manual_seed(3))}
    one, many = (build_sampler("bsp", graph, [15, 10, 5], seed=5, draws=draws, weight_attr=weight_attr, threads=t)
                 for t in (1, threads))
    g = torch.Generator().manual_seed(1)
    for batch_size in (1, 300, graph.num_nodes, 300):
        seeds = torch.randperm(graph.num_nodes, generator=g)[:batch_size]
        a, b = one.sample(seeds), many.sample(seeds)
        assert torch.equal(a.n_id, b.n_id) and torch.equal(a.num_nodes_per_hop, b.num_nodes_per_hop)
        for x, y in zip(a.edge_index_per_hop + a.edge_pos_per_hop, b.edge_index_per_hop + b.edge_pos_per_hop,
                        strict=True):
            assert torch.equal(x, y) and x.dtype == y.dtype
    assert many.threads == threads and many.split.counts["split"] > 0 and many.split.counts["alone"] == 0
    copy = pickle.loads(pickle.dumps(many))  # the pool stays behind; the copy starts its own
    seeds = torch.arange(0, 2000, 3)
    assert torch.equal(one.sample(seeds).edge_index_per_hop[-1], copy.sample(seeds).edge_index_per_hop[-1])


def test_the_caller_does_a_late_workers_chunk_itself_and_settle_waits_for_it(monkeypatch):
    monkeypatch.setattr(bsp_threads, "CHECK_S", float("inf"))
    """A worker that is slow inside its chunk (here: asleep) holds nothing up: the caller writes
    that chunk too and returns; `settle` is what waits until the worker is out."""
    out = torch.zeros(8 * 1024, dtype=torch.long)
    asleep, awake, wake = threading.Event(), threading.Event(), threading.Event()

    def chunk(lo, hi):
        if threading.current_thread().name.startswith("bsp"):
            asleep.set()
            wake.wait(30)  # asleep until the test says, however loaded the machine
            awake.set()
        else:
            asleep.wait(30)  # the worker is inside its chunk before the caller goes on
        out[lo:hi] = torch.arange(lo, hi)
    monkeypatch.setattr(bsp_threads, "MIN_CHUNK", 1024)  # 4 chunks: the worker takes the last
    splitter = Splitter(2)
    splitter.run(chunk, out.numel())
    assert asleep.is_set() and not awake.is_set()  # returned while the worker still held its chunk
    assert torch.equal(out, torch.arange(out.numel())) and splitter.running
    wake.set()
    splitter.settle()
    assert awake.is_set() and not splitter.running


def test_each_thread_has_its_own_place_and_a_copy_starts_afresh(monkeypatch):
    """The caller's place is 0 and each pool thread keeps one of 1..threads-1 for good (bsp's
    bitmap row that its gathers mark); a pickled splitter has no pool, counts or places."""
    monkeypatch.setattr(bsp_threads, "MIN_CHUNK", 1)
    monkeypatch.setattr(bsp_threads, "CHECK_S", float("inf"))
    splitter, seen, lock = Splitter(3), {}, threading.Lock()

    def chunk(lo, hi):
        time.sleep(0.01)  # long enough that every pool thread takes chunks
        with lock:
            seen.setdefault(threading.get_ident(), set()).add(splitter.place())
    for _ in range(100):  # until both pool threads took a chunk, however busy the machine
        splitter.run(chunk, 60)
        splitter.settle()
        if len(seen) == 3:
            break
    assert seen[threading.get_ident()] == {0}
    workers = [places for ident, places in seen.items() if ident != threading.get_ident()]
    assert sorted(p for places in workers for p in places) == [1, 2] and all(len(p) == 1 for p in workers)
    copy = pickle.loads(pickle.dumps(splitter))
    assert copy.pool is None and copy.place() == 0 and not any(copy.counts.values()) and copy.threads == 3


def test_a_chunk_that_fails_raises_in_the_caller(monkeypatch):
    monkeypatch.setattr(bsp_threads, "MIN_CHUNK", 4)
    monkeypatch.setattr(bsp_threads, "CHECK_S", float("inf"))

    def chunk(lo, hi):
        raise ValueError(f"chunk {lo}-{hi}")
    with pytest.raises(ValueError, match="chunk 0-"):
        Splitter(2).run(chunk, 64)


FAULTS = """
import resource, sys, torch
from conveyor.partition.datasets import load_dataset
from conveyor.samplers import build_sampler
from conveyor.samplers.bsp_threads import keep_freed_memory
graph = load_dataset("synthetic", root=sys.argv[1], scale=0.002, seed=0)
sampler = build_sampler("bsp", graph, [15, 10, 5], threads=1)
seeds = [torch.randperm(graph.num_nodes, generator=torch.Generator().manual_seed(b))[:1024] for b in range(13)]
for batch in seeds[:3]:
    sampler.sample(batch)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for batch in seeds[3:]:
    sampler.sample(batch)
print(keep_freed_memory(), (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 10)
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the setting is glibc's")
def test_a_sampler_reuses_freed_memory_instead_of_faulting_it_in_again(synthetic_small, data_root):
    """A bsp sampler's process (a fresh one) keeps freed blocks for its next batch: after the first
    batches, a few page faults a batch at most (glibc's default thresholds cost from none to
    hundreds here, by the allocations' history, and thousands at scale 0.05)."""
    kept, faults = subprocess.run([sys.executable, "-c", FAULTS, str(data_root)], cwd=REPO, capture_output=True,
                                  text=True, check=True).stdout.split()
    assert kept == "True" and float(faults) < 50, (kept, faults)


def test_a_sampler_on_one_thread_starts_no_pool():
    sampler = build_sampler("bsp", random_graph(300, 3000), [5, 5], threads=1)
    sampler.sample(torch.arange(100))
    assert sampler.split.pool is None and sampler.torch_threads == 1


def test_a_hop_of_fewer_edges_than_split_from_runs_alone_at_any_thread_count(monkeypatch):
    """Below bsp_hop.SPLIT_FROM edges a hop is one compiled call on the caller, though the machine
    is idle and the chunks would be many; from it on, the same hop is split."""
    monkeypatch.setattr(bsp_threads, "MIN_CHUNK", 16)
    monkeypatch.setattr(bsp_threads, "CHECK_S", float("inf"))
    graph, seeds = power_law_graph(2000, 40000), torch.arange(0, 2000, 7)
    two = build_sampler("bsp", graph, [15, 10], seed=5, threads=2)
    edges = two.sample(seeds).edge_index_per_hop[-1].size(1)
    assert 2 * 16 * 2 < edges < bsp_hop.SPLIT_FROM
    assert two.split.counts["split"] == 0 and two.split.pool is None
    monkeypatch.setattr(bsp_hop, "SPLIT_FROM", edges // 4)
    two.sample(seeds)
    assert two.split.counts["split"] > 0


def test_a_batch_goes_the_way_batches_of_its_kind_took_less_time_an_edge(monkeypatch):
    """Each way is tried first (split, then alone, TRY_STREAK batches each); then the cheaper one a
    batch (split only if SPLIT_GAIN times alone's), and a trial of the other way from every
    TRY_EVERY-th batch on, so that a change (the host's other tenants leaving) is seen; a batch that
    went another way than the one before teaches nothing; a kind of batch (bsp: its seeds' bit
    length) learns apart from the others."""
    monkeypatch.setattr(bsp_threads, "CHECK_S", float("inf"))  # the machine counts as idle throughout
    splitter, kind, edges, streak, every = Splitter(2), 11, 300_000, bsp_threads.TRY_STREAK, bsp_threads.TRY_EVERY

    def decide(seconds_if_split: float, seconds_alone: float) -> bool:
        split = splitter.worth_splitting(kind)
        splitter.timed(split, seconds_if_split if split else seconds_alone, edges)
        return split
    assert [decide(0.010, 0.005) for _ in range(2 * streak)] == [True] * streak + [False] * streak
    assert splitter.costs[kind][:2] == [0.005 / edges, 0.010 / edges]  # each way's first batch left out
    rounds = 4 * every
    assert sum(decide(0.010, 0.005) for _ in range(rounds)) == 4 * streak  # alone is cheaper
    assert splitter.worth_splitting(13)  # a kind of its own, untried: split first
    assert sum(decide(0.0049, 0.005) for _ in range(rounds)) == 4 * streak  # split 2% cheaper: not enough
    # 4x cheaper: followed from the next trial of splitting on (a trial's batches weigh TRY_WEIGHT).
    assert sum(decide(0.00125, 0.005) for _ in range(rounds)) >= rounds - every - 4 * streak
    assert sum(decide(0.00125, 0.005) for _ in range(rounds)) == rounds - 4 * streak


def test_nothing_is_learnt_from_the_batch_that_starts_the_pool(monkeypatch):
    """The pool's start is no cost of splitting: that batch's time is left out, and the next batch
    of the kind tries splitting again."""
    monkeypatch.setattr(bsp_threads, "CHECK_S", float("inf"))
    monkeypatch.setattr(bsp_threads, "MIN_CHUNK", 1)
    splitter = Splitter(2)
    assert splitter.worth_splitting(11) and splitter.pool is None
    splitter.run(lambda lo, hi: None, 64)
    splitter.timed(True, 1.0, 100)
    assert splitter.pool is not None and splitter.costs[11][1] is None and splitter.counts["batches split"] == 1
    assert splitter.worth_splitting(11)
    splitter.run(lambda lo, hi: None, 64)
    splitter.timed(True, 1.0, 100)
    assert splitter.costs[11][1] == 0.01  # the second split batch of the kind teaches


def test_on_cores_other_processes_keep_busy_the_caller_splits_alone(monkeypatch):
    """With every core this process may use taken by a spinning process, SpareCores finds no room
    for a second thread, and the splits run on the caller alone (counted as such); a bsp sampler
    forced to 2 threads then runs each compiled hop of its batch as one call, and draws what 1
    thread draws."""
    monkeypatch.setattr(bsp_threads, "CHECK_S", 0.5)
    monkeypatch.setattr(bsp_hop, "SPLIT_FROM", 0)  # every hop would be split on an idle machine
    graph, seeds = power_law_graph(2000, 40000), torch.arange(0, 2000, 7)
    one, two = (build_sampler("bsp", graph, [15, 10], seed=5, threads=t) for t in (1, 2))
    spin = "import os, sys; os.sched_setaffinity(0, {int(sys.argv[1])})\nwhile True: pass"
    spinners = [subprocess.Popen([sys.executable, "-c", spin, str(core)]) for core in usable_cores()]
    try:
        time.sleep(1.0)  # the spinners are spinning
        splitter = Splitter(2)
        assert splitter.spare.enough() and two.split.spare.enough()  # no reading yet: the threads as asked
        time.sleep(1.0)
        splitter.run(lambda lo, hi: time.sleep(0.01), 1 << 20)
        assert not splitter.spare.enough()
        assert splitter.counts["alone"] == 1 and splitter.counts["split"] == 0 and splitter.pool is None
        assert splitter.alone() and splitter.counts["alone"] == 2
        a, b = one.sample(seeds), two.sample(seeds)
        assert two.split.counts["alone"] == 1 and two.split.counts["split"] == 0 and two.split.pool is None
        assert two.split.counts["batches"] == 1 and two.split.counts["batches split"] == 0
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()
    assert torch.equal(a.n_id, b.n_id)
    assert all(torch.equal(x, y) for x, y in zip(a.edge_index_per_hop + a.edge_pos_per_hop,
                                                 b.edge_index_per_hop + b.edge_pos_per_hop, strict=True))
    assert os.cpu_count() and isinstance(SpareCores(2).enough(), bool)
