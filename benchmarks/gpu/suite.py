"""The GPU validation suite: prove and measure every GPU path of conveyor on one bare machine, in
steps that each finish well inside 10 minutes.

Here, with a package index (once; the folder travels with the working tree, git-ignored):

    python benchmarks/gpu/suite.py --prepare [DIR]      # default DIR: .gpu-wheels/ (~7 MB; must stay < 60 MB)

There, without a network, one command per step (or `all`, in order):

    python3 benchmarks/gpu/suite.py setup      # install the prepared wheels, generate the products-
                                               # scale graph (every core), build torch_sparse (CPU)
    python3 benchmarks/gpu/suite.py env        # GPU, driver, SMs, memory, L2, versions, MPS, commit
    python3 benchmarks/gpu/suite.py tests      # pytest -m gpu, then the sampler/cache/pipeline tests
    python3 benchmarks/gpu/suite.py sanitize   # compute-sanitizer memcheck/racecheck/synccheck
    python3 benchmarks/gpu/suite.py bench      # benchmarks/{sampling,cache,pipeline}.py at scale 1.0
    python3 benchmarks/gpu/suite.py e2e        # launch.py beside the PyG reference loop, 3 epochs
    python3 benchmarks/gpu/suite.py summary    # the headline table: <results>/summary.md

Options: --device cuda|cpu (default: cuda when nvidia-smi sees a GPU), --tiny (a 12K-node graph
and a few batches: with --device cpu, the dry run CI keeps alive), --results DIR (default:
benchmarks/results/<device>, e.g. h100 or cpu-tiny), --wheels DIR (the prepared folder),
--only NAME,... (bench: sampling, cache, pipeline; e2e: conveyor, pyg) to rerun a part.

Each step writes <results>/<step>.json (status, figures, the commands it ran) and its children's
output under <results>/logs/. A step that fails says what failed; `all` goes on with the next step
and exits non-zero if any step failed.
"""
from __future__ import annotations

import argparse
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import checks  # noqa: E402
import measure  # noqa: E402
import offline  # noqa: E402
import summary  # noqa: E402
from common import DEFAULT_WHEELS, REPO, Context, device_label, gpu_name, write_result  # noqa: E402

SETUP_LIMITS = {"graph": 240, "build": 300}


def setup(ctx: Context) -> dict:
    """What the other steps need, made once per machine: each part is skipped when done."""
    graph = offline.ensure_graph(ctx, SETUP_LIMITS["graph"])
    print(f"graph: {graph}")
    pyg = offline.build_pyg_extensions(ctx, SETUP_LIMITS["build"])
    print(f"torch_scatter/torch_sparse: {pyg}")
    failed = [f"graph: {graph['reason']}"] if graph["status"] != "ok" else []
    if pyg["status"] == "failed":
        failed.append(f"PyG extensions: {pyg['reason']}")
    return {"status": "failed" if failed else "passed", "graph": graph, "pyg_extensions": pyg,
            **({"reason": "; ".join(failed)} if failed else {})}


STEPS = {
    "setup": setup,
    "env": checks.env,
    "tests": checks.tests,
    "sanitize": checks.sanitize,
    "bench": measure.bench,
    "e2e": measure.e2e,
    "summary": summary.summary,
}
PARTS = {"bench": measure.BENCHMARKS, "e2e": measure.SYSTEMS}


def run_step(ctx: Context, name: str, only: list[str] | None) -> str:
    print(f"\n=== {name} ({ctx.label}) ===", flush=True)
    start = time.perf_counter()
    try:
        deps = offline.install_wheels(ctx) if name != "summary" else None
        if deps and deps["status"] == "failed":
            result = {"status": "failed", "reason": f"installing the prepared wheels: {deps['error'][-500:]}"}
        else:
            result = STEPS[name](ctx, only) if name in PARTS and only else STEPS[name](ctx)
        if deps:
            result["deps"] = deps
    except Exception as err:  # a broken step must not take the next ones with it
        traceback.print_exc()
        result = {"status": "failed", "reason": f"{type(err).__name__}: {err}"}
    result["seconds"] = time.perf_counter() - start
    path = write_result(ctx, name, result)
    reason = f": {result['reason']}" if result.get("reason") else ""
    print(f"=== {name}: {result['status']} in {result['seconds']:.0f} s{reason} -> {path}", flush=True)
    return result["status"]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("step", nargs="?", choices=[*STEPS, "all"])
    p.add_argument("--device", choices=("cuda", "cpu"), default=None)
    p.add_argument("--tiny", action="store_true", help="small graph, few batches (the CPU dry run)")
    p.add_argument("--results", type=Path, default=None, help="default: benchmarks/results/<device>")
    p.add_argument("--wheels", type=Path, default=DEFAULT_WHEELS, help="the --prepare folder")
    p.add_argument("--only", default=None, help="bench or e2e: the parts to (re)run, comma-separated")
    p.add_argument("--prepare", nargs="?", type=Path, const=DEFAULT_WHEELS, default=None, metavar="DIR",
                   help="download what the bare GPU machine lacks into DIR (default .gpu-wheels/)")
    args = p.parse_args(argv)
    if args.step is None and args.prepare is None:
        p.error("give a step, or --prepare")
    if args.only:
        parts = PARTS.get(args.step, ())
        args.only = [o for o in args.only.split(",") if o]
        unknown = [o for o in args.only if o not in parts]
        if unknown:
            p.error(f"--only {','.join(unknown)}: {args.step} has parts {', '.join(parts) or 'none'}")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.prepare is not None:
        code = offline.prepare(args.prepare.resolve())
        if args.step is None or code:
            return code
    device = args.device or ("cuda" if gpu_name() else "cpu")
    label = device_label(device, args.tiny)
    results = (args.results or REPO / "benchmarks" / "results" / label).resolve()
    ctx = Context(device=device, tiny=args.tiny, label=label, results=results, wheels=args.wheels.resolve())
    names = list(STEPS) if args.step == "all" else [args.step]
    statuses = {name: run_step(ctx, name, args.only) for name in names}
    if len(names) > 1:
        print("\n" + ", ".join(f"{n}: {s}" for n, s in statuses.items()))
    return 1 if "failed" in statuses.values() else 0


if __name__ == "__main__":
    sys.exit(main())
