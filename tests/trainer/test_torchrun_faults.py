"""A torchrun job whose rank or agent dies stops its other ranks within a minute, in one conveyor
paragraph naming the rank that died (trainer/distributed/watch.py), and the same command with
run.resume=true then goes on from the last checkpoint. Two torchrun agents on 127.0.0.1, one gloo
rank each (as tests/trainer/test_torchrun.py); the watch's reading of the ranks' heartbeats is tested
against a store of its own."""
import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
import torch.distributed as dist

from conveyor.trainer.distributed import watch as watch_module
from conveyor.trainer.distributed.watch import RankWatch
from tests.helpers import REPO

RUN = ["data=cora", "run.device=cpu", "trainer.batch_size=32", "run.seed=0", "trainer.progress=false",
       "pipeline=serial", "sampler.fanouts=[5,5]"]
MINUTE = 60


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def agents(tmp_path: Path, data_root: Path, name: str, *overrides: str) -> list:
    """Two torchrun agents of one job, their output in tmp_path/<name><i>.log."""
    port = free_port()
    command = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1",
               "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", name,
               "--local-addr", "127.0.0.1", str(REPO / "launch.py"), *RUN, f"data.root={data_root}",
               f"run.out_dir={tmp_path / 'run'}", *overrides]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return [subprocess.Popen(command, stdout=(tmp_path / f"{name}{i}.log").open("w"), stderr=subprocess.STDOUT,
                             env=env, cwd=REPO) for i in range(2)]


def epochs_done(tmp_path: Path) -> int:
    try:
        return len(json.loads((tmp_path / "run" / "metrics.json").read_text())["epochs"])
    except (OSError, ValueError, KeyError):
        return 0


def wait_for_epoch(tmp_path: Path, epoch: int, procs: list, timeout: float = 300) -> None:
    deadline = time.time() + timeout
    while epochs_done(tmp_path) < epoch:
        assert time.time() < deadline and all(p.poll() is None for p in procs), epochs_done(tmp_path)
        time.sleep(0.2)


def ended(procs: list, timeout: float) -> list:
    try:
        return [p.wait(timeout=timeout) for p in procs]
    finally:
        for p in procs:
            p.kill()


def worker_of(agent: subprocess.Popen) -> psutil.Process:
    return next(c for c in psutil.Process(agent.pid).children() if "launch.py" in " ".join(c.cmdline()))


def assert_stopped_naming(tmp_path: Path, name: str, codes: list, took: float) -> None:
    """Both agents failed within a minute; rank 0's output is the one paragraph naming rank 1,
    which torchrun's failure summary quotes instead of a traceback (when the agent gets that far:
    one whose rendezvous store went with the other agent fails on its own, in its own words)."""
    assert took < MINUTE and all(code != 0 for code in codes), (took, codes)
    text = (tmp_path / f"{name}0.log").read_text()
    paragraph = next(line for line in text.splitlines() if line.startswith("conveyor: error:"))
    assert "rank 1 of 2 (" in paragraph and "so rank 0 stops too" in paragraph and "run.resume=true" in paragraph
    assert not any("Traceback" in line for line in text.splitlines() if line.startswith("[rank0]")), text[-3000:]
    if "Root Cause (first observed failure)" in text:
        assert f"traceback : {paragraph[len('conveyor: error: '):]}" in text


def test_a_killed_rank_or_agent_stops_the_job_by_name_and_resume_goes_on(tmp_path, data_root):
    first = agents(tmp_path, data_root, "first", "trainer.epochs=40")
    wait_for_epoch(tmp_path, 2, first)
    worker_of(first[1]).kill()
    start = time.time()
    assert_stopped_naming(tmp_path, "first", ended(first, MINUTE), time.time() - start)

    done = epochs_done(tmp_path)
    second = agents(tmp_path, data_root, "second", "trainer.epochs=40", "run.resume=true")
    wait_for_epoch(tmp_path, done + 1, second)  # resumed: the epochs go on from the checkpoint
    psutil.Process(second[1].pid).kill()  # an agent: its rank goes with it (it would run on, orphaned)
    start = time.time()
    assert_stopped_naming(tmp_path, "second", ended(second, MINUTE), time.time() - start)

    done = epochs_done(tmp_path)
    third = agents(tmp_path, data_root, "third", f"trainer.epochs={done + 1}", "run.resume=true")
    assert ended(third, 300) == [0, 0], (tmp_path / "third0.log").read_text()[-3000:]
    assert epochs_done(tmp_path) == done + 1


@pytest.fixture
def store(monkeypatch):
    """A store of the job's own and this process as rank 0 of 3 watching it."""
    server = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(server.port))
    monkeypatch.setattr(watch_module, "SETTLE_S", 3.0)
    watch = RankWatch(0, 3, "Resume.")
    prefix = dist.PrefixStore(f"conveyor-watch/{os.environ.get('TORCHELASTIC_RUN_ID', '')}/0/", server)
    yield watch, prefix
    watch.close()


@contextlib.contextmanager
def beating(peers, *ranks):
    """`ranks` beat every 0.2 s meanwhile, as live ranks do."""
    stop = threading.Event()

    def beat():
        while not stop.wait(0.2):
            for r in ranks:
                peers.add(f"beat/{r}", 1)
    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def test_the_watch_names_the_rank_whose_heartbeat_stopped(store):
    watch, peers = store
    peers.set("who/1", "hostA, pid 11")
    peers.set("who/2", "hostB, pid 22")
    peers.add("beat/2", 1)  # rank 2 beat once, then died; rank 1 beats on
    with beating(peers, 1):
        time.sleep(2.0)  # the watch has seen rank 2's one beat; it stands still from then on
        assert watch.explain() == ("rank 2 of 3 (hostB, pid 22) died, so rank 0 stops too (every rank of a DDP "
                                   "job must). Resume.")
        peers.set("done/2", "1")  # finished its run instead: nobody waits for it
        assert watch.explain() is None


def test_a_rank_that_failed_is_named_with_its_own_words(store):
    watch, peers = store
    peers.set("who/1", "hostA, pid 11")
    peers.set("failed/1", "ConveyorError: the disk is full")
    with beating(peers, 1, 2):  # every rank beats: none died, but rank 1 says it failed
        assert watch.explain() == ("rank 1 of 3 (hostA, pid 11) failed (ConveyorError: the disk is full), so rank "
                                   "0 stops too (every rank of a DDP job must). Resume.")


def test_a_closed_watch_never_ends_the_process(store):
    """A run that ended closes its watch; the store may then go with its agent while the watch's
    thread is on its beat: that must not end the process (exit 1 after a finished run; it once
    ended this test session)."""
    watch, _ = store
    watch.close()
    watch.stop_unless_closed(lambda: pytest.fail("a closed watch stopped the process"))
    watch.thread.join(timeout=5)
    assert not watch.thread.is_alive()
