"""bsp's own CPU threads (samplers/bsp_threads.py): the batches of one thread bit for bit, a caller
that never waits for a late worker inside a hop, and freed memory kept for the next batch."""
import pickle
import platform
import resource
import threading
import time

import pytest
import torch

from conveyor.samplers import bsp_threads, build_sampler
from conveyor.samplers.bsp_threads import Splitter, keep_freed_memory
from tests.helpers import power_law_graph, random_graph


@pytest.mark.parametrize("threads", [2, 3])
@pytest.mark.parametrize("draws", ["per_hop", "per_node"])
@pytest.mark.parametrize("weight_attr", [None, "w"])
def test_threads_draw_the_batches_of_one_thread_bit_for_bit(threads, draws, weight_attr, monkeypatch):
    monkeypatch.setattr(bsp_threads, "MIN_CHUNK", 16)  # small graphs' hops split into chunks too
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
    assert many.threads == threads and many.split.pool is not None  # the chunks did run on its pool
    copy = pickle.loads(pickle.dumps(many))  # the pool stays behind; the copy starts its own
    seeds = torch.arange(0, 2000, 3)
    assert torch.equal(one.sample(seeds).edge_index_per_hop[-1], copy.sample(seeds).edge_index_per_hop[-1])


def test_the_caller_does_a_late_workers_chunk_itself_and_settle_waits_for_it(monkeypatch):
    """A worker that is slow inside its chunk (here: asleep) holds nothing up: the caller writes
    that chunk too and returns; `settle` is what waits until the worker is out."""
    out = torch.zeros(8 * 1024, dtype=torch.long)
    asleep = threading.Event()

    def chunk(lo, hi):
        if threading.current_thread().name.startswith("bsp"):
            asleep.set()
            time.sleep(1.0)
        else:
            asleep.wait(5)  # the worker is inside its chunk before the caller goes on
        out[lo:hi] = torch.arange(lo, hi)
    monkeypatch.setattr(bsp_threads, "MIN_CHUNK", 1024)  # 4 chunks: the worker takes the last
    splitter = Splitter(2)
    start = time.perf_counter()
    splitter.run(chunk, out.numel())
    returned = time.perf_counter() - start
    assert torch.equal(out, torch.arange(out.numel())) and returned < 0.8
    splitter.settle()
    assert time.perf_counter() - start >= 0.95 and not splitter.running


def test_a_chunk_that_fails_raises_in_the_caller(monkeypatch):
    monkeypatch.setattr(bsp_threads, "MIN_CHUNK", 4)

    def chunk(lo, hi):
        raise ValueError(f"chunk {lo}-{hi}")
    with pytest.raises(ValueError, match="chunk 0-"):
        Splitter(2).run(chunk, 64)


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the setting is glibc's")
def test_freed_memory_is_reused_not_faulted_in_again():
    """After `keep_freed_memory`, a 64 MB block freed and allocated again costs no page faults
    (glibc would unmap and map it again: 16,384 faults)."""
    assert keep_freed_memory()
    torch.empty(64 << 20, dtype=torch.uint8).fill_(1)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    torch.empty(64 << 20, dtype=torch.uint8).fill_(1)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before < 1000


def test_a_sampler_on_one_thread_starts_no_pool():
    sampler = build_sampler("bsp", random_graph(300, 3000), [5, 5], threads=1)
    sampler.sample(torch.arange(100))
    assert sampler.split.pool is None and sampler.torch_threads == 1
