"""A checkpoint records the data it was trained on (trainer/outputs/fingerprint.py): resuming on other
data is refused by name, before training; the digest covers every row of every array (one changed
feature row of a 140,000-node graph is other data); a checkpoint from before fingerprints (or
without a config, or with the earlier sampled digest) resumes with warnings that reach run.log."""
import os

import numpy as np
import pytest
import torch

from conveyor.core import ConveyorError
from conveyor.partition import Graph
from conveyor.partition import digest as digests
from conveyor.partition.digest import DIGEST_VERSION, contents_digest, sampled_digest
from conveyor.trainer.outputs.checkpoint import CHECKPOINT
from conveyor.trainer.run import train
from tests.helpers import make_config, write_custom


def custom_graph(directory, num_nodes=200, seed=0):
    """A random custom dataset: 1,600 edges (the same for every seed), 8 features and labels
    drawn by `seed`, 3 classes, half the nodes training."""
    g = np.random.default_rng(seed)
    edges = np.random.default_rng(0).integers(0, num_nodes, (2, 1600))
    return write_custom(directory, edge_index=edges, x=g.standard_normal((num_nodes, 8)).astype(np.float32),
                        y=g.integers(0, 3, num_nodes), train_idx=np.arange(0, num_nodes, 2),
                        val_idx=np.arange(1, num_nodes, 4), test_idx=np.arange(3, num_nodes, 4))


@pytest.fixture
def custom_run(tmp_path):
    """A one-epoch run on a custom dataset, and a config maker for resuming it."""
    data = custom_graph(tmp_path / "data")

    def config(*overrides):
        return make_config("data=custom", f"data.path={data}", f"data.root={tmp_path / 'root'}",
                           f"run.out_dir={tmp_path / 'run'}", "sampler.fanouts=[4,4]", *overrides)
    train(config("trainer.epochs=1"))
    return tmp_path / "run", data, config


def test_resume_on_the_same_data_goes_on(custom_run):
    out, _, config = custom_run
    assert train(config("trainer.epochs=2", "run.resume=true")).final["epochs"] == 2
    state = torch.load(out / CHECKPOINT, weights_only=True)
    assert {k: state["data"][k] for k in ("nodes", "feature_width", "feature_dtype", "classes")} == \
        {"nodes": 200, "feature_width": 8, "feature_dtype": "float32", "classes": 3}


@pytest.mark.parametrize("replacement, words", [
    (dict(seed=1), "the same shapes, but other contents: digest"),  # other features and labels
    (dict(num_nodes=220), "nodes 200 in the checkpoint, 220 now"),
])
def test_resume_on_other_data_under_the_same_path_is_refused(custom_run, replacement, words):
    out, data, config = custom_run
    custom_graph(data, **replacement)
    before = (out / CHECKPOINT).read_bytes()
    with pytest.raises(ConveyorError) as error:
        train(config("trainer.epochs=2", "run.resume=true"))
    message = str(error.value)
    assert words in message and f"the checkpoint {out / CHECKPOINT} was trained on other data" in message
    assert "another run.out_dir" in message and "\n" not in message
    assert (out / CHECKPOINT).read_bytes() == before


def test_an_older_checkpoint_resumes_with_its_warnings_in_the_run_log(custom_run):
    """No data fingerprint (before this check) and no config: both said in run.log, which the
    config check's warning once missed (logged before the log was open)."""
    out, _, config = custom_run
    state = torch.load(out / CHECKPOINT, weights_only=True)
    del state["data"], state["config"]
    torch.save(state, out / CHECKPOINT)
    assert train(config("trainer.epochs=2", "run.resume=true")).final["epochs"] == 2
    log = (out / "run.log").read_text()
    assert f"the checkpoint in {out} records no config: cannot check that it fits" in log
    assert f"the checkpoint {out / CHECKPOINT} records no data fingerprint" in log


def test_a_planted_run_log_link_or_fifo_is_refused(tmp_path, data_root):
    out = tmp_path / "run"
    out.mkdir()
    target = tmp_path / "precious"
    target.write_text("keep me")
    os.symlink(target, out / "run.log")
    config = make_config("data=cora", f"data.root={data_root}", f"run.out_dir={out}", "trainer.epochs=1")
    with pytest.raises(ConveyorError, match=r"run\.log is a symbolic link \(to .*precious\)"):
        train(config)
    assert target.read_text() == "keep me"
    (out / "run.log").unlink()
    os.mkfifo(out / "run.log")  # opened to write, it would wait for a reader forever
    with pytest.raises(ConveyorError, match=r"run\.log is not a regular file \(a FIFO"):
        train(config)


def rows_graph(num_nodes=140_000):
    """A graph past the 65,536 feature rows the earlier digest sampled, with every kind of array."""
    g = torch.Generator().manual_seed(0)
    edges = torch.randint(0, num_nodes, (2, 4 * num_nodes), generator=g)
    return Graph.from_edge_index(edges, num_nodes, dedup=False, x=torch.randn(num_nodes, 4, generator=g),
                                 y=torch.randint(0, 3, (num_nodes,), generator=g), train_idx=torch.arange(0, 100),
                                 node_attrs={"year": torch.arange(num_nodes)},
                                 edge_attrs={"w": torch.ones(4 * num_nodes)}, num_classes=3)


def changed(graph, where):
    """A copy of `graph` with one value of one array changed."""
    tensors = {k: v.clone() for k, v in graph.tensors().items()}
    tensors[where][1] += 1  # row 1: between the earlier digest's samples (every other row here)
    return Graph.from_tensors(tensors, num_classes=graph.num_classes, name=graph.name)


def test_every_row_of_every_array_is_in_the_digest(monkeypatch, tmp_path):
    graph = rows_graph()
    digest = contents_digest(graph)
    assert digest.startswith(DIGEST_VERSION)
    for where in ("x", "y", "indices", "indptr", "train_idx", "edge_ids", "node.year", "edge.w"):
        assert contents_digest(changed(graph, where)) != digest, where
    assert sampled_digest(changed(graph, "x")) == sampled_digest(graph)  # what the sampled digest missed
    graph.save(tmp_path)
    assert contents_digest(Graph.load(tmp_path, mmap=True)) == digest  # memory-mapped, read in chunks
    monkeypatch.setattr(digests, "CHUNK_BYTES", 1000)  # what hashlib is fed at once changes nothing
    assert contents_digest(graph, threads=3) == digest
    monkeypatch.setattr(digests, "PIECE_BYTES", 4096)  # hundreds of pieces (the digest's format):
    assert contents_digest(graph, threads=3) == contents_digest(graph, threads=1)  # any thread hashes any


def test_a_checkpoint_with_the_sampled_digest_resumes_on_matching_shapes(custom_run):
    """A checkpoint written before every row was hashed: its digest cannot be compared, so a
    resume on data of the same shapes goes on, saying so in run.log; other shapes are refused."""
    out, _, config = custom_run
    state = torch.load(out / CHECKPOINT, weights_only=True)
    state["data"]["digest"] = "0123456789abcdef0123456789abcdef"  # the earlier form: no DIGEST_VERSION
    torch.save(state, out / CHECKPOINT)
    assert train(config("trainer.epochs=2", "run.resume=true")).final["epochs"] == 2
    assert "its contents cannot be compared" in (out / "run.log").read_text()


def test_a_dataset_cache_and_a_partitioning_see_one_changed_feature_row(tmp_path, conveyor_log):
    """A cached dataset and a partitioning are recognised by the same every-row digest: one
    feature row changed (between the earlier digest's samples) rebuilds the cache and makes a new
    partitioning; one recorded with the earlier digest is still recognised, not rebuilt."""
    from conveyor.partition.datasets.common import FINGERPRINT, cached
    from conveyor.partition.partitioner import ensure_partitioned
    from conveyor.partition.store import read_header
    graph, other = rows_graph(), changed(rows_graph(), "x")
    directory = tmp_path / "cache"
    cached(directory, lambda: graph)
    other.save(directory)  # the cache's graph edited in place, its fingerprint file kept
    assert torch.equal(cached(directory, lambda: graph).x, graph.x)
    assert any("changed since it was written: rebuilding it" in m for m in conveyor_log), conveyor_log
    (directory / FINGERPRINT).write_text(sampled_digest(graph))  # as a cache from before was written
    cached(directory, lambda: pytest.fail("a cache with the earlier digest was rebuilt"))
    parts = tmp_path / "parts"
    assert ensure_partitioned(graph, 2, 1, "random", parts)[1] is False
    assert ensure_partitioned(graph, 2, 1, "random", parts)[1] is True
    assert ensure_partitioned(other, 2, 1, "random", parts)[1] is False  # the sampled digest reused it
    header = read_header(parts)
    assert header["fingerprint"] == contents_digest(other)
    (parts / "partition.json").write_text((parts / "partition.json").read_text().replace(
        header["fingerprint"], sampled_digest(other)))
    assert ensure_partitioned(other, 2, 1, "random", parts)[1] is True
