"""Where the stage processes come from: multiprocessing's fork server, started once per process
with torch and the stage code imported (`PRELOAD`), so that each stage process is a fork of it
instead of a fresh interpreter importing torch again (spawn: ~2 s idle, minutes under load).

- CUDA: the fork server never initialises CUDA (nothing in `PRELOAD` touches it at import:
  tests/pipeline/test_stage_start.py checks), so each forked stage may use it, and CUDA IPC between the
  stages and the trainer works as from spawned ones. The trainer itself may have initialised CUDA:
  the server is a fresh interpreter (`python -c`), not a fork of the trainer.
- The user's script: the server does not run it (`__main__` is not preloaded), and a stage runs it
  only where it is handed a class of it (guard.py's `hiding_main`, as with spawn).
- Signals: the server is started with SIGINT blocked, a mask it and every stage forked from it
  inherit, until the stage ignores SIGINT itself (shutdown.py: the trainer stops the stages).
- Lifetime: the server lives as long as this process or its last stage process; a stage forked
  from it has the server as its parent, so it watches the trainer through multiprocessing's
  parent sentinel (shutdown.py `die_with_parent`).

`start_early()` starts the server in the background (a no-op once it runs): a PipelineLoader that
will run async calls it at construction, so that the server's imports overlap with the rest of the
loader's set-up and the first batch waits for them less. `start_for_loaders()` starts it sooner,
when a script takes `conveyor.NeighborLoader` or `conveyor.LinkNeighborLoader` (the "change one
import" path) on a machine with more than one usable core: the server's imports (~1.4 s of one
core, mostly torch's) then overlap with the script's own (PyG's) and its data loading, and the
first async batch comes ~1 s sooner (benchmarks/loader.py's first-batch column). A loader that
stays serial (pipeline=auto on a small graph) leaves that idle server behind, one per process;
on one core, where auto never goes async, nothing starts. The trainer's own runs start it at
construction only.
"""
from __future__ import annotations

import signal
import threading
from multiprocessing import forkserver

import psutil
import torch.multiprocessing as mp

from conveyor.core.cores import usable_cores
from conveyor.core.errors import ConveyorError

# What a stage process imports before it works: torch, the stage bodies and what they build.
PRELOAD = ["torch", "conveyor.pipeline.stages", "conveyor.samplers.bsp", "conveyor.cache",
           "conveyor.partition.attributes"]
_lock = threading.Lock()


def stage_context():
    """The multiprocessing context the stage processes start from (the fork server, running)."""
    start_early()
    check_not_stopped()
    return mp.get_context("forkserver")


def check_not_stopped() -> None:
    """A fork server that is stopped (SIGSTOP, a debugger), not dead, never answers: a stage
    started from it would wait forever without a word. Said, with the fix, instead."""
    pid = server_pid()
    try:
        stopped = pid is not None and psutil.Process(pid).status() in (psutil.STATUS_STOPPED,
                                                                        psutil.STATUS_TRACING_STOP)
    except psutil.Error:  # gone meanwhile: ensure_running starts another at the next start
        return
    if stopped:
        raise ConveyorError(f"the fork server the pipeline's stage processes start from (process {pid}) is "
                            f"stopped (SIGSTOP, or held by a debugger), so an async loader would wait for it "
                            f"forever. Continue it (kill -CONT {pid}) or end it (kill {pid}: the next loader "
                            f"starts another), or use pipeline='serial'.")


def start_early() -> None:
    """Start the fork server with `PRELOAD` now, SIGINT blocked meanwhile (the server and its
    forks inherit the mask); it imports in the background, and the first stage waits for it."""
    with _lock:
        if forkserver._forkserver._forkserver_pid is not None:  # running (or ended: ensure_running restarts it)
            forkserver.ensure_running()
            return
        mp.get_context("forkserver").set_forkserver_preload(PRELOAD)
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            forkserver.ensure_running()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def start_for_loaders() -> None:
    """`start_early()` where an async loader may follow: more than one usable core, and not in a
    process of multiprocessing's own (a stage importing the user's script to unpickle a class of
    it, a DataLoader worker), which must not start processes while it boots."""
    booting = getattr(mp.current_process(), "_inheriting", False)  # what multiprocessing itself checks
    if len(usable_cores()) > 1 and mp.parent_process() is None and not booting:
        start_early()


def server_pid():
    """The fork server's pid, None before it starts."""
    return forkserver._forkserver._forkserver_pid
