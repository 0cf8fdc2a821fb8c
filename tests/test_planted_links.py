"""#29 item 1: a symbolic link planted where conveyor writes (the out_dir lock, a checkpoint's
temporary or final file, metrics.json) is refused by name; the file it points at stays intact."""
import os

import pytest

from conveyor.partition import ConveyorError
from conveyor.trainer.files import write_atomically
from conveyor.trainer.outdir import LOCK_FILE, lock_out_dir
from tests.test_cli import assert_clear_error, launch

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
