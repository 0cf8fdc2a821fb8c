"""Run the programs of a Triton launch concurrently under the interpreter, to test cross-program protocols.

Under TRITON_INTERPRET=1 Triton runs the programs of a grid one after another in one thread: a
green interpreter test says nothing about programs that run at the same time (a lost update, a
flag read before its data, a wait that only ends because the waited-for program already ran to
completion). While `threaded_programs()` is active, every launch instead runs each program in its
own Python thread:

    with threaded_programs(seed=0, delay=0.002, timeout=60) as run:
        kernel[grid](...)
    assert run.launches == 1

- `tl.program_id` is per thread (the interpreter's builder keeps the grid index as shared
  state; here it is thread-local).
- Thread switches are very frequent (`sys.setswitchinterval(switch_interval)`, restored on exit),
  and before every load, store and atomic a program may yield (`time.sleep(0)`, probability
  `yield_prob`) or sleep up to `delay` seconds (probability `sleep_prob`), as drawn by a
  `random.Random` per program, seeded by (seed, launch number, program id). So interleavings vary
  with the seed and are roughly reproducible from it (thread scheduling still adds its own noise).
- Every atomic (atomic_rmw: add, min, max, and, or, xor, xchg...; and atomic_cas) runs under one
  lock, so each is one indivisible step with respect to every other program.
- A watchdog: if the launch has not finished after `timeout` seconds, the launch raises
  `ProgramsHung` (an AssertionError) with the stack of every program still running, so a spin that
  never ends shows where it spins. Those programs are then stopped (they raise at their next
  load, store or atomic; failing that, an exception is injected into the thread), and they are
  daemon threads: they never keep the test process alive.
- An exception in a program stops the others (as above) and is raised by the launch, with that
  program's traceback, wrapped in the InterpreterError the interpreter raises for it.

What it models: programs as concurrent agents, interleaved at any Python bytecode boundary and
more often at memory operations. Each program is still ONE sequential agent: no warps (a
`debug_barrier` is a no-op, a tile is computed at once by one thread, so warp divergence or
disagreeing warps cannot show), and memory is sequentially consistent (no reordering of loads and
stores, no stale caches: release/acquire and `.cg` make no difference here). A vector atomic is
indivisible as a whole, where a GPU runs one atomic per element. So it finds cross-program
protocol bugs -- lost updates, missing waits, termination races, claims that two programs both
win -- but not warp-level or weak-memory bugs; those need the GPU (and a compiled-PTX review).

Everything is patched only inside the context manager and restored on exit. Not reentrant, and
one launch at a time (the interpreter itself is not thread-safe across launches).
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

import triton
from triton.runtime import interpreter
from triton.runtime.errors import InterpreterError

Builder = interpreter.InterpreterBuilder
_ATOMICS = ("create_atomic_rmw", "create_atomic_cas")
_MEMORY = ("create_masked_load", "create_masked_store")
_HIDDEN = (os.path.dirname(triton.__file__), threading.__file__, __file__)  # left out of stacks
_active = threading.Lock()  # one harness at a time: the patches are process-wide


class ProgramsHung(AssertionError):
    """The launch did not finish within the timeout; the message holds the running programs' stacks."""


class _Stop(BaseException):
    """Raised in a program that must stop (the watchdog fired or another program failed).
    A BaseException, so that the interpreter's `except Exception` wrappers let it through."""


class ThreadedPrograms:
    """The harness's settings and what it saw; the object `threaded_programs()` yields."""

    def __init__(self, seed, delay, sleep_prob, yield_prob, timeout, switch_interval):
        self.seed, self.delay, self.timeout = seed, delay, timeout
        self.sleep_prob, self.yield_prob = sleep_prob, yield_prob
        self.switch_interval = switch_interval
        self.launches = 0  # launches run with threaded programs
        self.programs = 0  # programs run, over all launches
        self._atomic_lock = threading.Lock()
        self._patch_lock = threading.Lock()
        self._patched_fns = set()  # device functions that patched triton.language in this launch
        self._local = threading.local()  # per program thread: grid_idx, rng, stop
        self._executor = None  # the GridExecutor whose launch is being set up
        self._launch_started = False

    # -- hooks called by the patched interpreter --------------------------------------------------
    def pause(self):
        """At a load, store or atomic of a program thread: stop if asked, else maybe yield or sleep."""
        local = self._local
        rng = getattr(local, "rng", None)
        if rng is None:  # the main thread (not a program)
            return
        if local.stop.is_set():
            raise _Stop
        r = rng.random()
        if r < self.sleep_prob:
            time.sleep(rng.uniform(0, self.delay))
        elif r < self.sleep_prob + self.yield_prob:
            time.sleep(0)

    def run_grid(self, fn, args):
        """Run every program of the launch in its own thread; called by the interpreter's loop in
        place of the first program, the others then return at once (see `_patched`)."""
        if self._launch_started:
            return
        self._launch_started = True
        self.launches += 1
        launch = self.launches
        stop = threading.Event()
        done = queue.Queue()
        nx, ny, nz = interpreter.interpreter_builder.grid_dim
        threads = {}
        for pid in itertools.product(range(nx), range(ny), range(nz)):
            rng = random.Random(f"{self.seed}/{launch}/{pid}")
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
                self._stop(stop, running.values())
                raise ProgramsHung(message) from None
            if error is not None:
                self._stop(stop, threads.values())
                error.add_note(f"(raised in Triton program {pid} under threaded_programs)")
                raise error

    def _program(self, fn, args, pid, rng, stop, done):
        local = self._local
        local.grid_idx, local.rng, local.stop = pid, rng, stop
        try:
            fn(**args)
        except _Stop:
            return
        except BaseException as e:  # noqa: B036 -- handed to the launching thread
            done.put((pid, e))
            return
        done.put((pid, None))

    def _stacks(self, running) -> str:
        """Each running program's stack, innermost last, in the kernel's own code: the frames of
        Triton, threading and this harness are left out (unless nothing else is left)."""
        frames = sys._current_frames()
        lines = [f"{len(running)} Triton program(s) still running after {self.timeout} s "
                 f"(threaded_programs seed={self.seed}, launch {self.launches}); their stacks, "
                 f"without Triton's, threading's and the harness's frames:"]
        for pid, t in running.items():
            frame = frames.get(t.ident)
            stack = traceback.extract_stack(frame) if frame is not None else []
            own = [f for f in stack if not f.filename.startswith(_HIDDEN)]
            lines.append(f"--- program {pid} ---\n" + "".join(traceback.format_list(own or stack)).rstrip())
        return "\n".join(lines)

    @staticmethod
    def _stop(stop, threads, grace=5.0):
        """Make the programs exit: each raises _Stop at its next load, store or atomic. One that
        does none (a pure-Python spin) gets _Stop injected into its thread. Daemon threads either
        way: a program stuck in native code cannot keep the process alive."""
        stop.set()
        deadline = time.monotonic() + grace
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
        for t in threads:
            if t.is_alive():
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(t.ident), ctypes.py_object(_Stop))
                t.join(1.0)


def _grid_idx_property(harness: ThreadedPrograms):
    """The builder's grid index, per thread (the launching thread sets its own in the loop)."""
    def get(builder):
        return getattr(harness._local, "grid_idx", None)

    def set_(builder, value):
        harness._local.grid_idx = value

    return property(get, set_)


@contextlib.contextmanager
def _patched(harness: ThreadedPrograms):
    """Patch the interpreter (class attributes of its builder and of GridExecutor), restore on exit."""
    saved = []

    def patch(owner, name, value):  # owner: a class or a module
        saved.append((owner, name, owner.__dict__.get(name, _MISSING)))
        setattr(owner, name, value)

    def paused(original):
        def call(builder, *args, **kwargs):
            harness.pause()
            return original(builder, *args, **kwargs)
        return call

    def atomic(original):
        def call(builder, *args, **kwargs):
            harness.pause()  # outside the lock: the others keep running while this one waits
            with harness._atomic_lock:
                return original(builder, *args, **kwargs)
        return call

    launch_call = interpreter.GridExecutor.__call__
    set_grid_dim = Builder.set_grid_dim

    def launch(executor, *args, **kwargs):
        harness._executor, harness._launch_started, harness._patched_fns = executor, False, set()
        fn = executor.fn
        try:
            return launch_call(executor, *args, **kwargs)
        except InterpreterError as e:
            if isinstance(e.__cause__, ProgramsHung):  # show the stacks, not their repr()
                raise e.__cause__ from None
            raise
        finally:
            executor.fn, harness._executor = fn, None

    def grid_dim(builder, *dims):
        # The interpreter calls this after inspecting executor.fn and right before its loop over
        # the grid: from here on, the loop's first call of executor.fn runs the whole grid.
        set_grid_dim(builder, *dims)
        executor = harness._executor
        if executor is not None:
            fn = executor.fn
            executor.fn = lambda **args: harness.run_grid(fn, args)

    patch_lang = interpreter._patch_lang

    def patch_lang_once(fn):
        # A device-function call re-patches triton.language on every call (an idempotent
        # inspect.getmembers sweep, the interpreter's main cost in spin loops). In program threads,
        # patch once per function: the same end state, without N threads rewriting modules at once.
        if getattr(harness._local, "rng", None) is None:
            return patch_lang(fn)  # the launch's own patch, which it restores
        with harness._patch_lock:
            if fn not in harness._patched_fns:
                harness._patched_fns.add(fn)
                return patch_lang(fn)

    switch_interval = sys.getswitchinterval()
    try:
        patch(interpreter, "_patch_lang", patch_lang_once)
        patch(Builder, "grid_idx", _grid_idx_property(harness))
        for name in _MEMORY:
            patch(Builder, name, paused(getattr(Builder, name)))
        for name in _ATOMICS:
            patch(Builder, name, atomic(getattr(Builder, name)))
        patch(Builder, "set_grid_dim", grid_dim)
        patch(interpreter.GridExecutor, "__call__", launch)
        sys.setswitchinterval(harness.switch_interval)
        yield
    finally:
        sys.setswitchinterval(switch_interval)
        for owner, name, value in reversed(saved):
            if value is _MISSING:
                delattr(owner, name)
            else:
                setattr(owner, name, value)


_MISSING = object()


@contextlib.contextmanager
def threaded_programs(seed: int = 0, delay: float = 0.002, timeout: float = 60.0, sleep_prob: float = 0.02,
                      yield_prob: float = 0.2, switch_interval: float = 1e-4):
    """While active, each Triton program of an interpreted launch runs in its own thread (see the
    module docstring). `delay`: longest random sleep (s) before a memory operation; `timeout`: the
    watchdog's limit per launch (s)."""
    if not _active.acquire(blocking=False):
        raise RuntimeError("threaded_programs is already active (it is not reentrant)")
    try:
        harness = ThreadedPrograms(seed, delay, sleep_prob, yield_prob, timeout, switch_interval)
        with _patched(harness):
            yield harness
    finally:
        _active.release()
