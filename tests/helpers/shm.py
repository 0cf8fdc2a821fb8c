"""A small /dev/shm in a mount namespace of its own (tests/pipeline/test_shm_small.py,
tests/entry/test_hostile_doors.py)."""
from __future__ import annotations

import os
import subprocess

from tests.helpers.common import REPO

# -- a small /dev/shm (test_shm_small.py, test_hostile_doors.py) --------------------------------

SMALL_SHM = "8m"


def in_small_shm(command: str, size: str = SMALL_SHM, timeout: int = 180) -> subprocess.CompletedProcess:
    """`command` (a shell line, run in the repository) in a mount namespace of its own whose
    /dev/shm is a tmpfs of `size` (`unshare -m`, as root)."""
    prepare = f"mount -t tmpfs -o size={size} tmpfs /dev/shm"
    return subprocess.run(["unshare", "-m", "sh", "-c", f"{prepare} && {command}"], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})


def shm_namespaces_allowed() -> bool:
    try:
        probe = in_small_shm("df -B1 --output=size /dev/shm | tail -1", timeout=20)
        return probe.stdout.strip() == str(8 << 20)
    except (OSError, subprocess.SubprocessError):
        return False


def fill_shm() -> None:
    """Fill /dev/shm to its last byte (inside such a namespace)."""
    with open("/dev/shm/filler", "wb") as filler:
        try:
            while True:
                filler.write(bytes(1 << 16))
                filler.flush()
        except OSError:
            pass


class NoFanouts:
    """bsp drawing every in-neighbour at two hops, without saying its fanouts: the pipeline cannot
    bound its batches ahead (a sampler of the user's own)."""

    def __init__(self, graph):
        from conveyor.samplers import build_sampler
        self.inner = build_sampler("bsp", graph, [-1, -1])

    def sample(self, seeds):
        return self.inner.sample(seeds)
