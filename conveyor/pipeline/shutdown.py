"""Starting and stopping the stage processes so that nothing is ever left behind or hangs.

- A stage process is spawned with SIGINT blocked and then ignores it: Ctrl-C reaches the whole
  process group, and the trainer, which owns the run, stops the stages itself once it has left
  the step (and checkpoint) it was in.
- A stage asks the kernel to kill it when the trainer dies (PR_SET_PDEATHSIG, Linux) and also
  polls its parent, so even a SIGKILLed trainer leaves no orphan.
- `stop_processes` waits, then terminates, then kills, each step with a deadline.
- `signals_held` keeps a second Ctrl-C from interrupting a teardown half-way.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import secrets
import signal
import threading
import time
from multiprocessing import synchronize
from typing import Iterable, Mapping

PR_SET_NAME, PR_SET_PDEATHSIG = 15, 1


# multiprocessing's queues and locks are POSIX named semaphores, /dev/shm/sem.<prefix>-<random>;
# their owner unlinks them when it ends, unless it is killed (OOM killer, cgroup, kill -9).
SEMAPHORE_PREFIX = "mp-conveyor-"


@contextlib.contextmanager
def semaphores_named_after_this_process():
    """The semaphores made inside are named `mp-conveyor-<pid>-<random>`, so that a later run can
    tell a killed run's leftovers (dead pid) from a live run's by name alone. multiprocessing
    names them in `SemLock._make_name`, which is what is swapped here (joblib's loky swaps it for
    good when imported, so the process-wide prefix cannot be relied on); the previous one is put
    back on leaving. Whatever this process makes meanwhile belongs to this process: safe."""
    previous = synchronize.SemLock.__dict__["_make_name"]
    synchronize.SemLock._make_name = staticmethod(
        lambda: f"/{SEMAPHORE_PREFIX}{os.getpid()}-{secrets.token_hex(4)}")
    try:
        yield
    finally:
        synchronize.SemLock._make_name = previous


def _prctl(option: int, value) -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the parent polling still applies
        pass


def die_with_parent() -> None:
    _prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL))


def name_process(name: str) -> None:
    """The name `ps`, `top` and psutil show (at most 15 bytes)."""
    _prctl(PR_SET_NAME, ctypes.c_char_p(name.encode()[:15]))


def in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def ignore_interrupts() -> None:
    """In a stage process: ignore SIGINT, then drop any that arrived while it was blocked."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


@contextlib.contextmanager
def spawning(env: Mapping[str, str]):
    """While a stage process is spawned: `env` added to os.environ (the child reads it at start),
    and SIGINT blocked in this thread, a mask the child inherits until `ignore_interrupts`."""
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT}) if in_main_thread() else None
    try:
        yield
    finally:
        if mask is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


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
