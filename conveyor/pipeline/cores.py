"""How many CPU cores this process may run on, and how many of them are idle now: the sampling
stage takes no more torch threads than that (PipelineSettings.sampling_threads says why)."""
from __future__ import annotations

import os
import time
from contextlib import contextmanager

import torch

WINDOW_S = 0.1  # long enough for a few scheduler ticks, short beside a run's start-up


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


def _idle_ticks(cores: set) -> int:
    """Idle + iowait ticks of `cores`, summed."""
    total = 0
    with open("/proc/stat") as stat:
        for line in stat:
            name, *fields = line.split()
            if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cores:
                total += int(fields[3]) + int(fields[4])
    return total


@contextmanager
def torch_threads(threads: int):
    """torch's CPU threads set to `threads` meanwhile (a switch costs well under a microsecond)."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)
