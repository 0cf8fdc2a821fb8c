"""run.out_dir as people write it: `~` expanded once where it is read (the lock, the checks and the
writes agree), a name past the file system's limit refused in one paragraph, default names that
differ for each job of a Hydra `-m` sweep, and only rank 0 probing a fresh folder."""
import os
import subprocess
import sys

from conveyor.trainer.config import check_machine
from tests.helpers import REPO, launch, make_config, refusal

SMALL = ("data=synthetic", "data.scale=0.0005", "pipeline=serial", "trainer.epochs=1")


def test_a_tilde_is_expanded_where_the_setting_is_read(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    assert make_config("run.out_dir='~/x'").run.out_dir == str(tmp_path / "x")


def test_a_run_into_a_tilde_folder_writes_where_it_locks(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    result = launch(*SMALL, f"data.root={tmp_path / 'data'}", "run.out_dir='~/x'")
    assert result.returncode == 0, result.stderr[-2000:]
    assert (tmp_path / "x" / "checkpoints" / "last.pt").is_file() and (tmp_path / "x" / ".conveyor.lock").exists()
    assert not (REPO / "~").exists()


def test_a_folder_name_past_the_file_system_limit_is_refused(tmp_path):
    most = os.pathconf(tmp_path, "PC_NAME_MAX")
    message = refusal(f"run.out_dir={tmp_path / ('a' * 300)}")
    assert "has a folder name of 300 bytes" in message and f"at most {most} bytes" in message, message
    assert os.listdir(tmp_path) == []  # nothing made


def test_only_rank_0_probes_the_out_dir(tmp_path, monkeypatch):
    (tmp_path / "file").write_text("")
    settings = make_config("data=synthetic", f"data.root={tmp_path / 'data'}", f"run.out_dir={tmp_path}/run",
                           "run.world_size=1")
    settings = type(settings)(**{**settings.__dict__, "run": type(settings.run)(
        **{**settings.run.__dict__, "out_dir": str(tmp_path / "file" / "run")})})
    monkeypatch.setenv("RANK", "1")
    check_machine(settings)  # rank 1 leaves the folder to rank 0, which refuses it
    monkeypatch.setenv("RANK", "0")
    try:
        check_machine(settings)
    except ValueError as error:
        assert "is not a directory" in str(error) or "not writable" in str(error), error
    else:
        raise AssertionError("rank 0 took an out_dir under a file")


def test_a_hydra_sweep_with_default_names_does_not_collide(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run([sys.executable, str(REPO / "launch.py"), "-m", "trainer.progress=false",
                             "run.device=cpu", *SMALL, f"data.root={tmp_path / 'data'}", "run.seed=0,1"],
                            capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    runs = sorted((tmp_path / "runs").iterdir())
    assert len(runs) == 2 and [r.name[-2:] for r in runs] == ["-0", "-1"], runs
    assert all((r / "checkpoints" / "last.pt").is_file() for r in runs)
