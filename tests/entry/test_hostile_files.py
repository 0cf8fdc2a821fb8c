"""Files conveyor reads (checkpoints, caches, partitions, dataset copies) never run code, and a
damaged one is named with what to do: nothing is executed, nothing is lost."""
import errno
import shutil

import pytest
import torch

from conveyor.core import ConveyorError
from conveyor.partition import Graph, load_dataset
from conveyor.partition.datasets.common import FINGERPRINT
from conveyor.partition.store import Part, load_part, save_parts
from conveyor.trainer.outputs import files
from conveyor.trainer.outputs.checkpoint import CHECKPOINT, load_checkpoint, save_checkpoint
from conveyor.trainer.run import train
from tests.helpers import make_config, plant

SMALL = dict(scale=0.0005, seed=3)  # 1,225 nodes: a synthetic cache built in a second


@pytest.fixture
def marker(tmp_path):
    path = tmp_path / "payload-ran"
    yield path
    assert not path.exists(), "the planted pickle ran"


def cora_config(tmp_path, data_root, *overrides):
    return make_config("data=cora", f"data.root={data_root}", "trainer.epochs=1",
                       f"run.out_dir={tmp_path / 'run'}", *overrides)


# -- checkpoints ----------------------------------------------------------------------------------

def test_a_planted_checkpoint_is_not_even_read_without_resume(tmp_path, data_root, marker):
    plant(tmp_path / "run" / CHECKPOINT, marker)
    with pytest.raises(ConveyorError, match="already holds a run"):
        train(cora_config(tmp_path, data_root))


def test_a_planted_checkpoint_is_refused_on_resume(tmp_path, data_root, marker):
    plant(tmp_path / "run" / CHECKPOINT, marker)
    with pytest.raises(ConveyorError, match="cannot read checkpoint .*nothing in it was run"):
        train(cora_config(tmp_path, data_root, "run.resume=true"))


def test_a_real_checkpoint_loads_weights_only(tmp_path, data_root):
    train(cora_config(tmp_path, data_root))
    state = torch.load(tmp_path / "run" / CHECKPOINT, weights_only=True)
    assert state["epoch"] == 1 and state["config"]["data"]["name"] == "cora"
    assert load_checkpoint(tmp_path / "run")["epoch"] == 1


def test_a_failed_save_removes_its_temporary_file_and_names_path_and_error(tmp_path, monkeypatch):
    save_checkpoint(tmp_path, {"epoch": 1})
    before = (tmp_path / CHECKPOINT).read_bytes()

    class FullDisk:  # writes half, then the disk is full
        def __init__(self, path, mode):
            self.file = open(path, mode)

        def write(self, data):
            self.file.write(bytes(data[:len(data) // 2]))
            raise OSError(errno.ENOSPC, "No space left on device")

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.file.close()

    monkeypatch.setattr(files, "open", FullDisk, raising=False)
    with pytest.raises(ConveyorError) as error:
        save_checkpoint(tmp_path, {"epoch": 2, "weights": torch.zeros(1000)})
    message = str(error.value)
    assert str(tmp_path / CHECKPOINT) in message and "No space left on device" in message
    assert not (tmp_path / "checkpoints" / "last.pt.tmp").exists()
    assert (tmp_path / CHECKPOINT).read_bytes() == before  # the last good checkpoint is kept


# -- dataset copies -------------------------------------------------------------------------------

@pytest.fixture
def cora_root(tmp_path, data_root):
    root = tmp_path / "data"
    shutil.copytree(data_root / "Cora" / "raw", root / "Cora" / "raw")
    return root


def test_a_planted_processed_planetoid_file_is_never_read(cora_root, marker):
    for name in ("data.pt", "pre_transform.pt", "pre_filter.pt"):
        plant(cora_root / "Cora" / "processed" / name, marker)
    graph = load_dataset("cora", root=cora_root)
    assert graph.num_nodes == 2708


def test_a_planted_planetoid_raw_pickle_is_refused(cora_root, marker):
    plant(cora_root / "Cora" / "raw" / "ind.cora.x", marker, as_torch_file=False)
    with pytest.raises(ConveyorError, match="are damaged or are not Planetoid files"):
        load_dataset("cora", root=cora_root)


def test_a_planted_ogb_processed_file_is_refused(tmp_path, marker):
    pytest.importorskip("ogb")
    folder = tmp_path / "ogbn_arxiv"
    plant(folder / "processed" / "data_processed", marker)
    (folder / "RELEASE_v1.txt").write_text("")
    with pytest.raises(ConveyorError, match="Delete it to rebuild it"):
        load_dataset("arxiv", root=tmp_path)


# -- caches and partitions ------------------------------------------------------------------------

def cache_dir(root):
    return root / "synthetic" / f"scale{SMALL['scale']}_seed{SMALL['seed']}"


@pytest.mark.parametrize("damage", ["planted", "truncated", "overwritten"])
def test_a_damaged_cached_graph_is_rebuilt(tmp_path, marker, damage, conveyor_log):
    fresh = load_dataset("synthetic", root=tmp_path, **SMALL)
    saved = cache_dir(tmp_path) / "graph.pt"
    data = saved.read_bytes()
    del fresh  # its memory map
    if damage == "planted":
        plant(saved, marker)
    elif damage == "truncated":
        saved.write_bytes(data[:len(data) // 2])
    else:  # bytes in the middle of the arrays: the zip file still reads
        middle = len(data) // 2
        saved.write_bytes(data[:middle] + b"\xff" * 64 + data[middle + 64:])
    graph = load_dataset("synthetic", root=tmp_path, **SMALL)
    assert any("rebuilding it" in m and str(cache_dir(tmp_path)) in m for m in conveyor_log), conveyor_log
    assert saved.read_bytes() == data  # rebuilt as it was
    assert graph.num_nodes == 1225 and (cache_dir(tmp_path) / FINGERPRINT).exists()


def saved_partition(tmp_path) -> tuple:
    graph = Graph.from_edge_index(torch.tensor([[0, 1, 2], [1, 2, 0]]), 3, x=torch.ones(3, 2))
    part = Part(graph, torch.arange(3), torch.arange(3), {"rank": 0, "num_parts": 1})
    directory = tmp_path / "parts"
    save_parts([part], directory)
    return directory, directory / "part0"


@pytest.mark.parametrize("name", ["graph.pt", "node_ids.pt", "info.json"])
def test_a_truncated_partition_file_names_itself_and_what_to_delete(tmp_path, name):
    directory, part = saved_partition(tmp_path)
    data = (part / name).read_bytes()
    (part / name).write_bytes(data[:len(data) // 3])
    with pytest.raises(ConveyorError) as error:
        load_part(directory, 0)
    assert str(part / name) in str(error.value)
    assert f"delete {directory} to rebuild it" in str(error.value)


def test_a_planted_partition_file_is_refused(tmp_path, marker):
    directory, part = saved_partition(tmp_path)
    plant(part / "node_ids.pt", marker)
    with pytest.raises(ConveyorError, match="delete .* to rebuild it"):
        load_part(directory, 0)


def test_a_planted_custom_array_is_refused_in_one_paragraph(tmp_path, marker):
    graph = tmp_path / "graph"
    plant(graph / "x.pt", marker)  # the features of a user's graph, as a torch file
    for name, value in {"edge_index": torch.tensor([[0, 1], [1, 0]]), "y": torch.tensor([0, 1]),
                        "train_idx": torch.tensor([0, 1])}.items():
        torch.save(value, graph / f"{name}.pt")
    with pytest.raises(ConveyorError) as error:
        load_dataset("custom", path=graph)
    message = str(error.value)
    assert f"cannot read {graph / 'x.pt'} (it holds Python objects besides arrays and tensors, " \
           f"and nothing in it was run)" in message and "\n" not in message, message
