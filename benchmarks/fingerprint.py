"""Fingerprint benchmark: what recording the data's fingerprint costs at a run's start.

Every run computes the fingerprint its checkpoints record (trainer/outputs/fingerprint.py), so
that a resume refuses other data. It hashes every row of every array of the graph
(`contents_digest`, in pieces on every core); the baseline, in the same run, is the digest it
replaced (`partition.digest.sampled_digest`: every edge, but only 65,536 sampled feature
rows). Both over the same memory-mapped graph, its pages in the page cache first (one untimed
pass of each), the median of --repeats timed passes.

    python -m benchmarks.fingerprint                 # scale 1.0: products-sized, 1.46 GB of arrays
    python -m benchmarks.fingerprint --scale 0.1

Prints a table and writes JSON and markdown (default benchmarks/results/fingerprint_cpu_s<scale>.*).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scale", type=float, default=1.0, help="synthetic graph scale (1.0 = products)")
    p.add_argument("--data-root", default=os.environ.get("CONVEYOR_DATA_ROOT", "~/.cache/conveyor/data"))
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", default=None, help="JSON path (the markdown goes beside it)")
    return p.parse_args(argv)


def timed(fn, repeats: int) -> float:
    fn()  # the page cache warm, as at a run's start right after the graph was loaded or built
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv=None) -> dict:
    args = parse_args(argv)
    from conveyor.partition.datasets import load_dataset
    from conveyor.partition.digest import contents_digest, sampled_digest

    graph = load_dataset("synthetic", root=Path(args.data_root).expanduser(), scale=args.scale, seed=0)
    size = sum(t.numel() * t.element_size() for t in graph.tensors().values())
    cores = len(os.sched_getaffinity(0))
    rows = {"sampled (baseline: graph_fingerprint)": timed(lambda: sampled_digest(graph), args.repeats),
            "every row, 1 thread": timed(lambda: contents_digest(graph, threads=1), args.repeats),
            f"every row, {cores} threads (the default)": timed(lambda: contents_digest(graph), args.repeats)}
    baseline = next(iter(rows.values()))
    result = {"graph": repr(graph), "bytes": size, "cores": cores, "load_average": os.getloadavg(),
              "machine": platform.processor() or platform.machine(), "repeats": args.repeats,
              "seconds": rows, "ratio_to_baseline": {k: v / baseline for k, v in rows.items()},
              "gb_per_s": {k: size / v / 1e9 for k, v in rows.items()}}
    table = ["| digest | seconds | GB/s of the graph's arrays | x baseline |", "|---|---|---|---|"]
    table += [f"| {k} | {v:.2f} | {size / v / 1e9:.2f} | {v / baseline:.2f} |" for k, v in rows.items()]
    how = (f"{graph!r}, {size / 1e9:.2f} GB of arrays, memory-mapped, warm page cache; median of "
           f"{args.repeats}; {cores} cores, load average {os.getloadavg()[0]:.1f} at the end")
    text = "\n".join(["# Fingerprint cost at a run's start", "", how, "", *table, ""])
    print(text)
    out = Path(args.out or Path(__file__).parent / "results" / f"fingerprint_cpu_s{args.scale:g}.json")
    out.write_text(json.dumps(result, indent=1))
    out.with_suffix(".md").write_text(text)
    return result


if __name__ == "__main__":
    main()
