"""Starting and stopping the stage processes so that nothing is ever left behind or hangs.

- A stage process starts with SIGINT blocked (forked from the fork server, which was started with
  it blocked: forkserver.py) and then ignores it: Ctrl-C reaches the whole process group, and the
  trainer, which owns the run, stops the stages itself once it has left the step (and checkpoint)
  it was in.
- A stage's parent is the fork server, not the trainer, so it watches the trainer itself: a
  thread waits on multiprocessing's parent sentinel (a pipe the trainer holds open: it reads as
  closed the moment the trainer dies, however it dies) and ends the process then; its waits also
  poll it. It asks the kernel to kill it when the fork server dies too (PR_SET_PDEATHSIG, Linux),
  so even a SIGKILLed trainer or server leaves no orphan.
- `stop_processes` waits, then terminates, then kills, each step with a deadline.
- `signals_held` keeps a second Ctrl-C from interrupting a teardown half-way.
"""
from __future__ import annotations

import contextlib
import ctypes
import gc
import multiprocessing
import os
import secrets
import signal
import threading
import time
from multiprocessing import synchronize
from multiprocessing.connection import wait
from typing import Iterable, Mapping

PR_SET_NAME, PR_SET_PDEATHSIG = 15, 1


# multiprocessing's queues and locks are POSIX named semaphores, /dev/shm/sem.<prefix>-<random>;
# their owner unlinks them when it ends, unless it is killed (OOM killer, cgroup, kill -9).
SEMAPHORE_PREFIX = "mp-conveyor-"


@contextlib.contextmanager
def semaphores_named_after_this_process():
    """The semaphores made inside are named `mp-conveyor-<pid>-<random>`, so that a later run can
    tell a killed run's leftovers (dead pid) from a live run's by name alone; the context gives the
    list of the names made. multiprocessing names them in `SemLock._make_name`, which is what is
    swapped here (joblib's loky swaps it for good when imported, so the process-wide prefix cannot
    be relied on); the previous one is put back on leaving. Whatever this process makes meanwhile
    belongs to this process: safe."""
    previous, names = synchronize.SemLock.__dict__["_make_name"], []

    def make_name() -> str:
        names.append(f"/{SEMAPHORE_PREFIX}{os.getpid()}-{secrets.token_hex(4)}")
        return names[-1]
    synchronize.SemLock._make_name = staticmethod(make_name)
    try:
        yield names
    finally:
        synchronize.SemLock._make_name = previous


GC_AFTER_S = 0.1  # how long close() waits for the semaphores to go before it collects cycles


def collect_if_left(names: Iterable[str], wait_s: float | None = None) -> None:
    """Once the objects holding the semaphores `names` are dropped, each is unlinked as its object
    goes (multiprocessing's finaliser): at once, or as soon as a closed queue's feeder thread (which
    holds two of them) has ended, unless one sits in a reference cycle. Only then, after `wait_s`,
    is a full garbage collection run, which takes seconds in a large process under load."""
    deadline = time.monotonic() + (GC_AFTER_S if wait_s is None else wait_s)
    while any(os.path.exists(f"/dev/shm/sem.{name.lstrip('/')}") for name in names):
        if time.monotonic() > deadline:
            gc.collect()
            return
        time.sleep(0.005)


def _prctl(option: int, value) -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the parent polling still applies
        pass


def die_with_parent() -> None:
    """End this (stage) process as soon as the process that started it (the trainer) is gone, or its
    own parent (the fork server) is: a watching thread and PR_SET_PDEATHSIG."""
    _prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL))
    parent = multiprocessing.parent_process()
    if parent is not None and parent.sentinel is not None:
        threading.Thread(target=_exit_when_gone, args=(parent.sentinel,), name="conveyor-parent-watch",
                         daemon=True).start()


def _exit_when_gone(sentinel) -> None:
    wait([sentinel])
    os._exit(0)  # nothing of a run outlives its trainer: no flush, no interpreter teardown


def trainer_alive() -> bool:
    """Whether the process that started this one still runs (its sentinel not closed)."""
    parent = multiprocessing.parent_process()
    return parent is None or parent.is_alive()


def name_process(name: str) -> None:
    """The name `ps`, `top` and psutil show (at most 15 bytes)."""
    _prctl(PR_SET_NAME, ctypes.c_char_p(name.encode()[:15]))


def in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def ignore_interrupts() -> None:
    """In a stage process: ignore SIGINT, then drop any that arrived while it was blocked."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def set_environment(env: Mapping[str, str]) -> None:
    """In a stage process, before it touches CUDA: the trainer's environment as it was when the
    stage was started, and what it set for this stage (the MPS share). A fork of the fork server
    has the server's environment, which the trainer may have changed since (CUDA_VISIBLE_DEVICES)."""
    if dict(os.environ) != dict(env):
        os.environ.clear()
        os.environ.update(env)


@contextlib.contextmanager
def signals_held():
    """Ignore SIGINT and SIGTERM meanwhile (main thread only): they ask for the stop under way."""
    if not in_main_thread():
        yield
        return
    saved = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


def stop_processes(processes: Iterable, grace_s: float = 5.0) -> None:
    """Join `processes` (asked to stop already); terminate, then kill, those still running."""
    processes = [p for p in processes if p.pid is not None]
    deadline = time.monotonic() + grace_s
    for proc in processes:
        proc.join(max(0.0, deadline - time.monotonic()))
    for step in (lambda p: p.terminate(), lambda p: p.kill()):
        alive = [p for p in processes if p.is_alive()]
        for proc in alive:
            step(proc)
        for proc in alive:
            proc.join(2.0)


def describe_exit(exitcode) -> str:
    if exitcode is None:
        return "is still running"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        hint = (" (the out-of-memory killer does this: see `dmesg`)" if -exitcode == signal.SIGKILL
                else "")
        return f"was killed by {name}{hint}"
    return f"exited with code {exitcode}"
