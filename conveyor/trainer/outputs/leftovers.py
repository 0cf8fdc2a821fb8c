"""Sweeping, as a run starts, what killed runs left outside the data root (the data root's own
staging folders are swept where their cache or partitioning is loaded, built or not:
partition/datasets/common.py and partition/store.py).

- `/dev/shm/sem.mp-conveyor-<pid>-*`: the named semaphores behind the async pipeline's queues
  (pipeline/shutdown.py names them after their process). Their owner unlinks them when it ends,
  unless it was killed as well, as an out-of-memory or cgroup kill does.
- `<tmp>/conveyor-ranks-<pid>.*`: the notes folder of a DDP launcher.

Only names carrying a dead process's id are deleted: never a live run's, never another program's.
"""
from __future__ import annotations

import tempfile
from pathlib import Path

from conveyor.core.leftovers import sweep_dead
from conveyor.pipeline.shutdown import SEMAPHORE_PREFIX

SHM = Path("/dev/shm")
RANK_NOTES_PREFIX = "conveyor-ranks-"


def sweep_leftovers() -> None:
    sweep_dead(SHM, f"sem.{SEMAPHORE_PREFIX}")
    sweep_dead(Path(tempfile.gettempdir()), RANK_NOTES_PREFIX)
