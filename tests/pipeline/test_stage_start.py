"""How the async pipeline's stage processes start (pipeline/forkserver.py): forks of one fork
server that imported torch and the stage code once and never touched CUDA; each stage gets the
trainer's environment as it is when the stage starts; a stage dies with its trainer however the
trainer ends; close() needs no garbage collection."""
import gc
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import torch

from conveyor.pipeline import PipelineSettings, batch_source
from conveyor.pipeline.forkserver import PRELOAD, server_pid
from conveyor.samplers import SampledBatch
from tests.helpers import REPO, DoubledFeatures, assert_gone, feature_graph

MARK = "CONVEYOR_TEST_STAGE_MARK"


def test_taking_a_loader_from_conveyor_starts_the_server_where_async_may_follow():
    """`conveyor.NeighborLoader` starts the fork server before PyG is imported, on more than one
    usable core; on one (pipeline=auto stays serial there) nothing starts."""
    probe = textwrap.dedent("""
        import os, sys, conveyor
        from conveyor.pipeline.forkserver import server_pid
        if sys.argv[1] == "1":
            os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
        assert server_pid() is None
        conveyor.LinkNeighborLoader
        print(server_pid() is not None)
    """)
    for cores, started in (("1", "False"), ("all", str(len(os.sched_getaffinity(0)) > 1))):
        done = subprocess.run([sys.executable, "-c", probe, cores], cwd=REPO, capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        assert done.stdout.split() == [started]


def test_the_preloaded_modules_never_touch_cuda():
    """What the fork server imports must leave CUDA alone: a process that has initialised it (or
    only asked the driver for its devices) cannot hand a working CUDA to its forks."""
    probe = textwrap.dedent(f"""
        import torch
        calls = []
        torch.cuda._lazy_init = lambda *a, **k: calls.append("_lazy_init")
        torch._C._cuda_getDeviceCount = lambda *a, **k: calls.append("getDeviceCount") or 0
        for name in {PRELOAD!r}:
            __import__(name)
        print(calls, torch.cuda.is_initialized())
    """)
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["[]", "False"]


class EnvironmentReader:
    """A sampler that reports, as its batches' edge count, the length of MARK in its environment."""

    def sample(self, seeds: torch.Tensor) -> SampledBatch:
        n = seeds.numel()
        return SampledBatch(seeds.long(), torch.tensor([n, n]),
                            [torch.zeros(2, len(os.environ.get(MARK, "")), dtype=torch.long)])


def test_stages_are_forks_of_one_server_and_see_the_trainers_environment_of_now():
    graph = feature_graph()
    settings = PipelineSettings(name="async", depth=2, superbatch=1, threads=1, sampler_threads=1)
    servers, edges = [], []
    for mark in ("ab", "abcde"):  # set after the server started: each stage must see the new value
        os.environ[MARK] = mark
        with batch_source(graph, EnvironmentReader(), DoubledFeatures(graph.x), "cpu", settings) as source:
            edges += [p.batch.num_sampled_edges for p in source.run([graph.train_idx[:8]], 0)]
            parents = {psutil.Process(p.pid).ppid() for p in source.processes.values()}
            servers.append(server_pid())
            assert parents == {server_pid()} and psutil.Process(server_pid()).ppid() == os.getpid()
    del os.environ[MARK]
    assert edges == [2, 5] and servers[0] == servers[1]


def test_close_needs_no_garbage_collection(monkeypatch):
    """The queues' semaphores go with their last reference: closing a loader runs no full
    collection (which takes seconds in a large process), and leaves no semaphore behind."""
    from conveyor import NeighborLoader
    from conveyor.pipeline import shutdown
    # close() collects after 0.1 s; on a busy machine the feeder threads may take longer to end.
    # What is tested is that the semaphores go without a collection, given the time.
    monkeypatch.setattr(shutdown, "GC_AFTER_S", 5.0)
    graph = feature_graph()
    loader = NeighborLoader(graph, num_neighbors=[3, 3], batch_size=16, pipeline="async")
    sum(1 for _ in loader)
    names = list(loader.source.semaphores)
    assert names and all(os.path.exists(f"/dev/shm/sem.{n[1:]}") for n in names)
    full = []
    gc.callbacks.append(lambda phase, info: full.append(info) if phase == "start" and info["generation"] == 2 else None)
    try:
        gc.disable()
        loader.close()
    finally:
        gc.enable()
        gc.callbacks.pop()
    assert full == [] and not any(os.path.exists(f"/dev/shm/sem.{n[1:]}") for n in names)


def test_a_killed_trainer_takes_its_stages_and_the_server_with_it(tmp_path):
    """SIGKILL leaves the trainer no time to stop anything: the stages (whose parent is the fork
    server, not the trainer) see its sentinel close and end, and the server then ends too."""
    script = tmp_path / "trainer.py"
    script.write_text(textwrap.dedent("""
        import json, os
        from conveyor import NeighborLoader
        from conveyor.pipeline.forkserver import server_pid
        from tests.helpers import feature_graph

        loader = NeighborLoader(feature_graph(), num_neighbors=[3, 3], batch_size=16, pipeline="async")
        next(iter(loader))
        print(json.dumps([p.pid for p in loader.source.processes.values()] + [server_pid()]), flush=True)
        while True:
            for batch in loader:
                pass
    """))
    proc = subprocess.Popen([sys.executable, str(script)], cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        pids = json.loads(proc.stdout.readline() or "null") or []
        assert len(pids) == 3, proc.stderr.read()[-3000:] if proc.poll() is not None else pids
        time.sleep(0.5)
        proc.kill()
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
    assert_gone(pids, timeout=30)
