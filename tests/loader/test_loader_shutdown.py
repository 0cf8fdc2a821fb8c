"""`conveyor.NeighborLoader` stops its pipeline and leaves nothing behind (no process, no /dev/shm
file) however it ends: `close()`, a `with` block, garbage collection, interpreter exit, a failing
stage, Ctrl-C; and a script without the `__main__` guard stops at once, before spawning."""
import gc
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from conveyor import NeighborLoader
from conveyor.pipeline import PipelineError
from conveyor.samplers import SamplerSpec
from tests.helpers import REPO, assert_gone, feature_graph, shm_names


class FailingSampler:
    """bsp, failing at its third batch: a fault in the sampler stage process. Handed over as a
    spec (`build`), built in the stage process: a torch.Generator (bsp's) cannot be pickled into a
    spawned process."""

    def __init__(self, graph=None):
        self.calls = 0
        if graph is not None:
            self.sampler = SamplerSpec("bsp", [3, 3]).build(graph, "cpu")

    def build(self, graph, device):
        return FailingSampler(graph)

    def sample(self, seeds):
        self.calls += 1
        if self.calls == 3:
            raise RuntimeError("the user's sampler broke on its third batch")
        return self.sampler.sample(seeds)


def started(loader):
    """Draw one batch (the pipeline starts); the stage processes' pids and their /dev/shm files."""
    next(iter(loader))
    pids = [p.pid for p in loader.source.processes.values()]
    assert len(pids) == 2 and all(psutil.pid_exists(pid) for pid in pids)
    return pids, shm_names([os.getpid(), *pids])


def assert_nothing_left(pids, shared):
    assert_gone(pids)
    left = [name for name in shared if os.path.exists(name)]
    assert not left, left


def new_loader(**keywords):
    graph = feature_graph()
    return NeighborLoader(graph, num_neighbors=[3, 3], batch_size=16, input_nodes=graph.train_idx, shuffle=True,
                          pipeline="async", **keywords)


def test_close_stops_the_processes():
    loader = new_loader()
    pids, shared = started(loader)
    loader.close()
    loader.close()  # idempotent
    assert_nothing_left(pids, shared)


def test_a_with_block_stops_the_processes():
    with new_loader() as loader:
        pids, shared = started(loader)
    assert_nothing_left(pids, shared)


def test_garbage_collection_stops_the_processes():
    loader = new_loader()
    pids, shared = started(loader)
    del loader
    gc.collect()
    assert_nothing_left(pids, shared)


def test_a_failing_stage_raises_in_the_loop_with_its_traceback():
    graph = feature_graph()
    loader = NeighborLoader(graph, num_neighbors=[3, 3], batch_size=16, node_sampler=FailingSampler(), pipeline="async")
    seen = 0
    with pytest.raises(PipelineError, match="the user's sampler broke on its third batch") as error:
        for _ in loader:
            seen += 1
    assert seen <= 2 and "in sample" in str(error.value)  # the stage's traceback comes with it
    pids = [p.pid for p in loader.source.processes.values()]
    loader.close()
    assert_gone(pids)


def run_script(tmp_path, body: str, **popen):
    script = tmp_path / "user_script.py"
    script.write_text(textwrap.dedent(body))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, str(script)], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **popen)


LOOP = """
    import json, os, sys
    from conveyor import NeighborLoader
    from tests.helpers import feature_graph, shm_names

    def main(forever):
        graph = feature_graph()
        loader = NeighborLoader(graph, num_neighbors=[3, 3], batch_size=16, shuffle=True, pipeline="async")
        next(iter(loader))
        pids = [p.pid for p in loader.source.processes.values()]
        print(json.dumps({"pids": pids, "shm": sorted(shm_names([os.getpid(), *pids]))}), flush=True)
        while forever:
            for batch in loader:
                pass
"""


def test_interpreter_exit_stops_the_processes(tmp_path):
    proc = run_script(tmp_path, LOOP + """
    if __name__ == "__main__":
        main(forever=False)  # exits with the loader open
    """)
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err[-3000:]
    state = json.loads(out.splitlines()[-1])
    assert_nothing_left(state["pids"], state["shm"])


def test_ctrl_c_stops_the_loop_and_the_processes(tmp_path):
    proc = run_script(tmp_path, LOOP + """
    if __name__ == "__main__":
        main(forever=True)
    """, start_new_session=True)
    try:
        state = json.loads(proc.stdout.readline())
        time.sleep(1.0)  # into the loop
        os.killpg(proc.pid, signal.SIGINT)  # as a terminal sends it: to the whole group
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode != 0 and "KeyboardInterrupt" in err, err[-3000:]
    assert_nothing_left(state["pids"], state["shm"])


@pytest.mark.parametrize("how", ["file", "stdin"])
def test_an_unguarded_script_runs_as_written(tmp_path, how):
    """As a PyG script runs: no `if __name__ == "__main__":` guard, from a file or from stdin. The
    stage processes start without running the script again (pipeline/guard.py), so its top-level
    code runs once."""
    body = textwrap.dedent("""
    from conveyor import NeighborLoader
    from tests.helpers import feature_graph

    print("script runs", flush=True)
    loader = NeighborLoader(feature_graph(), num_neighbors=[3, 3], batch_size=16, pipeline="async")
    print("batches", sum(1 for batch in loader))
    """)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    if how == "file":
        (tmp_path / "user_script.py").write_text(body)
        done = subprocess.run([sys.executable, "user_script.py"], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=300)
    else:
        done = subprocess.run([sys.executable, "-"], input=body, cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["script", "runs", "batches", "38"]


def test_a_scripts_own_class_needs_the_main_guard_named_with_the_fix(tmp_path):
    """A feature source of a class the script defines reaches the stage only by running the
    script again there: unguarded, that is refused before any process starts."""
    proc = run_script(tmp_path, """
    from conveyor import NeighborLoader
    from tests.helpers import DoubledFeatures, feature_graph

    class MyFeatures(DoubledFeatures):
        pass

    graph = feature_graph()
    loader = NeighborLoader(graph, num_neighbors=[3, 3], batch_size=16, cache=MyFeatures(graph.x), pipeline="async")
    for batch in loader:
        pass
    """)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode != 0
    assert "runs your script" in err and "line 9 starts it from the script's top level" in err, err[-3000:]
    assert 'if __name__ == "__main__": main()' in err and "pipeline='serial'" in err
    assert "sampler stage" not in err  # refused before any process was spawned
