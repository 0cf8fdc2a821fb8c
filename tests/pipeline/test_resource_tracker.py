"""A killed resource tracker (multiprocessing's process that unlinks a process's semaphores should it
die) leaves no traceback: the tracker is relaunched empty at the next unregister, and every queue
semaphore the pipeline then unlinked was a KeyError traceback in it (issue #39). The pipeline now
tells a relaunched tracker of its semaphores before it drops its queues (pipeline/source.py)."""
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.helpers import REPO

SCRIPT = textwrap.dedent("""
    import os, sys
    import psutil
    from conveyor import NeighborLoader
    from conveyor.partition.datasets import load_dataset
    graph = load_dataset("cora", root=sys.argv[1])
    loader = NeighborLoader(graph, [5, 5], batch_size=128, pipeline="async")
    batches = iter(loader)
    next(batches)
    tracker = [c for c in psutil.Process().children() if "resource_tracker" in " ".join(c.cmdline())]
    tracker[0].kill()
    tracker[0].wait(10)
    print("epoch 1", 1 + sum(1 for _ in batches))
    print("epoch 2", sum(1 for _ in loader))
    loader.close()
    del loader, batches
    print("pid", os.getpid())
""")


def test_a_killed_resource_tracker_leaves_no_traceback(data_root):
    result = subprocess.run([sys.executable, "-c", SCRIPT, str(data_root)], capture_output=True, text=True,
                            timeout=180, cwd=REPO)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr and "KeyError" not in result.stderr, result.stderr[-3000:]
    assert "resource_tracker" not in result.stderr, result.stderr[-3000:]  # no warning of its relaunch either
    lines = dict(line.rsplit(" ", 1) for line in result.stdout.splitlines())
    assert lines["epoch 1"] == lines["epoch 2"] == "22"  # 2,708 nodes in batches of 128: the run went on
    assert not list(Path("/dev/shm").glob(f"sem.mp-conveyor-{lines['pid']}-*"))  # and its semaphores are gone
