"""The GPU validation suite: on a bare GPU machine (nothing kept between calls), each command
proves or measures conveyor's GPU paths within its budget, and returns every step in $OUT the
moment it ends (benchmarks/gpu/README.md says how to run it on such a machine).

Here, with a package index, once (the folder is git-ignored; it travels in the call's `carry`):

    python -m benchmarks.gpu.device --prepare [DIR]     # default DIR: .gpu-wheels/ (< 60 MiB)

There, in the repository root, in this order:

    python3 -m benchmarks.gpu.device check --timeout 480  # correctness, <= 420 s: env, the fused
        # kernel's smoke launch (60 s hard limit), pytest -m gpu, a short stress run,
        # compute-sanitizer synccheck and memcheck on the fused kernel, racecheck if time is left
    python3 -m benchmarks.gpu.device speed --timeout 360  # figures, <= 300 s: the products-scale
        # graph, fused against bsp sampling, one epoch of launch.py with each, the cache
        # benchmark, the pipeline with and without MPS if time is left
    python3 -m benchmarks.gpu.device pyg --timeout 600    # optional: PyG's rows (needs torch_sparse)
    python3 -m benchmarks.gpu.device next --timeout 600   # whichever of the three is due (plan.py)

--timeout is the limit the command runs under on the machine (after it, it is killed); the budget
of work is --budget (default: the timeout less 60 s, at most the command's own cap). Results go
to benchmarks/results/<gpu>/<command>/ and into $OUT (or --out): <command>.json,
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

from benchmarks.gpu import checks, measure, plan, summary
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


@dataclass(frozen=True)
class Step:
    name: str
    run: Callable[[Context], dict]
    needs: tuple[str, ...] = ("env",)  # earlier steps that must have passed
    least_s: float = 20  # what it must have left to start at all
    optional: bool = False  # "if time is left": skipped, not failed, without `least_s`


# Each command's steps, in order: what matters most first, so a budget that runs out costs the least.
COMMANDS = {
    "check": [Step("env", checks.env, needs=()), Step("smoke", checks.smoke), Step("tests_gpu", checks.tests_gpu),
              Step("stress", checks.stress, needs=("env", "smoke")), Step("sanitize", checks.sanitize),
              Step("racecheck", checks.racecheck, needs=("env", "smoke"), least_s=90, optional=True)],
    "speed": [Step("env", checks.env, needs=()), Step("graph", measure.graph),
              Step("sampling", measure.sampling, needs=("graph",)), Step("e2e_fused", measure.e2e_fused, ("graph",)),
              Step("e2e_bsp", measure.e2e_bsp, ("graph",)), Step("cache", measure.cache, ("graph",)),
              Step("pipeline", measure.pipeline, ("graph",), least_s=165, optional=True)],
    "pyg": [Step("env", checks.env, needs=()), Step("graph", measure.graph),
            Step("sampling_pyg", measure.sampling_pyg, ("graph",)), Step("e2e_pyg", measure.e2e_pyg, ("graph",))],
}
CAPS = {"check": 420, "speed": 300, "pyg": 480}  # each command's most seconds of work
MARGIN_S = 60  # of the call's timeout: start-up, packing, the transfers back
DEFAULT_TIMEOUT_S = 600  # the device tool's longest call


def run_step(ctx: Context, step: Step, results: dict) -> dict:
    print(f"\n=== {ctx.command}: {step.name} ({ctx.label}, {ctx.left():.0f} s left) ===", flush=True)
    start = time.perf_counter()
    unmet = [n for n in step.needs if results.get(n, {}).get("status") != "passed"]
    if unmet:
        result = {"status": "not run", "reason": f"needs {', '.join(unmet)}, which did not pass"}
    elif ctx.left() - step.least_s < 0:
        status = "skipped" if step.optional else "not run"
        result = {"status": status, "reason": f"{ctx.left():.0f} s of the {ctx.budget_s:.0f} s budget left, "
                  f"under the {step.least_s:.0f} s it needs"}
    else:
        try:
            result = step.run(ctx)
        except Exception as err:  # a broken step must not take the next ones with it
            traceback.print_exc()
            result = {"status": "failed", "reason": f"{type(err).__name__}: {err}"}
    result["seconds"] = time.perf_counter() - start
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
    outbox = Outbox(ctx, out, timeout_s=timeout_s, fused_source=source)
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
    return 1 if "failed" in statuses or "not run" in statuses else 0


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
    for step in COMMANDS[ctx.command]:
        ctx.logs = []
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
    p.add_argument("--timeout", type=float, default=float(os.environ.get("GPU_SUITE_TIMEOUT_S", DEFAULT_TIMEOUT_S)),
                   help="the seconds after which the machine kills this command (default: $GPU_SUITE_TIMEOUT_S, "
                   "else 600)")
    p.add_argument("--budget", type=float, default=None, help="seconds of work (default: the timeout less 60 s, "
                   "at most the command's cap: " + ", ".join(f"{c} {s} s" for c, s in CAPS.items()) + ")")
    p.add_argument("--commit", default=None, help="the commit the tree is at (default: git, or --prepare's)")
    p.add_argument("--prepare", nargs="?", type=Path, const=DEFAULT_WHEELS, default=None, metavar="DIR",
                   help="prepare what the bare GPU machine lacks in DIR (default .gpu-wheels/)")
    p.add_argument("--shared", type=Path, default=None, help="--prepare takes what fits from this prepared "
                   "folder first (default: ../shared/gpu-wheels beside the checkout or its main checkout)")
    args = p.parse_args(argv)
    if args.command is None and args.prepare is None:
        p.error("give a command (check, speed, pyg, next or summary), or --prepare")
    return args


def context(args, command: str) -> Context:
    device = args.device or ("cuda" if gpu_name() else "cpu")
    label = device_label(device, args.tiny)
    budget = args.budget if args.budget is not None else min(CAPS[command], args.timeout - MARGIN_S)
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
    return run_command(context(args, command), out, args.timeout)


if __name__ == "__main__":
    sys.exit(main())
