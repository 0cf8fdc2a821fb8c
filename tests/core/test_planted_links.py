"""#29 item 1: a symbolic link planted where conveyor writes (the out_dir lock, a checkpoint's
temporary or final file, metrics.json, run.log, checkpoints/, .hydra/, a partitioning's folders) is
refused by name; the file it points at stays intact. A FIFO or a folder where a file goes is
refused too, and never waited on."""
import os

import pytest
import torch

from conveyor.core import ConveyorError
from conveyor.trainer.outputs.files import write_atomically
from conveyor.trainer.outputs.outdir import LOCK_FILE, lock_out_dir
from conveyor.trainer.run import train
from tests.helpers import assert_clear_error, launch, make_config

VICTIM = b"someone else's file\n"


def plant(link, tmp_path):
    victim = tmp_path / "victim"
    victim.write_bytes(VICTIM)
    link.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(victim, link)
    return victim


@pytest.mark.parametrize("name", ["checkpoints/last.pt", "checkpoints/last.pt.tmp", "metrics.json",
                                  "metrics.json.tmp"])
def test_a_link_where_a_file_is_written_is_refused_and_its_target_kept(name, tmp_path):
    out = tmp_path / "run"
    victim = plant(out / name, tmp_path)
    final = out / name.removesuffix(".tmp")
    with pytest.raises(ConveyorError, match="is a symbolic link .*never follows links"):
        write_atomically(final, b"checkpoint bytes")
    assert victim.read_bytes() == VICTIM and (out / name).is_symlink()


def test_a_stale_temporary_of_a_killed_write_is_replaced(tmp_path):
    (tmp_path / "last.pt.tmp").write_bytes(b"half a checkpoint")
    write_atomically(tmp_path / "last.pt", b"whole")
    assert (tmp_path / "last.pt").read_bytes() == b"whole" and not (tmp_path / "last.pt.tmp").exists()


def test_a_link_at_the_lock_is_refused_before_the_run_writes_anything(tmp_path, data_root):
    out = tmp_path / "run"
    victim = plant(out / LOCK_FILE, tmp_path)
    with pytest.raises(ConveyorError, match=f"{LOCK_FILE} is a symbolic link"):
        lock_out_dir(out)
    result = launch("data=cora", f"data.root={data_root}", "trainer.epochs=1", "pipeline=serial",
                    f"run.out_dir={out}")
    assert_clear_error(result, f"{out / LOCK_FILE} is a symbolic link", "remove")
    assert victim.read_bytes() == VICTIM and sorted(p.name for p in out.iterdir()) == [LOCK_FILE]


# -- every name a run writes, against every kind of planted entry ------------------------------------

WRITTEN = ["run.log", "metrics.json", "metrics.json.tmp", "checkpoints", "checkpoints/last.pt",
           "checkpoints/last.pt.tmp", "checkpoints/best.pt"]
KINDS = ["link to a file", "link to a folder", "dangling link", "fifo", "folder"]


def plant_kind(entry, kind, tmp_path):
    """`entry` made as `kind`; what a link points at, to check it is untouched (None: nothing)."""
    entry.parent.mkdir(parents=True, exist_ok=True)
    if kind == "fifo":
        os.mkfifo(entry)
    elif kind == "folder":
        entry.mkdir()
        (entry / "inside").write_bytes(VICTIM)
    else:
        target = tmp_path / ("victim-folder" if kind == "link to a folder" else "victim")
        if kind == "link to a file":
            target.write_bytes(VICTIM)
        elif kind == "link to a folder":
            target.mkdir()
            (target / "inside").write_bytes(VICTIM)
        os.symlink(target, entry)
        return target
    return None


def snapshot(path):
    if path is None or not os.path.lexists(path):
        return None
    return sorted((p.name, p.read_bytes()) for p in path.iterdir()) if path.is_dir() else path.read_bytes()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", WRITTEN)
def test_whatever_is_planted_where_a_run_writes_ends_in_a_run_or_one_paragraph(name, kind, tmp_path, data_root):
    """A correct run, or one paragraph naming the path (never a traceback, a hang, or a write
    through the planted entry); the entry's target is left as it was."""
    out = tmp_path / "run"
    target = plant_kind(out / name, kind, tmp_path)
    before = snapshot(target)
    try:  # the settings check refuses some before any run starts
        train(make_config("data=cora", f"data.root={data_root}", "trainer.epochs=1", "pipeline=serial",
                          f"run.out_dir={out}"))
    except ConveyorError as error:
        message = str(error)
        assert "\n" not in message and str(out) in message, message  # the run's folder, or the path in it
    else:  # only a plain folder where conveyor keeps one is taken as it is
        assert (name, kind) == ("checkpoints", "folder")
    assert snapshot(target) == before


def test_a_link_in_the_hydra_folder_is_refused(tmp_path, data_root):
    out = tmp_path / "run"
    victim = plant(out / ".hydra" / "config.yaml", tmp_path)
    result = launch("data=cora", f"data.root={data_root}", "trainer.epochs=1", "pipeline=serial",
                    f"run.out_dir={out}")
    assert_clear_error(result, f"{out / '.hydra' / 'config.yaml'} is a symbolic link", "remove")
    assert victim.read_bytes() == VICTIM


def test_a_link_where_the_partitions_go_is_refused_and_no_side_folder_is_predictable(tmp_path):
    from conveyor.partition.partitioner import ensure_partitioned
    from tests.helpers import random_graph
    graph = random_graph(200, 2000, seed=1)
    graph.train_idx = torch.arange(0, 200, 2)
    victim = plant(tmp_path / "parts", tmp_path)
    with pytest.raises(ConveyorError, match="parts is a symbolic link .*give the partitions another folder"):
        ensure_partitioned(graph, 2, 1, "random", tmp_path / "parts")
    os.unlink(tmp_path / "parts")
    (tmp_path / "elsewhere").mkdir()
    old_name = plant(tmp_path / f".parts.tmp-{os.getpid()}", tmp_path / "elsewhere")  # the name it once used
    ensure_partitioned(graph, 2, 1, "random", tmp_path / "parts")
    ensure_partitioned(graph, 2, 1, "random", tmp_path / "parts", force=True)  # an earlier one put aside, removed
    assert victim.read_bytes() == VICTIM and old_name.read_bytes() == VICTIM
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".parts")) == [f".parts.tmp-{os.getpid()}"]
    assert (tmp_path / "parts" / "partition.json").is_file()
