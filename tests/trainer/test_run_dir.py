"""One run per run.out_dir, default names that do not collide, and leftovers of killed runs
swept at the next start (only those whose process is gone)."""
import multiprocessing
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from conveyor.partition import load_dataset
from conveyor.partition.datasets.common import STAGING_PREFIX
from conveyor.partition.partitioner import ensure_partitioned
from conveyor.pipeline.shutdown import SEMAPHORE_PREFIX, semaphores_named_after_this_process
from conveyor.trainer.outputs.leftovers import sweep_leftovers
from tests.helpers import REPO, assert_clear_error, launch


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_a_second_run_into_a_busy_out_dir_is_refused_and_the_first_is_intact(tmp_path, data_root):
    out = tmp_path / "run"
    common = ["data=cora", f"data.root={data_root}", f"run.out_dir={out}", "trainer.progress=false",
              "run.device=cpu"]
    first = subprocess.Popen([sys.executable, str(REPO / "launch.py"), *common, "trainer.epochs=1000"],
                             cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not (out / "checkpoints" / "last.pt").exists() and first.poll() is None \
                and time.monotonic() < deadline:
            time.sleep(0.05)
        assert first.poll() is None, first.stderr.read()[-3000:]
        overrides = (out / ".hydra" / "overrides.yaml").read_text()
        second = launch(*common[:-2], "trainer.epochs=1", "run.resume=true")
        assert_clear_error(second, "is in use by another run", f"process {first.pid}", str(out))
        assert first.poll() is None  # undisturbed
        assert (out / ".hydra" / "overrides.yaml").read_text() == overrides
        first.send_signal(signal.SIGTERM)
        _, stderr = first.communicate(timeout=60)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 128 + signal.SIGTERM, stderr[-3000:]
    assert "trainer.epochs=1000" in (out / ".hydra" / "overrides.yaml").read_text()
    # The lock went with the process: the run resumes (and the folder is not "busy" forever).
    resumed = launch(*common[:-2], "trainer.epochs=1", "run.resume=true")
    assert resumed.returncode == 0, resumed.stderr[-3000:]


def test_default_run_names_started_together_differ():
    script = ("from tests.helpers import make_config; "
              "print(make_config('data=cora').run.out_dir)")
    procs = [subprocess.Popen([sys.executable, "-c", script], cwd=REPO, stdout=subprocess.PIPE,
                              text=True) for _ in range(2)]
    names = [p.communicate(timeout=120)[0].strip() for p in procs]
    assert names[0] != names[1], names
    for name, proc in zip(names, procs):
        assert name.startswith("runs/") and name.endswith(f"_cora_sage_{proc.pid}"), name


def test_leftovers_of_dead_runs_are_swept_at_the_next_start(tmp_path):
    """A killed synthetic generation's staging folder, a killed DDP launcher's notes, and an
    orphaned semaphore go; the same things of a live process (this one) stay.

    The cache is built before the run, so the run only loads it: staging folders beside a cache
    that exists (this cache's, in the name they have and the one they had before, and another
    scale's) are swept too, not only when a cache is rebuilt.

    The notes live in the run's own TMPDIR: in the shared /tmp, any conveyor run starting at the
    same time (another test session, another user) may sweep them first, and the log line this
    test reads would then be in that run's log, not this one's."""
    root, dead, tmp = tmp_path / "data", dead_pid(), tmp_path / "tmp"
    load_dataset("synthetic", root=root, scale=0.0005)
    cache = root / "synthetic" / "scale0.0005_seed0"
    staging = {pid: [cache.parent / f"{STAGING_PREFIX}{pid}.{cache.name}.abc123",
                     cache.parent / f"{STAGING_PREFIX}{pid}.scale0.001_seed0.def456",
                     cache.parent / f".{cache.name}.{pid}.ghi789"] for pid in (dead, os.getpid())}
    notes = {pid: tmp / f"conveyor-ranks-{pid}.xyz" for pid in (dead, os.getpid())}
    for folder in [*staging[dead], *staging[os.getpid()], *notes.values()]:
        folder.mkdir(parents=True)
        (folder / "rank0.json").write_text("{}")
    orphan = Path("/dev/shm") / f"sem.mp-conveyor-{dead}-{uuid.uuid4().hex[:8]}"
    orphan.write_bytes(b"\0" * 32)
    try:
        result = launch("data=synthetic", f"data.root={root}", "data.scale=0.0005", "trainer.epochs=1",
                        "pipeline=serial", f"run.out_dir={tmp_path / 'run'}", env={**os.environ, "TMPDIR": str(tmp)})
        assert result.returncode == 0, result.stderr[-3000:]
        assert not any(folder.exists() for folder in staging[dead]), staging[dead]
        assert not notes[dead].exists() and not orphan.exists()
        assert all(folder.exists() for folder in staging[os.getpid()]) and notes[os.getpid()].exists()
        log = (tmp_path / "run" / "run.log").read_text()
        assert f"removed {notes[dead]}" in log and f"removed {staging[dead][0]}" in log
        assert sorted(p.name for p in cache.parent.iterdir()) == sorted(
            [cache.name, *(folder.name for folder in staging[os.getpid()])])  # the cache was not rebuilt
    finally:
        orphan.unlink(missing_ok=True)
        for folder in notes.values():
            subprocess.run(["rm", "-rf", str(folder)])


def test_a_killed_partitioning_is_swept_when_the_partitioning_is_reused(tmp_path, cora):
    directory, dead = tmp_path / "parts", dead_pid()
    ensure_partitioned(cora, 2, 1, "random", directory)
    leftovers = {pid: tmp_path / f".parts.tmp-{pid}" for pid in (dead, os.getpid())}
    for folder in leftovers.values():
        (folder / "part0").mkdir(parents=True)
    _, reused = ensure_partitioned(cora, 2, 1, "random", directory)
    assert reused and not leftovers[dead].exists() and leftovers[os.getpid()].exists()


def test_semaphores_are_named_after_their_process_and_only_a_dead_ones_are_swept():
    """A live run's semaphores (this process's, named by semaphores_named_after_this_process) and another program's
    (no pid in the name) are never swept, mapped or not; a dead process's are."""
    other_program = Path("/dev/shm") / f"sem.mp-test-{uuid.uuid4().hex[:8]}"
    dead = Path("/dev/shm") / f"sem.{SEMAPHORE_PREFIX}{dead_pid()}-{uuid.uuid4().hex[:8]}"
    for path in (other_program, dead):
        path.write_bytes(b"\0" * 32)
    try:
        with semaphores_named_after_this_process():
            lock = multiprocessing.get_context("spawn").Lock()  # a real one
        live = Path("/dev/shm") / f"sem.{lock._semlock.name.lstrip('/')}"
        assert live.name.startswith(f"sem.{SEMAPHORE_PREFIX}{os.getpid()}-") and live.exists()
        sweep_leftovers()
        assert live.exists() and other_program.exists() and not dead.exists()
        other = multiprocessing.get_context("spawn").Lock()  # made outside: named as before
        assert not other._semlock.name.startswith(f"/{SEMAPHORE_PREFIX}")
    finally:
        other_program.unlink(missing_ok=True)
        dead.unlink(missing_ok=True)


def test_names_no_process_can_own_stop_no_sweep_and_are_kept(tmp_path, monkeypatch):
    """#29: one file named conveyor-ranks-99999999999999999999.x in $TMPDIR (or a .staging-<huge>
    folder beside a cache) stopped every run with an OverflowError. Such names are not ours: kept,
    and a dead process's leftover beside them is still swept."""
    from conveyor.core.leftovers import sweep_dead
    tmp, dead = tmp_path / "tmp", dead_pid()
    hostile = [tmp / "conveyor-ranks-99999999999999999999.x", tmp / "conveyor-ranks-4294967296",
               tmp / "conveyor-ranks-0.x", tmp / "conveyor-ranks--1.x", tmp / f"{STAGING_PREFIX}{10**30}.c.d"]
    for path in hostile:
        path.parent.mkdir(exist_ok=True)
        path.write_text("planted")
    notes = tmp / f"conveyor-ranks-{dead}.xyz"
    notes.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setattr(tempfile, "tempdir", None)  # tempfile reads TMPDIR again
    sweep_leftovers()
    assert sweep_dead(tmp, STAGING_PREFIX) == []
    assert all(path.read_text() == "planted" for path in hostile) and not notes.exists()
