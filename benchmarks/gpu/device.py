"""The GPU validation suite: three calls of the device tool prove and measure every GPU path of
conveyor, each on a bare machine (nothing is kept between calls) and within its 10 minutes.

Here, with a package index, once (the folder is git-ignored; it travels in the call's `carry`):

    python benchmarks/gpu/device.py --prepare [DIR]      # default DIR: .gpu-wheels/ (< 60 MiB)

There, one call per phase, in the repository root:

    python3 benchmarks/gpu/device.py 1     # check: env (fails on any missing module), the fused
                                           # kernel's smoke launch (60 s hard limit), compute-sanitizer
                                           # memcheck/racecheck/synccheck/initcheck, pytest -m gpu,
                                           # then the sampler/cache/pipeline test modules
    python3 benchmarks/gpu/device.py 2     # measure: sampling (fused, bsp, pyg), stress of the
                                           # persistent kernel, cache, pipeline (MPS when it starts)
    python3 benchmarks/gpu/device.py 3     # end to end: launch.py with sampler=fused and bsp beside
                                           # the PyG reference; the summary table

Each phase installs the carried wheels offline, makes what it needs (the products-scale graph),
runs its steps each under a time limit inside the phase's budget (--budget, 530 s), writes each
step's JSON the moment it ends under benchmarks/results/<device>/phase<N>/ (e.g. h100/), and
copies into $OUT (when set, or --out): phase<N>.tar.gz (everything the phase measured and
logged), phase<N>.json (every step's result) and summary.md (the table over every phase found
under benchmarks/results/<device>/). Unpack a phase's archive there and commit it; `device.py
summary` remakes the table from what is there.

Options: --device cuda|cpu (default: cuda when nvidia-smi sees a GPU), --tiny (a 12K-node graph
and a few batches: with --device cpu, the dry run CI keeps alive), --results DIR (default
benchmarks/results/<device>), --wheels DIR (the prepared folder), --commit SHA (the commit, for a
copy of the tree without .git). Exit status 1 when a step failed.
"""
from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import sys
import tarfile
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import checks  # noqa: E402
import measure  # noqa: E402
import offline  # noqa: E402
import summary  # noqa: E402
from common import DEFAULT_WHEELS, REPO, Context, device_label, find_commit, gpu_name, rel, write_result  # noqa: E402

# Each phase's steps, in order: what matters most first, so a budget that runs out costs the least.
PHASES = {
    1: [("env", checks.env), ("smoke", checks.smoke), ("sanitize", checks.sanitize),  # the smoke's variants serve
        ("tests_gpu", checks.tests_gpu), ("tests_stages", checks.tests_stages)],  # the sanitizer (Triton's cache)
    2: [("env", checks.env), ("smoke", checks.smoke), ("graph", offline.graph), ("sampling", measure.sampling),
        ("stress", measure.stress), ("cache", measure.cache), ("pipeline", measure.pipeline)],
    3: [("env", checks.env), ("smoke", checks.smoke), ("graph", offline.graph), ("e2e_fused", measure.e2e_fused),
        ("e2e_pyg", measure.e2e_pyg), ("e2e_bsp", measure.e2e_bsp)],
}
MIN_STEP_S = 15  # a step that cannot have this much is recorded as not run
MAX_ARCHIVED_BYTES = 4 * 2**20  # a bigger file (a runaway log) stays out of the archive, named in phase<N>.json


def run_step(ctx: Context, name: str, step, results: dict) -> dict:
    print(f"\n=== phase {ctx.phase}: {name} ({ctx.label}, {ctx.left():.0f} s left) ===", flush=True)
    start = time.perf_counter()
    if results.get("env", {}).get("status") == "failed" and name != "env":
        result = {"status": "not run", "reason": "the env step failed"}
    elif ctx.left() - MIN_STEP_S < 0:
        result = {"status": "not run", "reason": f"the phase's {ctx.budget_s:.0f} s budget ran out"}
    else:
        try:
            result = step(ctx)
        except Exception as err:  # a broken step must not take the next ones with it
            traceback.print_exc()
            result = {"status": "failed", "reason": f"{type(err).__name__}: {err}"}
    result["seconds"] = time.perf_counter() - start
    write_result(ctx, name, result)
    reason = f": {result['reason']}" if result.get("reason") else ""
    print(f"=== {name}: {result['status']} in {result['seconds']:.0f} s{reason}", flush=True)
    return result


class Tee(io.TextIOBase):
    """The console, also written to the phase's console.log (it goes into the archive)."""

    def __init__(self, stream, path: Path):
        self.stream, self.file = stream, open(path, "w")

    def write(self, text):
        self.file.write(text)
        return self.stream.write(text)

    def flush(self):
        self.file.flush()
        self.stream.flush()


def run_phase(ctx: Context, out: Path | None) -> int:
    shutil.rmtree(ctx.phase_dir, ignore_errors=True)  # a phase's results are of one run
    ctx.phase_dir.mkdir(parents=True)
    sys.stdout = Tee(sys.__stdout__, ctx.phase_dir / "console.log")
    print(f"phase {ctx.phase} on {ctx.label} ({ctx.device}{', tiny' if ctx.tiny else ''}), commit {ctx.commit}, "
          f"budget {ctx.budget_s:.0f} s; results in {rel(ctx.phase_dir)}")
    results: dict = {}
    for name, step in PHASES[ctx.phase]:
        results[name] = run_step(ctx, name, step, results)
    table = summary.write(ctx.results)
    print("\n" + table)
    statuses = {name: r["status"] for name, r in results.items()}
    print(f"phase {ctx.phase}: " + ", ".join(f"{n} {s}" for n, s in statuses.items()))
    sys.stdout.flush()
    if out is not None:
        pack(ctx, out, results)
    sys.stdout = sys.__stdout__
    return 1 if "failed" in statuses.values() or "not run" in statuses.values() else 0


def pack(ctx: Context, out: Path, results: dict) -> None:
    """$OUT gets three files: phase<N>.tar.gz (the phase's folder), phase<N>.json, summary.md."""
    out.mkdir(parents=True, exist_ok=True)
    left_out = []

    def small(info):  # the tool brings back files of at most 16 MiB: no one file may swamp the archive
        if info.size > MAX_ARCHIVED_BYTES:
            left_out.append(f"{info.name} ({info.size} bytes)")
            return None
        return info
    with tarfile.open(out / f"phase{ctx.phase}.tar.gz", "w:gz") as tar:
        tar.add(ctx.phase_dir, arcname=ctx.phase_dir.name, filter=small)
    record = {"phase": ctx.phase, "device": ctx.label, "commit": ctx.commit, "steps": results,
              "left_out_of_archive": left_out}
    (out / f"phase{ctx.phase}.json").write_text(json.dumps(record, indent=1, default=str))
    shutil.copy(ctx.results / "summary.md", out / "summary.md")
    print(f"wrote {', '.join(sorted(p.name for p in out.iterdir()))} to {out}", flush=True)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("phase", nargs="?", choices=["1", "2", "3", "summary"])
    p.add_argument("--device", choices=("cuda", "cpu"), default=None)
    p.add_argument("--tiny", action="store_true", help="small graph, few batches (the CPU dry run)")
    p.add_argument("--results", type=Path, default=None, help="default: benchmarks/results/<device>")
    p.add_argument("--out", type=Path, default=None, help="where the phase's files go (default: $OUT, if set)")
    p.add_argument("--wheels", type=Path, default=DEFAULT_WHEELS, help="the --prepare folder")
    p.add_argument("--budget", type=float, default=530.0, help="the phase's seconds")
    p.add_argument("--commit", default=None, help="the commit the tree is at (default: git, or --prepare's)")
    p.add_argument("--prepare", nargs="?", type=Path, const=DEFAULT_WHEELS, default=None, metavar="DIR",
                   help="prepare what the bare GPU machine lacks in DIR (default .gpu-wheels/)")
    args = p.parse_args(argv)
    if args.phase is None and args.prepare is None:
        p.error("give a phase (1, 2, 3 or summary), or --prepare")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.prepare is not None:
        code = offline.prepare(args.prepare.resolve())
        if args.phase is None or code:
            return code
    device = args.device or ("cuda" if gpu_name() else "cpu")
    label = device_label(device, args.tiny)
    results = (args.results or REPO / "benchmarks" / "results" / label).resolve()
    if args.phase == "summary":
        print(summary.write(results))
        return 0
    ctx = Context(device=device, tiny=args.tiny, label=label, results=results, wheels=args.wheels.resolve(),
                  phase=int(args.phase), budget_s=args.budget, commit=args.commit or find_commit(args.wheels))
    out = args.out or (Path(os.environ["OUT"]) if os.environ.get("OUT") else None)
    return run_phase(ctx, out.resolve() if out else None)


if __name__ == "__main__":
    sys.exit(main())
