"""The threaded-programs harness (tests/samplers/threaded_interpreter.py) on toy kernels: it catches a planted
cross-program race that the sequential interpreter misses, shows where a spin hangs, runs
programs that wait for each other, and hands a program's exception to the caller."""
import os
import sys
import threading
import time
import traceback

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.runtime import interpreter  # noqa: E402

from tests.samplers.threaded_interpreter import ProgramsHung, threaded_programs  # noqa: E402

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1",
                                reason="the harness runs Triton's interpreter (TRITON_INTERPRET=1)")

PROGRAMS, ITERS = 4, 100


@triton.jit
def racy_count(counter, ITERS: tl.constexpr):
    """Planted race: a non-atomic read-modify-write of a counter every program shares."""
    for _ in range(ITERS):
        v = tl.load(counter)
        tl.store(counter, v + 1)


@triton.jit
def atomic_count(counter, ITERS: tl.constexpr):
    for _ in range(ITERS):
        tl.atomic_add(counter, 1)


@triton.jit
def raise_max(cell, out, ITERS: tl.constexpr):
    """Each program raises the shared maximum with atomic_max and records what it saw before:
    the values it saw must increase strictly (an indivisible max never goes back)."""
    pid = tl.program_id(0)
    for i in range(ITERS):
        old = tl.atomic_max(cell, pid * ITERS + i)
        tl.store(out + pid * ITERS + i, old)


def count(kernel, seed=None):
    counter = torch.zeros(1, dtype=torch.int64)
    if seed is None:
        kernel[(PROGRAMS,)](counter, ITERS=ITERS)
    else:
        with threaded_programs(seed=seed, timeout=30) as run:
            kernel[(PROGRAMS,)](counter, ITERS=ITERS)
        assert run.launches == 1 and run.programs == PROGRAMS
    return int(counter)


def test_sequential_interpreter_hides_the_race():
    """Why the harness is needed: one program after another, the racy kernel looks right."""
    assert count(racy_count) == PROGRAMS * ITERS


def test_harness_catches_the_lost_update():
    # 400 read-modify-writes by 4 programs switching every few microseconds and yielding at 20%
    # of loads and stores: each run loses updates with overwhelming probability; five seeds make
    # "at least one wrong" certain for practical purposes.
    totals = [count(racy_count, seed) for seed in range(5)]
    assert all(t <= PROGRAMS * ITERS for t in totals)
    assert any(t < PROGRAMS * ITERS for t in totals), totals


def test_atomics_are_indivisible_across_programs():
    for seed in range(5):
        assert count(atomic_count, seed) == PROGRAMS * ITERS
    cell = torch.full((1,), -1, dtype=torch.int64)
    seen = torch.empty(PROGRAMS * ITERS, dtype=torch.int64)
    with threaded_programs(seed=0, timeout=30):
        raise_max[(PROGRAMS,)](cell, seen, ITERS=ITERS)
    assert int(cell) == PROGRAMS * ITERS - 1
    for row in seen.view(PROGRAMS, ITERS):  # program p's own writes: p*ITERS + i, increasing
        assert bool((row.diff() >= 0).all())


@triton.jit
def own_ids(out, REPEAT: tl.constexpr):
    """Each program reads its id again and again around memory operations (where the harness
    switches threads) and writes it: with a shared grid index, ids would leak between programs."""
    for i in range(REPEAT):
        pid = tl.program_id(0)
        tl.store(out + pid * REPEAT + i, tl.load(out + pid * REPEAT + i) + pid)


def test_program_ids_are_per_thread():
    out = torch.zeros(8 * 20, dtype=torch.int64)
    with threaded_programs(seed=1, timeout=30):
        own_ids[(8,)](out, REPEAT=20)
    assert torch.equal(out.view(8, 20), torch.arange(8)[:, None].expand(8, 20))


@triton.jit
def spin_forever(counter):
    seen = tl.atomic_add(counter, 0)
    while seen < 1:
        seen = tl.atomic_add(counter, 0)  # nobody ever adds 1: this spins


def program_threads():
    return [t for t in threading.enumerate() if t.name.startswith("triton program")]


def test_watchdog_shows_where_a_program_spins_and_stops_it():
    counter = torch.zeros(1, dtype=torch.int64)
    start = time.monotonic()
    with pytest.raises(ProgramsHung) as caught:
        with threaded_programs(seed=0, timeout=1.0):
            spin_forever[(2,)](counter)
    assert time.monotonic() - start < 10
    message = str(caught.value)
    assert "2 Triton program(s) still running after 1.0 s" in message
    assert "--- program (0, 0, 0) ---" in message and "--- program (1, 0, 0) ---" in message
    assert "in spin_forever" in message and "nobody ever adds 1: this spins" in message
    assert not program_threads(), "the stuck programs must be stopped"
    # Everything is restored: the plain interpreter runs the next launch.
    assert count(atomic_count) == PROGRAMS * ITERS


@triton.jit
def relay(flags, order, ticket):
    """Program i waits for program i+1's flag, then raises its own: it completes only if the
    programs run at the same time (one after another, program 0 would wait forever)."""
    pid = tl.program_id(0)
    last = tl.num_programs(0) - 1
    if pid < last:
        ready = tl.atomic_add(flags + pid + 1, 0)
        while ready == 0:
            ready = tl.atomic_add(flags + pid + 1, 0)
    position = tl.atomic_add(ticket, 1)
    tl.store(order + position, pid)
    tl.atomic_xchg(flags + pid, 1)


def test_programs_that_wait_for_each_other_complete():
    n = 6
    for seed in range(3):
        flags, order = torch.zeros(n, dtype=torch.int32), torch.full((n,), -1)
        ticket = torch.zeros(1, dtype=torch.int64)
        with threaded_programs(seed=seed, timeout=30):
            relay[(n,)](flags, order, ticket)
        assert order.tolist() == list(range(n - 1, -1, -1))
        assert flags.tolist() == [1] * n


def fail_in_program(pid):
    raise RuntimeError(f"program {pid} fails")


@triton.jit
def one_program_fails(counter, FAILING: tl.constexpr):
    """Program FAILING raises (a Python call: only the interpreter runs this kernel); the others
    wait for a counter it would have raised, so they must be stopped, not waited for."""
    pid = tl.program_id(0)
    if pid == FAILING:
        fail_in_program(FAILING)
    seen = tl.atomic_add(counter, 0)
    while seen < 1:
        seen = tl.atomic_add(counter, 0)


def test_a_programs_exception_is_raised_with_its_traceback():
    counter = torch.zeros(1, dtype=torch.int64)
    start = time.monotonic()
    with pytest.raises(Exception) as caught:
        with threaded_programs(seed=0, timeout=60):
            one_program_fails[(4,)](counter, FAILING=2)
    assert time.monotonic() - start < 15  # the others were stopped, not left to the watchdog
    error = caught.value
    while not isinstance(error, RuntimeError) or isinstance(error, interpreter.InterpreterError):
        error = error.__cause__  # the interpreter wraps a program's error, as without the harness
    assert str(error) == "program 2 fails"
    assert error.__notes__ == ["(raised in Triton program (2, 0, 0) under threaded_programs, seed 0, launch 1)"]
    names = [frame.name for frame in traceback.extract_tb(error.__traceback__)]
    assert names[-2:] == ["one_program_fails", "fail_in_program"], names
    assert not program_threads()


def test_everything_is_restored_on_exit():
    interval = sys.getswitchinterval()
    saved = {name: interpreter.InterpreterBuilder.__dict__.get(name) for name in
             ("grid_idx", "set_grid_dim", "create_masked_load", "create_masked_store", "create_atomic_rmw",
              "create_atomic_cas")}
    executor = dict(interpreter.GridExecutor.__dict__)
    patch_lang = interpreter._patch_lang
    with threaded_programs(seed=0, switch_interval=1e-6):
        assert sys.getswitchinterval() < interval
        with pytest.raises(RuntimeError, match="not reentrant"):
            with threaded_programs():
                pass
    assert sys.getswitchinterval() == interval
    assert dict(interpreter.GridExecutor.__dict__) == executor and interpreter._patch_lang is patch_lang
    assert saved == {name: interpreter.InterpreterBuilder.__dict__.get(name) for name in saved}


@triton.jit
def write_past(out, n):
    """Program 1 writes one element past the end of `out`."""
    pid = tl.program_id(0)
    tl.store(out + n * pid, 1)


def test_out_of_bounds_access_is_an_error_not_a_crash():
    """Checked against each argument's own view: writing past a slice of a bigger buffer counts."""
    buffer = torch.zeros(8, dtype=torch.int32)
    with pytest.raises(Exception) as caught:
        with threaded_programs(seed=0, timeout=30):
            write_past[(2,)](buffer[:4], 4)
    error = caught.value.__cause__
    assert isinstance(error, IndexError) and "outside every tensor argument" in str(error), error
    assert "program (1, 0, 0)" in error.__notes__[0]
    # Program 1's store past its slice (buffer[4]) never landed. Program 0 runs at the same time
    # and is stopped with the launch, so whether its store (buffer[0]) came first is a race.
    assert buffer[1:].tolist() == [0] * 7 and buffer[0] in (0, 1), buffer.tolist()
