"""Run the programs of a Triton launch concurrently under the interpreter, to test cross-program protocols.

Under TRITON_INTERPRET=1 Triton runs the programs of a grid one after another in one thread: a
green interpreter test says nothing about programs that run at the same time (a lost update, a
flag read before its data, a wait that only ends because the waited-for program already ran to
completion). While `threaded_programs()` is active, every interpreted launch instead runs each
program in its own Python thread:

    with threaded_programs(seed=0, timeout=60) as run:
        kernel[grid](...)
    assert run.launches == 1

- `tl.program_id` is per thread (the interpreter's builder keeps the grid index as shared
  state; here it is thread-local).
- Thread switches are frequent (`sys.setswitchinterval(switch_interval)`, 0.1 ms by default
  against Python's 5 ms; restored on exit), and before every load, store and atomic a program may
  yield (`time.sleep(0)`, probability `yield_prob`) or sleep up to `delay` seconds (probability
  `sleep_prob`), as drawn by a `random.Random` per program, seeded by (seed, launch number,
  program id). So interleavings vary with the seed and are roughly reproducible from it (the OS's
  thread scheduling adds its own noise). Only the order of memory operations is observable
  between programs, and every one of them is a possible switch point.
- Every atomic (atomic_rmw: add, min, max, and, or, xor, xchg...; and atomic_cas) runs under one
  lock: each is one indivisible step with respect to every other program.
- Every load, store and atomic is bounds-checked against the launch's tensor arguments (each
  view's own extent): an access outside all of them raises IndexError in that program, instead
  of the segfault or silent corruption the interpreter would give -- a race often shows first as
  an index read too early.
- A watchdog: if the launch has not finished after `timeout` seconds, it raises `ProgramsHung`
  (an AssertionError) with the stack of every program still running, in the kernel's code, so a
  spin that never ends shows where it spins. Those programs are then stopped (they raise at their
  next load, store or atomic; failing that, an exception is injected into their thread), and they
  are daemon threads: they never keep the test process alive.
- An exception in a program stops the others (as above) and is raised by the launch with that
  program's traceback, wrapped in the InterpreterError the interpreter raises for it.

What it models: programs as concurrent agents, interleaved at their memory operations (and at
any bytecode). Each program is still ONE sequential agent: no warps (a `debug_barrier` is a
no-op, a tile is computed at once, by one thread), so warp divergence and warps that disagree
cannot show; and memory is sequentially consistent: no reordering of loads and stores, no stale
caches, so release/acquire semantics and `.cg` loads make no difference here. A vector atomic is
indivisible as a whole, where a GPU runs one atomic per element. So it finds cross-program
protocol bugs -- lost updates, missing waits, termination races, work claimed twice or never --
but not warp-level or weak-memory bugs: those need the GPU (and a look at the compiled code).

Everything is patched only inside the context manager (class attributes of the interpreter's
builder and GridExecutor, and the interpreter's `_patch_lang`) and restored on exit. One
harness at a time, one launch at a time: the interpreter's patches are process-wide.
"""
from __future__ import annotations

import contextlib
import ctypes
import itertools
import os
import queue
import random
import sys
import threading
import time
import traceback

import numpy as np
import triton
from triton.runtime import interpreter
from triton.runtime.errors import InterpreterError

Builder = interpreter.InterpreterBuilder
# The builder's memory operations, with the positions of their pointer and mask arguments.
_MEMORY = {"create_masked_load": (0, 1), "create_masked_store": (0, 2)}
_ATOMICS = {"create_atomic_rmw": (1, 3), "create_atomic_cas": (0, None)}
_HIDDEN = (os.path.dirname(triton.__file__), threading.__file__, __file__)  # left out of stacks
_MISSING = object()
_active = threading.Lock()  # one harness at a time


class ProgramsHung(AssertionError):
    """The launch did not finish within the timeout; the message holds the running programs' stacks."""


class _Stop(BaseException):
    """Raised in a program that must stop (the watchdog fired or another program failed).
    A BaseException, so that the interpreter's `except Exception` wrappers let it through."""


class ThreadedPrograms:
    """The harness's settings and what it saw: the object `threaded_programs()` yields."""

    def __init__(self, seed, delay, sleep_prob, yield_prob, timeout, switch_interval):
        self.seed, self.delay, self.timeout = seed, delay, timeout
        self.sleep_prob, self.yield_prob = sleep_prob, yield_prob
        self.switch_interval = switch_interval
        self.launches = 0  # launches run with threaded programs
        self.programs = 0  # programs run, over all launches
        self._atomic_lock = threading.Lock()
        self._patch_lock = threading.Lock()
        self._local = threading.local()  # per program thread: grid_idx, rng, stop
        # Per launch:
        self._executor = None  # the GridExecutor being set up
        self._started = False  # its programs are running
        self._bounds = None  # (starts, ends) of its tensor arguments, or None: not checked
        self._patched_fns = set()  # device functions that patched triton.language

    # -- called by the patched interpreter --------------------------------------------------------
    def before_access(self, name, args):
        """Before a load, store or atomic: in a program thread, stop if asked, check the bounds,
        then maybe yield or sleep."""
        local = self._local
        rng = getattr(local, "rng", None)
        if rng is None:  # not a program thread
            return
        if local.stop.is_set():
            raise _Stop
        self._check_bounds(name, args)
        r = rng.random()
        if r < self.sleep_prob:
            time.sleep(rng.uniform(0, self.delay))
        elif r < self.sleep_prob + self.yield_prob:
            time.sleep(0)

    def _check_bounds(self, name, args):
        if self._bounds is None:
            return
        at, mask_at = {**_MEMORY, **_ATOMICS}[name]
        ptrs = args[at]
        addr = np.asarray(ptrs.data, dtype=np.uint64)
        if mask_at is not None:
            addr = addr[np.broadcast_to(np.asarray(args[mask_at].data, dtype=bool), addr.shape)]
        addr = addr.ravel()
        if addr.size == 0:
            return
        size = max(1, ptrs.get_element_ty().primitive_bitwidth // 8)
        starts, ends = self._bounds
        i = np.searchsorted(starts, addr, side="right") - 1  # the range starting at or below
        inside = (i >= 0) & (addr + np.uint64(size) <= ends[np.maximum(i, 0)])
        if not inside.all():
            raise IndexError(f"{name[len('create_'):]} at address {int(addr[~inside][0]):#x}: outside "
                             f"every tensor argument of the launch ({int((~inside).sum())} of {addr.size} "
                             f"lanes out of bounds)")

    def set_bounds(self, values):
        """The address ranges of the launch's tensor arguments (merged where views overlap); no
        checking if an argument holds memory of a kind not known here."""
        ranges = []
        for value in values:
            if isinstance(value, tuple):
                value = list(value)
            for v in value if isinstance(value, list) else [value]:
                if not hasattr(v, "data_ptr"):
                    continue
                t = interpreter._unwrap_tensor(v)
                if not hasattr(t, "stride"):
                    self._bounds = None
                    return
                extent = 1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride())) if t.numel() else 0
                ranges.append((t.data_ptr(), t.data_ptr() + extent * t.element_size()))
        merged = []
        for start, end in sorted(ranges):
            if merged and start <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], end)
            else:
                merged.append([start, end])
        self._bounds = (np.array([s for s, _ in merged], dtype=np.uint64),
                        np.array([e for _, e in merged], dtype=np.uint64))

    def run_grid(self, fn, args):
        """Run every program of the launch in its own thread. Called by the interpreter's loop in
        place of its first program; the later calls return at once (see `_patched`)."""
        if self._started:
            return
        self._started = True
        self.launches += 1
        stop, done = threading.Event(), queue.Queue()
        threads = {}
        for pid in itertools.product(*map(range, interpreter.interpreter_builder.grid_dim)):
            rng = random.Random(f"{self.seed}/{self.launches}/{pid}")
            threads[pid] = threading.Thread(target=self._program, args=(fn, args, pid, rng, stop, done),
                                            name=f"triton program {pid}", daemon=True)
        self.programs += len(threads)
        for t in threads.values():
            t.start()
        deadline = time.monotonic() + self.timeout
        for _ in threads:
            try:
                pid, error = done.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                running = {pid: t for pid, t in threads.items() if t.is_alive()}
                message = self._stacks(running)  # before stopping them: where they spin now
                _stop(stop, running.values())
                raise ProgramsHung(message) from None
            if error is not None:
                _stop(stop, threads.values())
                error.add_note(f"(raised in Triton program {pid} under threaded_programs, seed {self.seed}, "
                               f"launch {self.launches})")
                raise error

    def _program(self, fn, args, pid, rng, stop, done):
        local = self._local
        local.grid_idx, local.rng, local.stop = pid, rng, stop
        try:
            fn(**args)
        except _Stop:
            return
        except BaseException as e:  # handed to the launching thread
            done.put((pid, e))
            return
        done.put((pid, None))

    def _stacks(self, running) -> str:
        """Each running program's stack, innermost last, in the kernel's own code: the frames of
        Triton, threading and this harness are left out (unless nothing else is left)."""
        frames = sys._current_frames()
        lines = [f"{len(running)} Triton program(s) still running after {self.timeout} s (threaded_programs "
                 f"seed {self.seed}, launch {self.launches}); their stacks, without Triton's frames:"]
        for pid, t in running.items():
            frame = frames.get(t.ident)
            stack = traceback.extract_stack(frame) if frame is not None else []
            own = [f for f in stack if not f.filename.startswith(_HIDDEN)]
            lines.append(f"--- program {pid} ---\n" + "".join(traceback.format_list(own or stack)).rstrip())
        return "\n".join(lines)


def _stop(stop: threading.Event, threads, grace: float = 5.0):
    """Make the programs exit: each raises _Stop at its next load, store or atomic. One that does
    none (a pure-Python spin) gets _Stop injected into its thread. A program stuck in native code
    stays, but as a daemon thread it cannot keep the process alive."""
    stop.set()
    deadline = time.monotonic() + grace
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    for t in threads:
        if t.is_alive():
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(t.ident), ctypes.py_object(_Stop))
            t.join(1.0)


@contextlib.contextmanager
def _patched(harness: ThreadedPrograms):
    """Patch the interpreter for `harness`; restore everything on exit."""
    saved = []

    def patch(owner, name, value):  # owner: a class or a module
        saved.append((owner, name, owner.__dict__.get(name, _MISSING)))
        setattr(owner, name, value)

    def memory(name, original):
        def call(builder, *args, **kwargs):
            harness.before_access(name, args)
            return original(builder, *args, **kwargs)
        return call

    def atomic(name, original):
        def call(builder, *args, **kwargs):
            harness.before_access(name, args)  # outside the lock: the others run while this one waits
            with harness._atomic_lock:
                return original(builder, *args, **kwargs)
        return call

    def grid_idx():  # the builder's grid index, per thread (the launching thread keeps its own)
        def get(builder):
            return getattr(harness._local, "grid_idx", None)

        def set_(builder, value):
            harness._local.grid_idx = value
        return property(get, set_)

    launch_call = interpreter.GridExecutor.__call__
    init_args_hst = interpreter.GridExecutor._init_args_hst
    set_grid_dim = Builder.set_grid_dim
    patch_lang = interpreter._patch_lang

    def launch(executor, *args, **kwargs):
        harness._executor, harness._started, harness._patched_fns = executor, False, set()
        fn = executor.fn
        try:
            return launch_call(executor, *args, **kwargs)
        except InterpreterError as e:
            if isinstance(e.__cause__, ProgramsHung):  # show the stacks, not their repr()
                raise e.__cause__ from None
            raise
        finally:
            executor.fn, harness._executor, harness._bounds = fn, None, None

    def init_args(executor, args_dev, kwargs):
        # The host copies of the arguments: the memory the programs may touch.
        args_hst, kwargs_hst = init_args_hst(executor, args_dev, kwargs)
        harness.set_bounds([*args_hst, *kwargs_hst.values()])
        return args_hst, kwargs_hst

    def grid_dim(builder, *dims):
        # The interpreter calls this after inspecting executor.fn and right before its loop over
        # the grid: from here on, the loop's first call of executor.fn runs the whole grid.
        set_grid_dim(builder, *dims)
        executor = harness._executor
        if executor is not None:
            fn = executor.fn
            executor.fn = lambda **args: harness.run_grid(fn, args)

    def patch_lang_once(fn):
        # A device-function call re-patches triton.language on every call (an idempotent sweep of
        # inspect.getmembers: the interpreter's main cost in spin loops). In program threads,
        # patch once per function and launch: the same end state, N times faster, and no N
        # threads rewriting the same module attributes at once.
        if getattr(harness._local, "rng", None) is None:
            return patch_lang(fn)  # the launch's own patch, which it restores
        with harness._patch_lock:
            if fn not in harness._patched_fns:
                harness._patched_fns.add(fn)
                return patch_lang(fn)

    switch_interval = sys.getswitchinterval()
    try:
        patch(Builder, "grid_idx", grid_idx())
        for name in _MEMORY:
            patch(Builder, name, memory(name, getattr(Builder, name)))
        for name in _ATOMICS:
            patch(Builder, name, atomic(name, getattr(Builder, name)))
        patch(Builder, "set_grid_dim", grid_dim)
        patch(interpreter.GridExecutor, "__call__", launch)
        patch(interpreter.GridExecutor, "_init_args_hst", init_args)
        patch(interpreter, "_patch_lang", patch_lang_once)
        sys.setswitchinterval(harness.switch_interval)
        yield
    finally:
        sys.setswitchinterval(switch_interval)
        for owner, name, value in reversed(saved):
            if value is _MISSING:
                delattr(owner, name)
            else:
                setattr(owner, name, value)


@contextlib.contextmanager
def threaded_programs(seed: int = 0, delay: float = 0.002, timeout: float = 60.0, sleep_prob: float = 0.02,
                      yield_prob: float = 0.2, switch_interval: float = 1e-4):
    """While active, each program of an interpreted Triton launch runs in its own thread (see the
    module docstring). `delay`: the longest random sleep (s) before a memory operation;
    `timeout`: the watchdog's limit per launch (s)."""
    if not _active.acquire(blocking=False):
        raise RuntimeError("threaded_programs is already active (it is not reentrant)")
    try:
        harness = ThreadedPrograms(seed, delay, sleep_prob, yield_prob, timeout, switch_interval)
        with _patched(harness):
            yield harness
    finally:
        _active.release()
