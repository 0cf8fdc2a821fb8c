"""compute-sanitizer's stand-in for the CPU dry run: it accepts exactly the options the suite
gives compute-sanitizer (`--tool`, `--print-limit`) and runs the target unchecked, with its exit
status, so that every sanitizer command line the suite builds is executed on CPU too, and a
target that refuses its arguments fails the dry run as it would fail on a GPU.

    python -m benchmarks.gpu.sanitizer_standin --tool memcheck --print-limit 20 TARGET ARG ...
"""
from __future__ import annotations

import argparse
import os

TOOLS = ("memcheck", "racecheck", "synccheck", "initcheck")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tool", choices=TOOLS, required=True)
    p.add_argument("--print-limit", type=int, default=None)
    p.add_argument("target", nargs=argparse.REMAINDER, help="the program and its arguments")
    args = p.parse_args(argv)
    if not args.target:
        p.error("no target program given")
    print(f"sanitizer stand-in: {args.tool} not run (no CUDA device); running the target unchecked", flush=True)
    os.execvp(args.target[0], args.target)  # its exit status is ours


if __name__ == "__main__":
    main()
