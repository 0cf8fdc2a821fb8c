"""Graphs larger than memory, the build half (issue 47): the mapped layout, `data=synthetic_papers`
built streaming, atomic builds, the stages mapping the same files, a build inside a memory cgroup
smaller than its output, and papers100M's raw files converted streaming."""
from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from conveyor.core.errors import ConveyorError
from conveyor.core.file_maps import file_maps, file_offset
from conveyor.partition import Graph
from conveyor.partition.datasets import load_dataset
from conveyor.partition.datasets import synthetic_papers as sp
from conveyor.partition.graph import max_gap
from conveyor.partition.mapped import MappedWriter
from conveyor.pipeline.sharing import share_graph
from tests.helpers import REPO

SCALE = 0.0005  # 55,530 nodes in 4 blocks, ~808K edges, ~16 MB of files


@pytest.fixture(scope="module")
def papers(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    return root, load_dataset("synthetic_papers", root=root, scale=SCALE, seed=3)


def folder_of(root: Path, scale=SCALE, seed=3) -> Path:
    return root / "synthetic_papers" / f"scale{float(scale)}_seed{seed}"


def test_the_csc_is_exact_and_papers_shaped(papers):
    _, g = papers
    size = sp.sizes(SCALE)
    n, indptr, indices = g.num_nodes, g.indptr.numpy(), g.indices.numpy()
    assert n == size["nodes"] == 55_530 and indptr.dtype == np.int64 and indices.dtype == np.int32
    assert indptr[0] == 0 and indptr[-1] == indices.size and (np.diff(indptr) >= 0).all()
    dst = np.repeat(np.arange(n), np.diff(indptr))
    keys = dst * n + indices
    assert (np.diff(keys) > 0).all()  # sorted by destination, then source; no repeated edge
    assert indices.min() >= 0 and indices.max() < n and not (indices == dst).any()  # no self loop
    deg = np.diff(indptr)
    mean = sp.PAPERS_EDGES / sp.PAPERS_NODES
    lam = sp.in_degree_tail(mean, n // sp.DEGREE_CAP)
    assert abs(deg.mean() - mean) < 0.02 * mean  # 14.55, papers100M's mean in-degree
    assert abs((deg == 0).mean() - (1 - (1 + 1 / lam) ** -sp.DEGREE_TAIL)) < 0.01  # ~12% never cited
    tail = (deg >= 100).mean()  # the Lomax tail: P(deg >= 100) = (1 + 100 / lam)^-2
    assert abs(tail - (1 + 100 / lam) ** -sp.DEGREE_TAIL) < 0.15 * tail
    assert deg.max() <= n // sp.DEGREE_CAP and deg.max() > 20 * mean  # hubs, capped
    out = np.bincount(indices, minlength=n)
    assert np.sort(out)[-n // 100:].sum() > 0.08 * indices.size  # the top 1% of sources: hot rows


def test_features_labels_splits_and_years_are_papers_shaped(papers):
    _, g = papers
    size = sp.sizes(SCALE)
    assert g.x.dtype == torch.float16 and tuple(g.x.shape) == (g.num_nodes, 128) and g.num_classes == 172
    assert [g.train_idx.numel(), g.val_idx.numel(), g.test_idx.numel()] == [size["train"], size["val"], size["test"]]
    assert [size["train"], size["val"], size["test"]] == [604, 63, 107]  # 1.087% / 0.113% / 0.193%
    labelled = torch.cat([g.train_idx, g.val_idx, g.test_idx])
    assert labelled.unique().numel() == labelled.numel()
    assert int((g.y >= 0).sum()) == labelled.numel() and bool((g.y[labelled] < 172).all())
    year = g.node_attrs["year"]
    assert bool((year[g.val_idx] == 2018).all() and (year[g.test_idx] == 2019).all())
    assert int(year[g.train_idx].max()) <= 2017 and int(year.min()) >= 1950
    # the class centroid shows through the noise: features of one class agree on their mean
    x, y = g.x[labelled].float(), g.y[labelled]
    top = int(torch.mode(y).values)
    members = x[y == top]
    assert torch.nn.functional.cosine_similarity(members[: len(members) // 2].mean(0),
                                                 members[len(members) // 2:].mean(0), dim=0) > 0.5


def test_load_maps_every_file_read_only_nothing_copied(papers):
    root, g = papers
    folder = folder_of(root)
    maps = file_maps()
    for name, tensor in g.tensors().items():
        assert file_offset(maps, tensor) == (str(folder / f"{name}.npy"), 128), name  # the .npy header: 128 bytes
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["format"] == "conveyor-mapped-v1" and meta["num_edges"] == g.num_edges
    assert meta["fields"]["x"] == {"dtype": "float16", "shape": [g.num_nodes, 128]}
    perms = {line.split()[5]: line.split()[1] for line in Path("/proc/self/maps").read_text().splitlines()
             if len(line.split()) == 6 and line.split()[5].startswith(str(folder))}
    assert set(perms) == {str(folder / f"{name}.npy") for name in g.tensors()}
    assert set(perms.values()) == {"r--s"}  # read-only and shared: no commit charge, whatever the size


def test_any_chunking_and_thread_count_gives_the_same_files(tmp_path, monkeypatch):
    def build(name, chunk_blocks):
        writer = MappedWriter(tmp_path / name)
        writer.commit(**sp.write_graph(writer, sp.PapersModel(SCALE, 3), chunk_blocks))
        files = {p.name: hashlib.md5(p.read_bytes()).hexdigest() for p in sorted((tmp_path / name).iterdir())}
        meta = json.loads((tmp_path / name / "meta.json").read_text())
        meta.pop("build")  # each build's own id (the data fingerprint's, digest.py)
        return {**files, "meta.json": meta}

    one = build("one", 1)
    monkeypatch.setattr("conveyor.partition.datasets.parallel.num_threads", lambda: 1)
    assert build("three", 3) == one
    other = MappedWriter(tmp_path / "seed4")
    other.commit(**sp.write_graph(other, sp.PapersModel(SCALE, 4)))
    assert hashlib.md5((tmp_path / "seed4" / "indices.npy").read_bytes()).hexdigest() != one["indices.npy"]


def test_the_cached_build_is_reused_and_its_layout_matches_the_fixture(papers):
    root, g = papers
    again = load_dataset("synthetic_papers", root=root, scale=SCALE, seed=3)
    assert file_offset(file_maps(), again.indices)[0] == str(folder_of(root) / "indices.npy")


KILLED_BUILD = """
import os, sys
from conveyor.partition.datasets import load_dataset
from conveyor.partition.graph import max_gap
from conveyor.partition.mapped import MappedWriter
put = MappedWriter.put
def put_then_die(self, name, start, rows):
    put(self, name, start, rows)
    if name == "x" and start > 0:
        os._exit(9)  # killed in the middle of writing the features
MappedWriter.put = put_then_die
load_dataset("synthetic_papers", root=sys.argv[1], scale=%r, seed=3)
"""


def test_a_killed_build_leaves_nothing_a_later_run_accepts(tmp_path):
    done = subprocess.run([sys.executable, "-c", KILLED_BUILD % SCALE, str(tmp_path)], cwd=REPO)
    assert done.returncode == 9
    parent = tmp_path / "synthetic_papers"
    assert not folder_of(tmp_path).exists()
    assert [p.name.startswith(".staging-") for p in parent.iterdir()] == [True]  # the killed build's
    graph = load_dataset("synthetic_papers", root=tmp_path, scale=SCALE, seed=3)
    assert [p.name for p in parent.iterdir()] == [folder_of(tmp_path).name]  # swept, then built whole
    assert graph.num_nodes == 55_530
    with open(folder_of(tmp_path) / "x.npy", "r+b") as f:  # a file truncated since: not accepted
        f.truncate(1000)
    with pytest.raises(ConveyorError, match="delete"):
        Graph.load(folder_of(tmp_path))
    assert tuple(load_dataset("synthetic_papers", root=tmp_path, scale=SCALE, seed=3).x.shape) == (55_530, 128)


def test_bad_scales_and_a_short_disk_are_refused_before_any_work(tmp_path, monkeypatch):
    with pytest.raises(ConveyorError, match="scale must be in"):
        load_dataset("synthetic_papers", root=tmp_path, scale=5)
    with pytest.raises(ConveyorError, match="too few nodes"):
        load_dataset("synthetic_papers", root=tmp_path, scale=1e-6)
    usage = type("Usage", (), {"free": 10**6, "total": 10**9, "used": 0})
    monkeypatch.setattr("conveyor.partition.datasets.out_of_core.shutil.disk_usage", lambda path: usage)
    with pytest.raises(ConveyorError, match=r"takes 35\.\d GiB on disk.*has 1\.0 MiB free"):
        load_dataset("synthetic_papers", root=tmp_path, scale=1.0)
    assert list((tmp_path / "synthetic_papers").iterdir()) == []  # no staging folder left


def _stage_view(handle, answer):
    graph = handle.open()
    maps = file_maps()
    answer.put({name: file_offset(maps, t) for name, t in graph.tensors().items()}
               | {"sum": int(graph.indices[:1000].long().sum()), "x_sum": float(graph.x[-1].float().sum())})


def test_the_stages_map_the_same_files_and_nothing_goes_to_shm(papers):
    root, g = papers
    handle = share_graph(g)
    assert handle.shared == {} and set(handle.mapped) == set(g.tensors())
    ctx = multiprocessing.get_context("spawn")
    answer = ctx.Queue()
    stage = ctx.Process(target=_stage_view, args=(handle, answer))
    stage.start()
    seen = answer.get(timeout=120)
    stage.join(60)
    for name in g.tensors():
        assert seen[name] == (str(folder_of(root) / f"{name}.npy"), 128), name
    assert seen["sum"] == int(g.indices[:1000].long().sum()) and seen["x_sum"] == float(g.x[-1].float().sum())


def test_degree_counts_are_chunked_and_exact(papers, monkeypatch):
    _, g = papers
    monkeypatch.setattr("conveyor.partition.graph.DEGREE_CHUNK", 100_003)
    assert torch.equal(g.out_degree(), torch.bincount(g.indices.long(), minlength=g.num_nodes))
    assert max_gap(g.indptr) == int(g.in_degree().max())


def write_papers100m_miniature(root: Path, n: int, num_edges: int, fortran: bool) -> dict:
    """OGB's ogbn-papers100M files, its real names and formats (raw/data.npz compressed, node-label.npz
    with NaN, split/time/*.csv.gz), for a small random graph with repeated edges and self loops."""
    import gzip

    rng = np.random.default_rng(5)
    folder = root / "ogbn_papers100M"
    (folder / "raw").mkdir(parents=True)
    (folder / "split" / "time").mkdir(parents=True)
    edge_index = rng.integers(0, n, (2, num_edges))
    edge_index[:, :50] = edge_index[:, 50:100]  # repeated citations
    edge_index[1, 100:120] = edge_index[0, 100:120]  # self loops
    arrays = {"edge_index": np.asfortranarray(edge_index) if fortran else edge_index,
              "node_feat": rng.standard_normal((n, 16), dtype=np.float32),
              "node_year": rng.integers(1990, 2020, (n, 1)),
              "num_nodes_list": np.array([n]), "num_edges_list": np.array([num_edges])}
    np.savez_compressed(folder / "raw" / "data.npz", **arrays)
    labels = rng.integers(0, 172, n).astype(np.float64)
    labels[rng.random(n) < 0.9] = np.nan
    np.savez_compressed(folder / "raw" / "node-label.npz", node_label=labels[:, None])
    ids = rng.permutation(np.flatnonzero(~np.isnan(labels)))
    splits = dict(zip(("train", "valid", "test"), np.split(ids, [len(ids) // 2, 3 * len(ids) // 4])))
    for name, part in splits.items():
        with gzip.open(folder / "split" / "time" / f"{name}.csv.gz", "wt") as f:
            f.write("".join(f"{i}\n" for i in part))
    return {**arrays, "labels": labels, **splits}


@pytest.mark.parametrize("fortran", [False, True])
def test_papers100m_converts_ogbs_raw_files_streaming(tmp_path, monkeypatch, fortran):
    from conveyor.partition.datasets import papers100m

    monkeypatch.setattr(papers100m, "CHUNK", 1000)  # several chunks, segments, and rows of features
    monkeypatch.setattr(papers100m, "SEGMENT", 3000)
    raw = write_papers100m_miniature(tmp_path, n=2000, num_edges=9000, fortran=fortran)
    graph = load_dataset("papers100m", root=tmp_path)
    ei = torch.from_numpy(raw["edge_index"])
    expected = Graph.from_edge_index(torch.cat([ei, ei.flip(0)], 1), 2000)  # PyG's ToUndirected, repeats merged
    assert torch.equal(graph.indptr, expected.indptr) and torch.equal(graph.indices, expected.indices)
    assert graph.indices.dtype == torch.int32 and graph.num_edges < 18_000
    assert torch.equal(graph.x, torch.from_numpy(raw["node_feat"].astype(np.float16)))
    assert torch.equal(graph.node_attrs["year"], torch.from_numpy(raw["node_year"][:, 0].astype(np.int16)))
    labels = np.where(np.isnan(raw["labels"]), -1, raw["labels"]).astype(np.int64)
    assert torch.equal(graph.y, torch.from_numpy(labels)) and graph.num_classes == 172
    for split, name in (("train", "train"), ("val", "valid"), ("test", "test")):
        assert torch.equal(getattr(graph, f"{split}_idx"), torch.from_numpy(raw[name]))
    folder = tmp_path / "ogbn_papers100M" / "conveyor"
    maps = file_maps()
    assert all(file_offset(maps, t)[0] == str(folder / f"{name}.npy") for name, t in graph.tensors().items())


def test_papers100m_damaged_raw_files_are_named(tmp_path):
    raw = write_papers100m_miniature(tmp_path, n=300, num_edges=1000, fortran=False)
    bad = dict(raw, edge_index=raw["edge_index"] + 300)
    arrays = {k: bad[k] for k in ("edge_index", "node_feat", "node_year", "num_nodes_list", "num_edges_list")}
    np.savez(tmp_path / "ogbn_papers100M" / "raw" / "data.npz", **arrays)
    with pytest.raises(ConveyorError, match="node ids outside 0..299"):
        load_dataset("papers100m", root=tmp_path)
    assert not (tmp_path / "ogbn_papers100M" / "conveyor").exists()
    (tmp_path / "ogbn_papers100M" / "raw" / "node-label.npz").unlink()
    np.savez(tmp_path / "ogbn_papers100M" / "raw" / "data.npz", **{k: v for k, v in arrays.items() if k != "node_feat"})
    with pytest.raises(ConveyorError, match="cannot read 'node_feat'"):
        load_dataset("papers100m", root=tmp_path)


CGROUP = Path("/sys/fs/cgroup/memory")
CGROUP_SCALE, CGROUP_LIMIT = 0.015, 340 * 2**20  # 1.67M nodes, 24.2M edges: 388 MB as int64 pairs, 565 MB of files


@pytest.mark.skipif(not (CGROUP / "memory.limit_in_bytes").exists() or os.geteuid() != 0,
                    reason="needs a cgroup v1 memory controller, as root")
def test_the_build_runs_inside_a_memory_cgroup_smaller_than_its_edges(tmp_path):
    """The edges alone, as an in-memory build holds them (int64 pairs: 388 MB), and the files it
    writes (565 MB) are larger than the cgroup's limit (340 MiB): the build streams."""
    size = sp.sizes(CGROUP_SCALE)
    assert 16 * size["edges"] > CGROUP_LIMIT and sp.build_bytes(CGROUP_SCALE)["disk"] > CGROUP_LIMIT
    group = CGROUP / f"conveyor-test-{os.getpid()}"
    group.mkdir()
    try:
        (group / "memory.limit_in_bytes").write_text(str(CGROUP_LIMIT))
        code = f"from conveyor.partition.datasets import load_dataset; load_dataset('synthetic_papers', " \
               f"root={str(tmp_path)!r}, scale={CGROUP_SCALE})"
        done = subprocess.run([sys.executable, "-c", code], cwd=REPO,
                              preexec_fn=lambda: (group / "cgroup.procs").write_text(str(os.getpid())))
        peak = int((group / "memory.max_usage_in_bytes").read_text())
    finally:
        group.rmdir()
    assert done.returncode == 0 and peak <= CGROUP_LIMIT
    folder = folder_of(tmp_path, CGROUP_SCALE, 0)
    assert sum(p.stat().st_size for p in folder.iterdir()) > CGROUP_LIMIT
    graph = Graph.load(folder)
    assert graph.num_nodes == size["nodes"] and abs(graph.num_edges - size["edges"]) < 0.01 * size["edges"]


def test_samplers_draw_from_the_mapped_csc_in_place(papers):
    from conveyor.samplers.bsp import BSPSampler
    from conveyor.samplers.fused import has_parallel_edges

    _, g = papers
    sampler = BSPSampler(g, [5, 3], seed=0)
    assert sampler.indices.data_ptr() == g.indices.data_ptr() and sampler.indptr.data_ptr() == g.indptr.data_ptr()
    batch = sampler.sample(g.train_idx[:64])
    src, dst = batch.edge_index_per_hop[0]
    pos = batch.edge_pos_per_hop[0]
    assert torch.equal(batch.n_id[src], g.indices[pos].long())  # each drawn edge is the graph's own
    assert not has_parallel_edges(g) and not has_parallel_edges(g, chunk=1000)
    doubled = Graph.from_edge_index(torch.tensor([[0, 1, 1, 2], [1, 2, 2, 0]]), 3, dedup=False)
    assert all(has_parallel_edges(doubled, chunk) for chunk in (1, 2, 3))


def test_a_mapped_build_is_fingerprinted_by_its_build_not_its_rows(tmp_path):
    from conveyor.partition.digest import MAPPED_VERSION, contents_digest, same_contents

    first = load_dataset("synthetic_papers", root=tmp_path, scale=SCALE, seed=3)
    digest = contents_digest(first)
    assert digest.startswith(MAPPED_VERSION) and contents_digest(Graph.load(folder_of(tmp_path))) == digest
    converted = Graph.load(folder_of(tmp_path))
    converted.x = converted.x.float()  # no longer the build's file: every row is hashed
    assert not contents_digest(converted).startswith(MAPPED_VERSION)
    (folder_of(tmp_path) / "stamp.txt").write_text("another version")  # rebuilt: another build
    again = load_dataset("synthetic_papers", root=tmp_path, scale=SCALE, seed=3)
    assert not same_contents(again, digest) and same_contents(again, contents_digest(again))
