"""Every file conveyor reads is checked to be a regular file first (core/regular.py): a
named pipe, a device such as /dev/zero or a folder in a file's place is refused by name at once,
never read (a FIFO would block forever, /dev/zero never ends)."""
import os
import re

import numpy as np
import pytest
import torch

import conveyor
from conveyor.core import ConveyorError
from conveyor.partition import load_dataset
from conveyor.partition.datasets.planetoid import RAW_SUFFIXES
from conveyor.trainer.outputs.checkpoint import CHECKPOINT, load_checkpoint
from tests.helpers import launch

pytestmark = pytest.mark.timeout(60)  # a regression hangs: fail it instead of the suite


def small_graph(folder):
    folder.mkdir()
    rng = np.random.default_rng(0)
    arrays = {"edge_index": rng.integers(0, 30, (2, 90)), "x": rng.normal(size=(30, 4)).astype(np.float32),
              "y": np.arange(30) % 3, "train_idx": np.arange(20)}
    for name, value in arrays.items():
        np.save(folder / f"{name}.npy", value)
    return folder


def plant(path, kind):
    """Put a FIFO, a link to /dev/zero or a folder at `path` in place of the file."""
    if path.exists():
        path.unlink()
    {"fifo": os.mkfifo, "devzero": lambda p: os.symlink("/dev/zero", p), "folder": os.mkdir}[kind](path)


WHAT = {"fifo": "a named pipe (FIFO)", "devzero": "a character device", "folder": "a folder"}


@pytest.mark.parametrize("kind", WHAT)
@pytest.mark.parametrize("name", ["x", "edge_index", "y", "train_idx"])
def test_a_custom_array_that_is_no_regular_file(tmp_path, kind, name):
    graph = small_graph(tmp_path / "graph")
    plant(graph / f"{name}.npy", kind)
    with pytest.raises(ConveyorError) as err:
        load_dataset("custom", root=None, path=graph)
    message = str(err.value)
    assert f"custom array {name} {graph / name}.npy" in message and WHAT[kind] in message, message
    assert "pickled" not in message and "Python objects" not in message
    if kind == "devzero":
        assert "a link to /dev/zero" in message


def test_a_pt_array_linked_to_dev_zero(tmp_path):
    graph = small_graph(tmp_path / "graph")
    (graph / "x.npy").unlink()
    plant(graph / "x.pt", "devzero")
    with pytest.raises(ConveyorError, match="character device"):
        load_dataset("custom", root=None, path=graph)


@pytest.mark.parametrize("kind", WHAT)
def test_a_planetoid_raw_file_that_is_no_regular_file(tmp_path, data_root, kind):
    raw = tmp_path / "Cora" / "raw"
    raw.mkdir(parents=True)
    for suffix in RAW_SUFFIXES:  # links to the real files are read through
        (raw / f"ind.cora.{suffix}").symlink_to(data_root / "Cora" / "raw" / f"ind.cora.{suffix}")
    plant(raw / "ind.cora.graph", kind)
    with pytest.raises(ConveyorError, match=f"Cora raw file {raw / 'ind.cora.graph'}.* is {re.escape(WHAT[kind])}"):
        load_dataset("cora", root=tmp_path)


def test_planetoid_through_links_to_regular_files_still_loads(tmp_path, data_root):
    raw = tmp_path / "Cora" / "raw"
    raw.mkdir(parents=True)
    for suffix in RAW_SUFFIXES:
        (raw / f"ind.cora.{suffix}").symlink_to(data_root / "Cora" / "raw" / f"ind.cora.{suffix}")
    graph = load_dataset("cora", root=tmp_path)
    assert (graph.num_nodes, graph.num_classes) == (2708, 7)


@pytest.mark.parametrize("kind", WHAT)
def test_a_last_checkpoint_that_is_no_regular_file(tmp_path, kind):
    (tmp_path / "checkpoints").mkdir()
    plant(tmp_path / CHECKPOINT, kind)
    with pytest.raises(ConveyorError, match=f"checkpoint {tmp_path / CHECKPOINT}.* is {re.escape(WHAT[kind])}"):
        load_checkpoint(tmp_path)


@pytest.mark.parametrize("kind", ["fifo", "devzero"])
def test_conveyor_load_of_a_checkpoint_that_is_no_regular_file(tmp_path, kind):
    plant(tmp_path / "model.pt", kind)
    with pytest.raises(ConveyorError, match=re.escape(WHAT[kind])):
        conveyor.load(tmp_path / "model.pt")
    (tmp_path / "checkpoints").mkdir()
    plant(tmp_path / CHECKPOINT, kind)  # a run folder whose last.pt is one
    with pytest.raises(ConveyorError, match="not a regular file"):
        conveyor.load(tmp_path)


def test_launch_with_a_fifo_as_x_exits_2_at_once(tmp_path):
    graph = small_graph(tmp_path / "graph")
    plant(graph / "x.npy", "fifo")
    result = launch("data=custom", f"data.path={graph}", f"run.out_dir={tmp_path / 'run'}",
                    "pipeline=serial")
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert "named pipe (FIFO)" in result.stderr and str(graph / "x.npy") in result.stderr


def test_launch_resuming_from_a_fifo_last_pt_exits_2(tmp_path):
    out = tmp_path / "run"
    (out / "checkpoints").mkdir(parents=True)
    plant(out / CHECKPOINT, "fifo")
    result = launch("data=synthetic", "data.scale=0.0005", f"data.root={tmp_path / 'data'}",
                    f"run.out_dir={out}", "run.resume=true", "pipeline=serial")
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert "named pipe (FIFO)" in result.stderr and not (tmp_path / "data").exists()


def test_a_regular_pt_checkpoint_is_still_read(tmp_path):
    (tmp_path / "checkpoints").mkdir()
    torch.save({"epoch": 1}, tmp_path / CHECKPOINT)
    assert load_checkpoint(tmp_path) == {"epoch": 1}
