"""Offline partitioning: `python -m partition data=synthetic data.scale=0.01 num_parts=4`.

Arguments are `key=value` tokens (values parsed as YAML: `splits=[train,val]`):
  data=NAME          dataset for `partition.datasets.load_dataset` (required)
  data.KEY=VALUE     its options, e.g. data.scale=0.01 data.seed=0; data.root=DIR (default
                     $CONVEYOR_DATA_ROOT or ~/.cache/conveyor/data)
  num_parts=K        one part per data-parallel rank (required)
  num_hops=3         sampled hops (len(sampler.fanouts))
  method=pagraph     pagraph | random | metis
  seed=0             stream order, tie-breaks, rebalancing
  splits=[train,val,test]  splits distributed with their neighbourhoods
  out=DIR            default <data root>/partitions/<data>_K<k>_L<hops>_<method>
  force=false        repartition even when matching parts are already in `out`
Prints the per-part table; parts already in `out` for the same graph and settings are reused.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import yaml

from .errors import ConveyorError
from .partitioner import (SPLITS, format_report, matches, partition_info, partition_report,
                          partition_to_disk)
from .store import read_header

DEFAULT_ROOT = "~/.cache/conveyor/data"
KEYS = ("data", "num_parts", "num_hops", "method", "seed", "splits", "out", "force")
USAGE = ("usage: python -m partition data=NAME [data.KEY=VALUE ...] num_parts=K [num_hops=3] "
         "[method=pagraph|random|metis] [seed=0] [splits=[train,val,test]] [out=DIR] [force=false]")


def parse(tokens) -> dict:
    args = {"data_options": {}, "num_hops": 3, "method": "pagraph", "seed": 0,
            "splits": list(SPLITS), "out": None, "force": False}
    for token in tokens:
        key, sep, text = token.partition("=")
        if not sep or not key:
            raise ConveyorError(f"argument {token!r} is not key=value. {USAGE}")
        value = yaml.safe_load(text) if text else None
        if key.startswith("data."):
            args["data_options"][key[len("data."):]] = value
        elif key in KEYS:
            args[key] = value
        else:
            raise ConveyorError(f"unknown argument {key!r}; the keys are {', '.join(KEYS)} and "
                                f"data.OPTION. {USAGE}")
    for key in ("data", "num_parts"):
        if args.get(key) is None:
            raise ConveyorError(f"missing {key}=...; {USAGE}")
    return args


def default_out(root: Path, args: dict) -> Path:
    options = "".join(f"_{k}{v}" for k, v in sorted(args["data_options"].items()))
    return (root / "partitions" /
            f"{args['data']}{options}_K{args['num_parts']}_L{args['num_hops']}_{args['method']}")


def main(tokens) -> int:
    args = parse(tokens)
    from .datasets import load_dataset

    options = dict(args["data_options"])
    root = Path(str(options.pop("root", None) or os.environ.get("CONVEYOR_DATA_ROOT") or
                    DEFAULT_ROOT)).expanduser()
    start = time.perf_counter()
    graph = load_dataset(str(args["data"]), root=root, **options)
    print(f"loaded {graph} in {time.perf_counter() - start:.1f} s", flush=True)
    args["data_options"] = options
    out = Path(str(args["out"])).expanduser() if args["out"] else default_out(root, args)
    num_parts, num_hops = args["num_parts"], args["num_hops"]
    method, seed, splits = str(args["method"]), args["seed"], list(args["splits"] or [])
    wanted = partition_info(graph, num_parts, num_hops, method, seed, splits)
    header = read_header(out)
    if not args["force"] and matches(header, wanted):
        print(format_report(partition_report(header["parts"])))
        print(f"reused the parts in {out} (force=true to partition again)")
        return 0
    report = partition_to_disk(graph, num_parts, num_hops, method, out, seed, splits, info=wanted)
    print(format_report(report))
    print(f"wrote {num_parts} parts to {out}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except ConveyorError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)
