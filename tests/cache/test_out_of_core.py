"""Features larger than memory: the host tier over a feature file (exact hits per tier on known
traces, the rows equal x[n_id] in float16 and float32, merged reads counted, I/O threads used,
look-ahead that removes the misses of a replayed window), `trainer.max_batches`, the evaluation
rule for huge graphs, and epochs on file-mapped features, serial and async."""
from __future__ import annotations

import json
import os
import sys
import warnings

import numpy as np
import pytest
import torch

from conveyor.cache import build_cache
from conveyor.cache.disk import DiskRows
from conveyor.cache.host_budget import FITS_SHARE, HOST_SHARE, host_tier_bytes
from conveyor.core import ConveyorError
from conveyor.partition import Graph
from conveyor.trainer.loop.layerwise import resolve_inference
from conveyor.trainer.models.sampled import build_model
from conveyor.trainer.run import train
from tests.helpers import make_config, random_graph

N, F = 200, 1024  # float16 rows of 2 KiB: a page holds two, so a gap of one row is read across


def mapped(tmp_path, dtype=np.float16, n=N, f=F, name="x.npy") -> torch.Tensor:
    """A feature matrix written as .npy and mapped back read-only, as a file-mapped graph's x is."""
    path = tmp_path / name
    out = np.lib.format.open_memmap(path, mode="w+", dtype=dtype, shape=(n, f))
    out[:] = np.random.default_rng(0).standard_normal((n, f)).astype(dtype)
    out.flush()
    del out
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a read-only array: conveyor only reads it
        return torch.from_numpy(np.load(path, mmap_mode="r"))


def graph_over(x: torch.Tensor) -> Graph:
    base = random_graph(x.size(0), 4 * x.size(0))
    return Graph(base.indptr, base.indices, x=x)


def tiered(x, host_rows: int, dtype=None, **kw):
    """A CPU cache whose host tier keeps nodes 0..: the ranking is the identity; `host_rows` rows of
    budget, a quarter of them the look-ahead window."""
    budget = f"{host_rows * x.size(1) * x.element_size()}B"
    return build_cache("degree", graph_over(x), capacity=0, host_capacity=budget, ranking=torch.arange(x.size(0)),
                       dtype=dtype, **kw)


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_each_tier_serves_exactly_its_rows_and_the_rows_are_x(tmp_path, dtype):
    x = mapped(tmp_path, dtype)
    cache = tiered(x, 40, dtype="float32")  # 30 static rows (nodes 0..29) and a window of 10
    host = cache.host
    assert (host.static, host.window_capacity, host.disk.from_file) == (30, 10, True)
    ids = torch.tensor([33, 0, 31, 29, 5, 40, 30, 41])
    out = cache.gather(ids)
    assert out.dtype == torch.float32 and torch.equal(out, x[ids].float())
    s = cache.stats()
    assert (s["host_hits"], s["window_hits"], s["disk_rows"]) == (3, 0, 5)
    # 30, 31, 33 in one read (the gap of one row, at most a page, read across), 40-41 in another
    assert s["disk_reads"] == 2 and s["disk_bytes"] == 6 * F * x.element_size()
    assert (s["host_hit_ratio"], s["disk_ratio"], s["device_hit_ratio"]) == (3 / 8, 5 / 8, 0.0)
    same = cache.gather(ids.flip(0))
    assert torch.equal(same, x[ids.flip(0)].float())


def test_float16_features_stay_float16_on_disk_and_are_converted_per_gather(tmp_path):
    x = mapped(tmp_path)
    cache = tiered(x, 40, dtype="float32")
    assert cache.features is x and cache.host.static_rows.dtype == torch.float16  # nothing converted whole
    kept = build_cache("degree", graph_over(x), capacity=0, host_capacity=f"{40 * F * 2}B")
    ids = torch.tensor([7, 150, 3])
    assert kept.dtype == torch.float16 and torch.equal(kept.gather(ids), x[ids])


def test_misses_are_read_by_several_io_threads(tmp_path):
    x = mapped(tmp_path, n=4000, f=64)  # 128-byte rows
    cache = tiered(x, 4, io_threads=4)  # nodes 0-2 in the host tier
    ids = torch.arange(100, 4000, 40)  # 98 runs of three rows, 37 rows (4,736 bytes) apart
    ids = torch.cat([ids, ids + 1, ids + 2])
    out = cache.gather(ids)
    assert torch.equal(out, x[ids])
    s = cache.stats()
    assert s["disk_rows"] == 294 and s["disk_reads"] == 98 and s["disk_bytes"] == 294 * 128
    assert s["io_threads_used"] == 4


def test_look_ahead_removes_the_misses_of_a_replayed_window(tmp_path):
    x = mapped(tmp_path)
    window = [torch.tensor([50, 51, 1, 60]), torch.tensor([60, 70, 2, 51]), torch.tensor([80, 70, 3])]
    cache = tiered(x, 40)  # static 0..29, window of 10 rows
    for ids in window:
        cache.gather(ids)
    assert cache.stats()["disk_rows"] == 8
    cache.reset_stats()
    tickets = [cache.look_ahead(ids) for ids in window]  # the loader sees the coming batches
    assert cache.stats()["prefetched_rows"] == 5  # 50 51 60 70 80: a row two batches need is read once
    for ids, ticket in zip(window, tickets):
        assert torch.equal(cache.gather(ids, ticket=ticket), x[ids])
        cache.release(ticket)
    s = cache.stats()
    assert (s["host_hits"], s["window_hits"], s["disk_rows"]) == (3, 8, 0)
    assert s["disk_bytes"] == 5 * F * 2  # the prefetches' bytes, counted as their batches waited for them
    host = cache.host
    assert host.free_count == host.window_capacity and int((host.slot >= host.static).sum()) == 0


def test_a_row_stays_in_the_window_while_a_coming_batch_needs_it(tmp_path):
    x = mapped(tmp_path)
    cache = tiered(x, 40)
    first, second = cache.look_ahead(torch.tensor([50, 60])), cache.look_ahead(torch.tensor([60]))
    cache.gather(torch.tensor([50, 60]), ticket=first)
    cache.release(first)  # 50 goes, 60 stays for the second batch
    host = cache.host
    assert host.slot[50] == -1 and host.slot[60] >= host.static
    cache.gather(torch.tensor([60]), ticket=second)
    cache.release(second)
    assert host.slot[60] == -1 and cache.stats()["window_hits"] == 3


def test_a_full_window_reads_the_rest_when_gathered(tmp_path):
    x = mapped(tmp_path)
    cache = tiered(x, 40)  # a window of 10 rows
    ids = torch.arange(100, 115)
    ticket = cache.look_ahead(ids)
    assert torch.equal(cache.gather(ids, ticket=ticket), x[ids])
    cache.release(ticket)
    s = cache.stats()
    assert (s["prefetched_rows"], s["window_hits"], s["disk_rows"]) == (10, 10, 5)


def test_auto_adds_a_host_tier_only_for_a_mapped_matrix_too_large_for_memory(tmp_path):
    x = mapped(tmp_path)
    size = x.numel() * x.element_size()
    assert host_tier_bytes(x, "auto", room=int(size / FITS_SHARE)) == 0  # fits: the page cache holds it
    room = size  # twice too large for FITS_SHARE
    assert host_tier_bytes(x, "auto", room=room) == int(room * HOST_SHARE) - N * 4
    in_memory = x.clone()
    assert host_tier_bytes(in_memory, "auto", room=1) == 0  # already in memory: read in place
    assert build_cache("degree", graph_over(in_memory), capacity=0.5).host is None
    assert host_tier_bytes(in_memory, "0.5") == N // 2 * F * 2
    with pytest.raises(ConveyorError, match="cache.host_capacity"):
        make_config("data=synthetic", "cache=degree", "cache.host_capacity=2")


def test_rows_of_a_matrix_that_is_no_files_map_are_read_in_place(tmp_path):
    x = mapped(tmp_path).clone()
    disk = DiskRows(x)
    ids = torch.tensor([3, 4, 90])
    assert not disk.from_file and torch.equal(disk.read(ids), x[ids]) and disk.counters["rows"] == 3


def test_auto_evaluation_is_sampled_above_the_node_limit_unless_asked():
    model = build_model(make_config("data=synthetic").model, 8, 4, 2)
    assert resolve_inference("auto", model, 1_000, 10_000) == "layerwise"
    assert resolve_inference("auto", model, 100_000, 10_000) == "sampled"
    assert resolve_inference("layerwise", model, 100_000, 10_000) == "layerwise"  # asked for
    assert resolve_inference("auto", model, 100_000, None) == "layerwise"


@pytest.fixture(scope="module")
def synthetic_root(tmp_path_factory):
    return tmp_path_factory.mktemp("data")


def small_run(tmp_path, root, name, *overrides):
    out = tmp_path / name
    cfg = make_config("data=synthetic", "data.scale=0.002", f"data.root={root}", "model=sage", "model.hidden=16",
                      "sampler=bsp", "sampler.fanouts=[5,5]", "trainer.epochs=1", "trainer.batch_size=64",
                      "cache=degree", f"run.out_dir={out}", *overrides)
    result = train(cfg)
    return result, json.loads((out / "metrics.json").read_text())


def test_max_batches_bounds_the_epoch_and_huge_graphs_evaluate_sampled(tmp_path, synthetic_root):
    result, metrics = small_run(tmp_path, synthetic_root, "limited", "pipeline=serial", "trainer.max_batches=3",
                                "trainer.layerwise_max_nodes=1000")
    assert metrics["epochs"][0]["batches"] == 3 and result.final["inference"] == "sampled"
    said = [line for line in (tmp_path / "limited" / "run.log").read_text().splitlines() if "evaluation:" in line]
    assert len(said) == 1 and "trainer.layerwise_max_nodes=1,000" in said[0] and "4,505 val/test" in said[0]
    with pytest.raises(ConveyorError, match="trainer.max_batches"):
        make_config("data=synthetic", "trainer.max_batches=0")


def test_a_saved_graphs_mapped_features_are_read_from_its_file(tmp_path, synthetic_root):
    small_run(tmp_path, synthetic_root, "build", "pipeline=serial", "trainer.max_batches=1")  # saves the graph
    graph = Graph.load(next(synthetic_root.rglob("graph.pt")).parent, mmap=True)
    cache = build_cache("degree", graph, capacity=0, host_capacity=0.1, dtype="float16")
    ids = torch.randperm(graph.num_nodes, generator=torch.Generator().manual_seed(0))[:500]
    assert cache.host.disk.from_file and torch.equal(cache.gather(ids), graph.x[ids].half())
    assert cache.stats()["disk_rows"] > 0


@pytest.mark.parametrize("pipeline", ["serial", "async"])
def test_an_epoch_on_file_mapped_features_through_the_host_tier(tmp_path, synthetic_root, pipeline):
    _, metrics = small_run(tmp_path, synthetic_root, pipeline, f"pipeline={pipeline}", "cache.host_capacity=0.2",
                           "cache.dtype=float32", "trainer.max_batches=6", "trainer.inference=sampled")
    epoch = metrics["epochs"][0]
    assert epoch["batches"] == 6
    ratios = [epoch[k] for k in ("device_hit_ratio", "host_hit_ratio", "window_hit_ratio", "disk_ratio")]
    assert ratios[0] == 0 and abs(sum(ratios) - 1) < 1e-9  # every row from exactly one tier, on CPU
    assert ratios[1] > 0.2 and ratios[2] > 0 and epoch["disk_bytes"] > 0  # hot rows held; look-ahead used


# -- the principle, small: one epoch inside a memory cgroup smaller than the dataset's files ------

CGROUP_SCALE = 0.04  # 4.4M nodes, 64.6M edges: 1.4 GB of files (x 1.1 GB of float16)
LIMIT_SHARE = {"serial": 0.7, "async": 0.9}  # of the files' bytes; the async run has three interpreters


def cgroup_v1_writable() -> bool:
    try:
        from benchmarks.out_of_core import own_cgroup
        return os.access(own_cgroup(), os.W_OK)
    except (OSError, StopIteration):
        return False


@pytest.fixture(scope="module")
def papers_files(tmp_path_factory):
    from conveyor.partition.datasets import load_dataset
    root = tmp_path_factory.mktemp("papers")
    graph = load_dataset("synthetic_papers", root=root, scale=CGROUP_SCALE, seed=0)
    files = [p for p in root.rglob("*") if p.is_file()]
    return root, graph.num_nodes, files


@pytest.mark.slow
@pytest.mark.skipif(not cgroup_v1_writable(), reason="needs a writable cgroup v1 memory controller")
@pytest.mark.parametrize("pipeline", ["serial", "async"])
def test_one_epoch_inside_a_memory_cgroup_smaller_than_the_files(tmp_path, papers_files, pipeline):
    from benchmarks.out_of_core import in_cgroup
    root, _, files = papers_files
    size = sum(f.stat().st_size for f in files)
    for f in files:  # out of the page cache: whatever this run reads is charged to its cgroup
        fd = os.open(f, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
    limit = int(size * LIMIT_SHARE[pipeline])
    out = tmp_path / "run"
    command = [sys.executable, "launch.py", "data=synthetic_papers", f"data.scale={CGROUP_SCALE}", f"data.root={root}",
               f"pipeline={pipeline}", "trainer.epochs=1", "trainer.batch_size=4096", "sampler.fanouts=[5,5]",
               "model.hidden=32", "trainer.progress=false", "run.device=cpu", "trainer.layerwise_max_nodes=1000000",
               f"run.out_dir={out}"]
    result = in_cgroup(command, limit, timeout=900)
    assert result["rc"] == 0 and not result["oom_killed"], result["tail"]
    assert result["max_usage_bytes"] <= limit < size
    epoch = json.loads((out / "metrics.json").read_text())["epochs"][0]
    train_nodes = json.loads(next(root.rglob("meta.json")).read_text())["fields"]["train_idx"]["shape"][0]
    assert epoch["batches"] == -(-train_nodes // 4096)  # the whole epoch
    assert epoch["host_hit_ratio"] > 0 and epoch["disk_bytes"] > 0  # the host tier came by itself (auto)
    assert "evaluation: sampled" in (out / "run.log").read_text()  # 4.4M nodes > layerwise_max_nodes
