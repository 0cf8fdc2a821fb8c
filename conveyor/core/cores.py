"""How many CPU cores this process may run on, how many of them are idle now, and so how many torch
threads a sampler takes: no more than are idle at start (pipeline.settings.PipelineSettings.
sampling_threads and the samplers' own `threads="auto"` both choose here).

Why: torch's intra-op threads wait for each other at the end of every op, so one of them on a core
another process holds stalls the rest (bsp at 2 threads: 28 ms a batch on an idle pair of cores,
1.5 s with one of them taken). A thread count chosen this way is never slower than one thread."""
from __future__ import annotations

import os
import time
from contextlib import contextmanager
from typing import Tuple

import torch

from conveyor.core.errors import ConveyorError

WINDOW_S = 0.1  # long enough for a few scheduler ticks, short beside a run's start-up
REUSE_S = 5.0  # a measurement this recent is reused: building several samplers costs one window
_last: dict = {}  # frozenset(cores) -> (monotonic time, idle count)


def usable_cores() -> set:
    """The ids of the cores this process may run on (its affinity; all of them where the OS
    does not say)."""
    if hasattr(os, "sched_getaffinity"):
        return set(os.sched_getaffinity(0))
    return set(range(os.cpu_count() or 1))


def idle_cores(cores: set, window_s: float = WINDOW_S) -> int:
    """How many of `cores` other processes leave idle, from /proc/stat's idle time over
    `window_s` while this process sleeps; all of them where /proc/stat cannot be read."""
    try:
        first = _idle_ticks(cores)
        start = time.monotonic()
        time.sleep(window_s)
        second = _idle_ticks(cores)
        elapsed = time.monotonic() - start
    except (OSError, ValueError):
        return len(cores)
    ticks_per_s = os.sysconf("SC_CLK_TCK")
    return min(len(cores), round((second - first) / ticks_per_s / elapsed))


def recent_idle_cores(cores: set) -> int:
    """idle_cores(cores), measured at most REUSE_S ago."""
    key, now = frozenset(cores), time.monotonic()
    if key not in _last or now - _last[key][0] > REUSE_S:
        _last[key] = (now, idle_cores(cores))
    return _last[key][1]


def _idle_ticks(cores: set) -> int:
    """Idle + iowait ticks of `cores`, summed."""
    total = 0
    with open("/proc/stat") as stat:
        for line in stat:
            name, *fields = line.split()
            if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cores:
                total += int(fields[3]) + int(fields[4])
    return total


def idle_threads(share: int) -> Tuple[int, str]:
    """At most `share` threads, and no more than the cores idle now (at least 1); and how they were
    chosen, in the words of the start-up line."""
    cores = usable_cores()
    idle = recent_idle_cores(cores)
    return max(1, min(share, idle)), f"auto: {idle} of {len(cores)} cores idle at start"


def sampler_threads(threads="auto") -> int:
    """A sampler's own torch thread count: `threads` as given (an int >= 1), or for "auto" the
    process's torch threads, its cores and the idle ones, whichever is fewest."""
    if threads == "auto":
        return idle_threads(min(torch.get_num_threads(), len(usable_cores())))[0]
    if type(threads) is not int or threads < 1:
        raise ConveyorError(f"a sampler's threads must be 'auto' or an integer >= 1, got {threads!r}.")
    return threads


@contextmanager
def torch_threads(threads: int):
    """torch's CPU threads set to `threads` meanwhile (a switch costs well under a microsecond)."""
    before = torch.get_num_threads()
    if threads != before:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        if threads != before:
            torch.set_num_threads(before)
