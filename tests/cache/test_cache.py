"""The feature cache: exact features whatever is cached, exact counters, the PaGraph ranking."""
from __future__ import annotations

import psutil
import pytest
import torch

from conveyor.cache import build_cache
from conveyor.core import ConveyorError
from conveyor.partition import Graph
from conveyor.samplers import build_sampler
from tests.helpers import skewed_graph

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def hand_graph(dtype=torch.float32) -> Graph:
    """Out-degrees 0:3 1:1 2:3 3:0 4:2 5:1, so the degree order is 0, 2, 4, 1, 5, 3."""
    src = [0, 0, 0, 2, 2, 2, 4, 4, 1, 5]
    dst = [1, 2, 3, 0, 4, 5, 0, 1, 3, 3]
    x = torch.arange(6 * 4, dtype=torch.float32).view(6, 4).to(dtype)
    return Graph.from_edge_index(torch.tensor([src, dst]), 6, x=x)




def cached_ids(cache) -> torch.Tensor:
    """The cached node ids in slot order (slot 0 first)."""
    if cache.slot is None:
        return torch.empty(0, dtype=torch.long)
    ids = torch.nonzero(cache.slot >= 0).squeeze(1).cpu()
    return ids[torch.argsort(cache.slot.cpu()[ids])]


def test_the_degree_ranking_counts_int32_indices_without_an_int64_copy(monkeypatch):
    """The degree order (the cache's, a partition's) counts `indices` a chunk at a time as they
    are (int32): its largest allocation is one chunk's counters, not an int64 copy of indices
    (1 GB at products' scale)."""
    from torch.profiler import ProfilerActivity, profile

    from conveyor.cache.policies import degree_ranking
    from conveyor.partition import graph as graph_module
    monkeypatch.setattr(graph_module, "DEGREE_CHUNK", 1 << 14)
    num_nodes, num_edges = 500, 400_000
    indices = torch.randint(0, num_nodes, (num_edges,), dtype=torch.int32, generator=torch.Generator().manual_seed(0))
    graph = Graph(indptr=torch.linspace(0, num_edges, num_nodes + 1).long(), indices=indices)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        ranking = degree_ranking(graph)
    largest = max(event.cpu_memory_usage for event in prof.events())
    assert 0 < largest <= 8 * (1 << 14) < 4 * num_edges  # a chunk's int64 ones; indices alone is 4 bytes an edge
    counts = torch.bincount(indices.long(), minlength=num_nodes)
    assert torch.equal(ranking, torch.sort(counts, descending=True, stable=True).indices)


def test_degree_caches_the_top_out_degree_nodes_ties_by_smaller_id():
    graph = hand_graph()
    assert graph.out_degree().tolist() == [3, 1, 3, 0, 2, 1]
    assert cached_ids(build_cache("degree", graph, capacity=0.5)).tolist() == [0, 2, 4]
    # 4 of 6 nodes: nodes 1 and 5 tie at out-degree 1; the smaller id wins.
    assert cached_ids(build_cache("degree", graph, capacity=4 / 6)).tolist() == [0, 2, 4, 1]
    assert cached_ids(build_cache("degree", graph, capacity=1.0)).tolist() == [0, 2, 4, 1, 5, 3]


def test_hit_and_miss_counts_are_exact():
    graph = hand_graph()
    cache = build_cache("degree", graph, capacity=0.5)  # caches 0, 2, 4
    row = 4 * 4  # 4 float32 features
    out = cache.gather(torch.tensor([3, 0, 0, 5, 4, 1]))
    assert torch.equal(out, graph.x[[3, 0, 0, 5, 4, 1]])
    last = cache.last_batch_stats()
    assert (last["hits"], last["misses"]) == (3, 3)
    assert last["bytes_from_host"] == 3 * row and last["bytes_from_cache"] == 3 * row
    assert last["hit_ratio"] == 0.5
    for ids, hits, misses in (([2, 3], 1, 1), ([4, 0, 2, 4], 4, 0), ([5, 3, 1], 0, 3)):
        assert torch.equal(cache.gather(torch.tensor(ids)), graph.x[ids])
        assert (cache.last_batch_stats()["hits"], cache.last_batch_stats()["misses"]) == (hits, misses)
    stats = cache.stats()
    assert (stats["hits"], stats["misses"], stats["batches"]) == (8, 7, 4)
    assert stats["bytes_from_host"] == 7 * row and stats["hit_ratio"] == 8 / 15
    assert stats["capacity_nodes"] == 3 and stats["cached_bytes"] == 3 * row
    assert stats["map_bytes"] == 6 * 4 and stats["capacity_fraction"] == 0.5
    assert stats["gather_time_s"] > 0
    cache.reset_stats()
    stats = cache.stats()
    assert (stats["hits"], stats["misses"], stats["bytes_from_host"], stats["batches"]) == (0, 0, 0, 0)
    assert stats["capacity_nodes"] == 3  # resetting counters keeps the cache


@pytest.mark.parametrize("policy", ["degree", "none"])  # hits and misses; misses only
def test_gather_writes_into_the_given_tensor(policy):
    """What the pipeline's loader does: the rows land in `out` (a view of its slot), not a copy."""
    graph = hand_graph()
    cache = build_cache(policy, graph, capacity=0.5)
    buffer = torch.full((20,), -1.0)
    out = buffer[:12].view(3, 4)
    assert cache.gather(torch.tensor([3, 0, 5]), out=out).data_ptr() == buffer.data_ptr()
    assert torch.equal(out, graph.x[[3, 0, 5]]) and (buffer[12:] == -1).all()
    with pytest.raises(ValueError, match="out must be"):
        cache.gather(torch.tensor([3, 0]), out=out)


def test_none_policy_reads_everything_from_host():
    graph = hand_graph()
    cache = build_cache("none", graph, capacity=1.0)
    assert cache.capacity_nodes == 0 and cache.slot is None
    cache.gather(torch.tensor([0, 1, 2]))
    assert cache.stats()["misses"] == 3 and cache.stats()["bytes_from_host"] == 3 * 16


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("capacity", [0, 0.25, 1.0])
@pytest.mark.parametrize("policy", ["degree", "random", "optimal", "none"])
def test_gather_equals_features_for_every_policy_capacity_and_dtype(policy, capacity, dtype):
    graph = skewed_graph(dtype=dtype)
    gen = torch.Generator().manual_seed(1)
    trace = [torch.randint(0, graph.num_nodes, (100,), generator=gen) for _ in range(4)]
    cache = build_cache(policy, graph, capacity=capacity,
                        trace=trace if policy == "optimal" else None)
    assert cache.capacity_nodes == (0 if policy == "none" else round(capacity * graph.num_nodes))
    n_id = torch.randint(0, graph.num_nodes, (500,), generator=gen)  # many duplicates
    for ids in (n_id, n_id.int(), torch.arange(graph.num_nodes).flip(0),
                torch.empty(0, dtype=torch.long)):
        out = cache.gather(ids)
        assert out.dtype == dtype and out.shape == (ids.numel(), graph.x.size(1))
        assert torch.equal(out, graph.x[ids.long()])
    assert cache.stats()["hits"] + cache.stats()["misses"] == 500 + 500 + graph.num_nodes


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", torch.float16])
def test_dtype_converts_once_and_gather_stays_in_it(dtype):
    graph = skewed_graph()
    cache = build_cache("degree", graph, capacity=0.3, dtype=dtype)
    want = graph.x.to(cache.dtype)
    assert cache.dtype in (torch.float16, torch.bfloat16)
    n_id = torch.randperm(graph.num_nodes)[:100]
    assert torch.equal(cache.gather(n_id), want[n_id])
    assert cache.row_bytes == 16 * 2 and graph.x.dtype == torch.float32  # graph untouched


def test_capacity_in_bytes_and_fraction_rounding():
    graph = skewed_graph(dim=16)  # 64-byte float32 rows
    assert build_cache("degree", graph, capacity="1KiB").capacity_nodes == 16
    assert build_cache("degree", graph, capacity="1KB").capacity_nodes == 15  # 1000 // 64
    assert build_cache("degree", graph, capacity="1 KiB", dtype="bfloat16").capacity_nodes == 32
    assert build_cache("degree", graph, capacity="2GiB").capacity_nodes == graph.num_nodes
    assert build_cache("degree", graph, capacity="0.5").capacity_nodes == 150
    assert build_cache("degree", graph, capacity=1).capacity_nodes == graph.num_nodes
    assert build_cache("degree", graph, capacity=0).capacity_nodes == 0
    assert build_cache("degree", graph, capacity=0.29).capacity_nodes == 87  # round(86.999...)


def test_auto_capacity_fits_free_host_memory_on_cpu():
    graph = skewed_graph()
    cache = build_cache("degree", graph, capacity="auto", reserve="1GiB")
    assert cache.capacity_nodes == graph.num_nodes  # the tiny graph fits, capped at every node
    assert set(cache.fit_info) >= {"total_bytes", "peak_bytes", "reserve_bytes", "budget_bytes"}
    # A peak that fills the whole machine leaves no room: the cache empties but stays exact.
    assert cache.fit_to_free_memory(peak_bytes=psutil.virtual_memory().total) == 0
    assert cache.rows.untyped_storage().nbytes() == 0 and cache.map_bytes == 0  # memory freed
    n_id = torch.randperm(graph.num_nodes)[:50]
    assert torch.equal(cache.gather(n_id), graph.x[n_id]) and cache.stats()["hits"] == 0
    assert build_cache("degree", graph, capacity="auto", reserve="1000TB").capacity_nodes == 0
    # Room for exactly 10 rows plus the slot map (4 bytes a node) beside a given peak.
    total = psutil.virtual_memory().total
    room = graph.num_nodes * 4 + 10 * 64
    cache = build_cache("degree", graph, capacity="auto", reserve=0, prefetch=0)
    assert cache.fit_to_free_memory(peak_bytes=total - room) == 10
    assert cache.fit_to_free_memory(peak_bytes=total - room, prefetch=64) == 9
    # An explicit capacity is never refitted.
    fixed = build_cache("degree", graph, capacity=0.1)
    assert fixed.fit_to_free_memory(peak_bytes=total) == 30 and fixed.capacity_nodes == 30


def test_optimal_ranks_by_trace_frequency_and_beats_degree_on_its_trace():
    graph = hand_graph()
    trace = [torch.tensor([5, 3, 1]), torch.tensor([5, 3]), torch.tensor([5, 0])]
    assert cached_ids(build_cache("optimal", graph, capacity=0.5, trace=trace)).tolist() == [5, 3, 0]
    big = skewed_graph()
    sampler = build_sampler("bsp", big, [5, 3], seed=0)
    batches = [sampler.sample(s) for s in torch.randperm(big.num_nodes)[:120].split(40)]
    ratios = {}
    for policy in ("degree", "optimal", "random"):
        cache = build_cache(policy, big, capacity=0.2,
                            trace=batches if policy == "optimal" else None)
        for b in batches:
            assert torch.equal(cache.gather(b.n_id), big.x[b.n_id])
        ratios[policy] = cache.stats()["hit_ratio"]
    assert ratios["optimal"] >= ratios["degree"] > ratios["random"]


def test_random_policy_is_seeded():
    graph = skewed_graph()
    a = cached_ids(build_cache("random", graph, capacity=0.2, seed=3))
    b = cached_ids(build_cache("random", graph, capacity=0.2, seed=3))
    c = cached_ids(build_cache("random", graph, capacity=0.2, seed=4))
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert a.numel() == 60 and torch.unique(a).numel() == 60


def test_precomputed_ranking_is_used_as_given():
    graph = skewed_graph()
    ranking = torch.tensor([7, 3, 250, 11])
    assert cached_ids(build_cache("degree", graph, capacity=0.01, ranking=ranking)).tolist() == [7, 3, 250]
    cache = build_cache("degree", graph, capacity=1.0, ranking=ranking)  # capped at the ranking
    assert cached_ids(cache).tolist() == [7, 3, 250, 11]
    n_id = torch.arange(20)
    assert torch.equal(cache.gather(n_id), graph.x[n_id]) and cache.stats()["hits"] == 3


def test_gather_of_a_sampled_batch():
    graph = skewed_graph()
    batch = build_sampler("bsp", graph, [4, 3], seed=0).sample(graph.train_idx[:32])
    cache = build_cache("degree", graph, capacity=0.2)
    assert torch.equal(cache.gather(batch.n_id), graph.x[batch.n_id])


BAD_INPUTS = {
    "id too large": (dict(), lambda c: c.gather(torch.tensor([0, 300])), "outside 0..299"),
    "negative id": (dict(), lambda c: c.gather(torch.tensor([-1, 2])), "outside 0..299"),
    "negative id, no cache": (dict(policy="none"), lambda c: c.gather(torch.tensor([-1])), "outside"),
    "float ids": (dict(), lambda c: c.gather(torch.tensor([1.0])), "integer node ids"),
    "2-D ids": (dict(), lambda c: c.gather(torch.zeros(2, 2, dtype=torch.long)), "1-D"),
    "capacity < 0": (dict(capacity=-0.1), None, "outside \\[0, 1\\]"),
    "capacity > 1": (dict(capacity=1.5), None, "outside \\[0, 1\\]"),
    "capacity nan": (dict(capacity=float("nan")), None, "outside \\[0, 1\\]"),
    "capacity bool": (dict(capacity=True), None, "capacity must be"),
    "capacity unitless big": (dict(capacity="512"), None, "with a unit"),
    "bad unit": (dict(capacity="12XB"), None, "byte size"),
    "no number": (dict(capacity="MB"), None, "byte size"),
    "negative bytes": (dict(capacity="-1GB"), None, "byte size"),
    "two dots": (dict(capacity="1.2.3MB"), None, "byte size"),
    "bad reserve": (dict(reserve="lots"), None, "cache.reserve"),
    "unknown policy": (dict(policy="lru"), None, "unknown cache policy"),
    "optimal without trace": (dict(policy="optimal"), None, "trace="),
    "ranking with random": (dict(policy="random", ranking=torch.arange(3)), None, "needs policy"),
    "ranking duplicates": (dict(ranking=torch.tensor([1, 1])), None, "more than once"),
    "ranking out of range": (dict(ranking=torch.tensor([1, 300])), None, "300 nodes"),
    "trace out of range": (dict(policy="optimal", trace=[torch.tensor([400])]), None, "trace"),
    "integer dtype": (dict(dtype="int8"), None, "cache.dtype"),
    "bad device": (dict(device="tpu"), None, "device"),
}


@pytest.mark.parametrize("case", BAD_INPUTS, ids=list(BAD_INPUTS))
def test_bad_input_raises_conveyor_error(case):
    kwargs, action, message = BAD_INPUTS[case]
    kwargs = {"policy": "degree", "capacity": 0.5, **kwargs}
    graph = skewed_graph()
    with pytest.raises(ConveyorError, match=message):
        cache = build_cache(kwargs.pop("policy"), graph, **kwargs)
        action(cache)


def test_graph_without_features_is_refused():
    graph = hand_graph()
    graph.x = None
    with pytest.raises(ConveyorError, match="no node features"):
        build_cache("degree", graph, capacity=0.5)
    graph.x = torch.zeros(5, 2)
    with pytest.raises(ConveyorError, match="num_nodes, F"):
        build_cache("degree", graph, capacity=0.5)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("dtype", DTYPES)
def test_cuda_gather_and_auto_fit(dtype):
    graph = skewed_graph(num_nodes=5000, num_edges=50000, dtype=dtype)
    n_id = torch.randint(0, graph.num_nodes, (4000,))
    for capacity in (0, 0.2, 1.0):
        cache = build_cache("degree", graph, capacity=capacity, device="cuda")
        for ids in (n_id, n_id.cuda()):
            out = cache.gather(ids)
            assert out.is_cuda and torch.equal(out.cpu(), graph.x[n_id])
    cache = build_cache("degree", graph, capacity="auto", device="cuda")
    assert cache.capacity_nodes == 0  # CUDA: empty until the trainer has measured its peak
    cache.gather(n_id)
    assert cache.fit_to_free_memory() == graph.num_nodes
    assert torch.equal(cache.gather(n_id).cpu(), graph.x[n_id]) and cache.last_batch_stats()["misses"] == 0
    with pytest.raises(ConveyorError, match="outside"):
        cache.gather(torch.tensor([graph.num_nodes], device="cuda"))


@pytest.mark.parametrize("capacity", [0, 0.5, 1.0, "auto"])
def test_on_the_host_the_cache_reads_the_graphs_features_in_place(capacity):
    """No private copy on CPU: the rows come from graph.x itself, whatever the capacity; the hits
    are still the ranked rows a device cache would hold."""
    graph = hand_graph()
    cache = build_cache("degree", graph, capacity=capacity)
    assert cache.features.data_ptr() == graph.x.data_ptr() and cache.shares_features
    assert cache.copied_bytes == 0 and cache.rows.untyped_storage().nbytes() == 0
    out = cache.gather(torch.tensor([3, 0, 2, 5]))
    assert torch.equal(out, graph.x[[3, 0, 2, 5]])
    cached = set(cached_ids(cache).tolist())
    assert cache.last_batch_stats()["hits"] == len(cached & {3, 0, 2, 5})
    assert cache.stats()["copied_bytes"] == 0
    with pytest.raises(ConveyorError, match="outside 0..5"):
        cache.gather(torch.tensor([1, 6]))


def test_a_cache_in_another_dtype_converts_each_gather_never_the_whole_matrix():
    graph = hand_graph()
    cache = build_cache("degree", graph, capacity=0.5, dtype="bfloat16")
    assert cache.features.data_ptr() == graph.x.data_ptr() and cache.copied_bytes == 0
    assert cache.dtype == torch.bfloat16 and cache.row_bytes == 4 * 2
    assert torch.equal(cache.gather(torch.tensor([4, 1])), graph.x[[4, 1]].bfloat16())
