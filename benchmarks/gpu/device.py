"""The GPU validation suite: on a bare GPU machine (nothing kept between calls), each command
proves or measures conveyor's GPU paths within its budget, and returns every step in $OUT the
moment it ends (benchmarks/gpu/README.md says how to run it on such a machine).

Here, with a package index, once (the folder is git-ignored; it travels in the call's `carry`):

    python -m benchmarks.gpu.device --prepare [DIR]     # default DIR: .gpu-wheels/ (< 60 MiB): the
        # wheels the image lacks, the tests' Planetoid files, the kernel's Triton cache for sm_90

There, in the repository root, in this order (a chance: the machine's start, then 1 and 2 at once):

    python3 -m benchmarks.gpu.device check --timeout 420   # correctness, 390 s: env, the fused kernel's
        # smoke launch (uniform and weighted, alone, 60 s), pytest -m gpu (weighted and pipeline
        # tests first), a short stress run, compute-sanitizer synccheck and memcheck, racecheck on
        # what is left
    python3 -m benchmarks.gpu.device speed --timeout 330   # the headline pair, 300 s: the products-scale
        # graph, fused against bsp sampling, one epoch of launch.py with each
    python3 -m benchmarks.gpu.device speed2 --timeout 330  # later: the cache benchmark, the pipeline
        # with and without MPS
    python3 -m benchmarks.gpu.device pyg --timeout 600     # later: PyG's rows (needs torch_sparse)
    python3 -m benchmarks.gpu.device next --timeout 600    # whichever is due (plan.py)

--timeout is the limit the command runs under on the machine (after it, it is killed; default:
the command's own above); the budget of work is --budget (default: the timeout less 30 s). Each
step has a limit (COMMANDS), the limits add up to the budget at the documented timeout and are
scaled to any other; a step may also use what the steps before it left, and its children are
stopped (TERM, then KILL) by its end: one cut there makes the step `partial`, not `failed`.
Results go to benchmarks/results/<gpu>/<command>/ and into $OUT (or --out): <command>.json,
<command>.tar.gz, summary.md, rewritten as each step ends. `summary` remakes the table from what
is under benchmarks/results/<gpu>/.

Options: --device cuda|cpu (default: cuda when nvidia-smi sees a GPU), --tiny (a 12K-node graph
and a few batches: with --device cpu, the dry run CI runs), --results DIR, --wheels DIR (the
prepared folder), --commit SHA (for a copy of the tree without .git). Exit status 1 when a step
failed or could not run, 143 when stopped by SIGTERM.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import itertools
import json
import os
import shutil
import signal
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from benchmarks.gpu import checks, kernel_cache, measure, plan, summary
from benchmarks.gpu.common import (
    DEFAULT_WHEELS,
    REPO,
    Context,
    Stopped,
    device_label,
    find_commit,
    gpu_name,
    rel,
    write_result,
)
from benchmarks.gpu.outbox import Outbox, log_tails


def usable(result: dict) -> bool:
    """A step a later one may build on: passed, or partial with what the later one needs done
    (a smoke run that checked some variants before its limit)."""
    return result.get("status") == "passed" or (result.get("status") == "partial" and bool(result.get("usable")))


@dataclass(frozen=True)
class Step:
    name: str
    run: Callable[[Context], dict]
    limit_s: float  # its time at the command's documented timeout; the limits add up to the budget
    needs: tuple[str, ...] = ("env",)  # earlier steps that must have passed
    optional: bool = False  # runs only on what earlier steps left (limit 0): skipped without `least_s`
    least_s: float = 0  # what an optional step must have left to start at all


# Each command's steps, in order: what matters most first. A step may use its own time and what
# the steps before it left; its children are stopped (TERM, then KILL) by its end.
COMMANDS = {
    "check": [Step("env", checks.env, 30, needs=()), Step("smoke", checks.smoke, 60),
              Step("tests_gpu", checks.tests_gpu, 165), Step("stress", checks.stress, 45, needs=("env", "smoke")),
              Step("sanitize", checks.sanitize, 90),
              Step("racecheck", checks.racecheck, 0, needs=("env", "smoke"), optional=True, least_s=40)],
    "speed": [Step("env", checks.env, 20, needs=()), Step("graph", measure.graph, 100),
              Step("sampling", measure.sampling, 40, needs=("graph",)),
              Step("e2e_fused", measure.e2e_fused, 70, needs=("graph",)),
              Step("e2e_bsp", measure.e2e_bsp, 70, needs=("graph",))],
    "speed2": [Step("env", checks.env, 20, needs=()), Step("graph", measure.graph, 100),
               Step("cache", measure.cache, 45, needs=("graph",)),
               Step("pipeline", measure.pipeline, 135, needs=("graph",))],
    "pyg": [Step("env", checks.env, 25, needs=()), Step("graph", measure.graph, 100),
            Step("sampling_pyg", measure.sampling_pyg, 110, needs=("graph",)),
            Step("e2e_pyg", measure.e2e_pyg, 335, needs=("graph",))],
}
# Each command's call timeout as benchmarks/gpu/README.md gives it: check then speed fill one
# 15-minute chance with the machine's start; speed2 and pyg are for later chances (`next`).
TIMEOUTS = {"check": 420, "speed": 330, "speed2": 330, "pyg": 600}
MARGIN_S = 30  # of the call's timeout: the driver's start, the last child's TERM-to-KILL grace, packing
CHANCE_S = 15 * 60  # a session's device time: the machine's start, every call, the idle time between
MACHINE_START_S = 120  # the machine's own start (1-2 minutes), before the first call's command runs
TRANSFERS_S = 30  # the trees sent and $OUT brought back, and the second call's start right after the first


def allotments(command: str, budget_s: float) -> list[float]:
    """Each step's seconds for a budget: the documented limits, scaled so they add up to it."""
    limits = [step.limit_s for step in COMMANDS[command]]
    return [limit * budget_s / sum(limits) for limit in limits]


def run_step(ctx: Context, step: Step, results: dict) -> dict:
    print(f"\n=== {ctx.command}: {step.name} ({ctx.label}, {ctx.step_left():.0f} s for it, {ctx.left():.0f} s "
          f"of the budget left) ===", flush=True)
    start = time.perf_counter()
    unmet = [n for n in step.needs if not usable(results.get(n, {}))]
    if unmet:
        result = {"status": "not run", "reason": f"needs {', '.join(unmet)}, which did not pass"}
    elif ctx.step_left() < max(step.least_s, 1):
        status = "skipped" if step.optional else "not run"
        result = {"status": status, "reason": f"{max(0, ctx.step_left()):.0f} s left for it, under the "
                  f"{max(step.least_s, 1):.0f} s it needs"}
    else:
        before = kernel_cache.kernels()
        try:
            result = step.run(ctx)
        except Exception as err:  # a broken step must not take the next ones with it
            traceback.print_exc()
            result = {"status": "failed", "reason": f"{type(err).__name__}: {err}"}
        if ctx.cuda and step.name != "env":  # new entries in the compile cache: kernels compiled here, not carried
            result["kernels_compiled_here"] = kernel_cache.kernels() - before
    result["seconds"] = time.perf_counter() - start
    result["limit_s"] = round(ctx.step_limit_s, 1)
    reason = f": {result['reason']}" if result.get("reason") else ""
    print(f"=== {step.name}: {result['status']} in {result['seconds']:.0f} s{reason}", flush=True)
    return result


class Tee(io.TextIOBase):
    """The console, also written to the command's console.log (it goes into the archive)."""

    def __init__(self, stream, path: Path):
        self.stream, self.file = stream, open(path, "w")

    def write(self, text):
        self.file.write(text)
        return self.stream.write(text)

    def flush(self):
        self.file.flush()
        self.stream.flush()


def on_sigterm(signum, frame):
    raise Stopped(f"signal {signum}")


def run_command(ctx: Context, out: Path | None, timeout_s: float) -> int:
    shutil.rmtree(ctx.folder, ignore_errors=True)  # a command's results are of one run
    ctx.folder.mkdir(parents=True)
    sys.stdout = Tee(sys.__stdout__, ctx.folder / "console.log")
    source = plan.fused_source()
    print(f"{ctx.command} on {ctx.label} ({ctx.device}{', tiny' if ctx.tiny else ''}), commit {ctx.commit}, fused "
          f"source {str(source['sha256'])[:12]}, budget {ctx.budget_s:.0f} s (call timeout {timeout_s:.0f} s); "
          f"results in {rel(ctx.folder)}, files in {out or 'no $OUT'}")
    limits = {step.name: round(s, 1) for step, s in zip(COMMANDS[ctx.command], allotments(ctx.command, ctx.budget_s))}
    outbox = Outbox(ctx, out, timeout_s=timeout_s, fused_source=source, step_limits_s=limits)
    outbox.flush()  # from the first second, the call returns a record of where it stands
    signal.signal(signal.SIGTERM, on_sigterm)
    try:
        results = run_steps(ctx, outbox)
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        sys.stdout.flush()
        sys.stdout = sys.__stdout__
    if results is None:
        return 143
    statuses = [r["status"] for r in results.values()]
    return 1 if "failed" in statuses or "not run" in statuses else 0  # partial: 0, and `next` runs it again


@contextlib.contextmanager
def sigterm_held():
    """SIGTERM waits until a record is whole: it arrives (as Stopped) after the block."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})


def run_steps(ctx: Context, outbox: Outbox) -> dict | None:
    """Every step in turn, each recorded (and sent to $OUT) as it ends; None when stopped."""
    results: dict = {}
    allotted = allotments(ctx.command, ctx.budget_s)
    for step, allotment, end in zip(COMMANDS[ctx.command], allotted, itertools.accumulate(allotted)):
        ctx.logs = []
        ctx.step_deadline = ctx.started + end  # its own time, and what the steps before left
        ctx.step_limit_s, ctx.step_allotment_s = ctx.step_left(), allotment
        try:
            result = run_step(ctx, step, results)
            with sigterm_held():
                results[step.name] = record(ctx, outbox, step.name, result)
        except Stopped as stop:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)  # one is enough: record what is done, undisturbed
            if step.name not in results:
                record(ctx, outbox, step.name, {"status": "killed", "reason": f"the call was stopped ({stop}) "
                                                "during this step"})
            outbox.finish(stopped=f"{stop} during {step.name}")
            return None
    with sigterm_held():
        outbox.finish()
    print("\n" + summary.write(ctx.results))
    print(f"{ctx.command}: " + ", ".join(f"{n} {r['status']}" for n, r in results.items()), flush=True)
    return results


def record(ctx: Context, outbox: Outbox, name: str, result: dict) -> dict:
    result["log_tail"] = log_tails(ctx.logs)
    write_result(ctx, name, result)
    outbox.step_done(name, result)
    return result


# -- the command line --------------------------------------------------------------------------

def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("command", nargs="?", choices=[*COMMANDS, "next", "summary"])
    p.add_argument("--device", choices=("cuda", "cpu"), default=None)
    p.add_argument("--tiny", action="store_true", help="small graph, few batches (the CPU dry run)")
    p.add_argument("--results", type=Path, default=None, help="default: benchmarks/results/<device>")
    p.add_argument("--out", type=Path, default=None, help="where the call's files go (default: $OUT, if set)")
    p.add_argument("--wheels", type=Path, default=DEFAULT_WHEELS, help="the --prepare folder")
    env_timeout = os.environ.get("GPU_SUITE_TIMEOUT_S")
    p.add_argument("--timeout", type=float, default=float(env_timeout) if env_timeout else None,
                   help="the seconds after which the machine kills this command (default: $GPU_SUITE_TIMEOUT_S, "
                   "else the command's documented timeout)")
    p.add_argument("--budget", type=float, default=None, help=f"seconds of work (default: the timeout less "
                   f"{MARGIN_S} s); the steps' limits scale to it (documented timeouts: "
                   + ", ".join(f"{c} {t} s" for c, t in TIMEOUTS.items()) + ")")
    p.add_argument("--commit", default=None, help="the commit the tree is at (default: git, or --prepare's)")
    p.add_argument("--prepare", nargs="?", type=Path, const=DEFAULT_WHEELS, default=None, metavar="DIR",
                   help="prepare what the bare GPU machine lacks in DIR (default .gpu-wheels/)")
    p.add_argument("--shared", type=Path, default=None, help="--prepare takes what fits from this prepared "
                   "folder first (default: ../shared/gpu-wheels beside the checkout or its main checkout)")
    args = p.parse_args(argv)
    if args.command is None and args.prepare is None:
        p.error("give a command (check, speed, pyg, next or summary), or --prepare")
    return args


def timeout(args, command: str) -> float:
    """The call's timeout: --timeout, else the command's documented one."""
    return args.timeout if args.timeout is not None else TIMEOUTS[command]


def context(args, command: str) -> Context:
    device = args.device or ("cuda" if gpu_name() else "cpu")
    label = device_label(device, args.tiny)
    budget = args.budget if args.budget is not None else timeout(args, command) - MARGIN_S
    return Context(device=device, tiny=args.tiny, label=label, wheels=args.wheels.resolve(), command=command,
                   results=(args.results or REPO / "benchmarks" / "results" / label).resolve(),
                   budget_s=max(budget, 0.0), commit=args.commit or find_commit(args.wheels))


def choose_next(ctx: Context, out: Path | None) -> str | None:
    """`next`: the command due (plan.py), or None; says which and why, in $OUT too."""
    command, reason = plan.next_command(ctx.results)
    print(f"next: {reason}", flush=True)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "next.json").write_text(json.dumps({"command": command, "reason": reason, "device": ctx.label}))
    return command


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.prepare is not None:
        from benchmarks.gpu.prepare import prepare  # here only: it needs packaging and pip
        code = prepare(args.prepare.resolve(), args.shared)
        if args.command is None or code:
            return code
    out = args.out or (Path(os.environ["OUT"]) if os.environ.get("OUT") else None)
    out = out.resolve() if out else None
    command = args.command
    if command in ("next", "summary"):
        ctx = context(args, "check")
        if command == "summary":
            print(summary.write(ctx.results))
            return 0
        command = choose_next(ctx, out)
        if command is None:
            return 0
    return run_command(context(args, command), out, timeout(args, command))


if __name__ == "__main__":
    sys.exit(main())
