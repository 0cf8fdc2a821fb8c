"""Building `data=synthetic_papers` out of core (issue 47): wall time, disk bytes, peak RSS, machine load.

    CONVEYOR_DATA_ROOT=/work/data python -m benchmarks.synthetic_papers_build --scale 1.0

The build runs in a child process under `/usr/bin/time -v` (its peak RSS: resident pages of the
process, mapped file pages included; the build writes with pwrite, so the files it writes are not in
it), the load average is sampled every 30 s, and the folder's bytes on disk are summed once built.
Writes benchmarks/results/synthetic_papers_build.{json,md} (`--out` for another stem). A folder
already built is not rebuilt: delete it first (never a folder others use).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

RESULTS = Path(__file__).parent / "results"
BUILD = ("import sys, time\nfrom conveyor.partition.datasets import load_dataset\nt = time.time()\n"
         "g = load_dataset('synthetic_papers', root=sys.argv[1], scale=float(sys.argv[2]), seed=int(sys.argv[3]))\n"
         "print('BUILD_SECONDS', time.time() - t)\nprint(g)\n")


def sample_load(samples: list, stop: threading.Event, every: float = 30.0) -> None:
    while not stop.is_set():
        samples.append(os.getloadavg()[0])
        stop.wait(every)


def measure(root: Path, scale: float, seed: int) -> dict:
    folder = root / "synthetic_papers" / f"scale{scale}_seed{seed}"
    if folder.exists():
        sys.exit(f"{folder} exists already: delete it to measure a build (if nobody else uses it).")
    samples, stop = [], threading.Event()
    threading.Thread(target=sample_load, args=(samples, stop), daemon=True).start()
    start = time.time()
    done = subprocess.run(["/usr/bin/time", "-v", sys.executable, "-c", BUILD, str(root), str(scale), str(seed)],
                          capture_output=True, text=True)
    wall = time.time() - start
    stop.set()
    if done.returncode:
        sys.exit(done.stderr[-3000:])
    peak_kib = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr).group(1))
    files = {p.name: p.stat().st_size for p in sorted(folder.iterdir())}
    meta = json.loads((folder / "meta.json").read_text())
    return {"scale": scale, "seed": seed, "folder": str(folder), "num_nodes": meta["num_nodes"],
            "num_edges": meta["num_edges"], "wall_seconds": round(wall, 1),
            "build_seconds": round(float(re.search(r"BUILD_SECONDS (\S+)", done.stdout).group(1)), 1),
            "disk_bytes": sum(files.values()), "files": files, "peak_rss_bytes": peak_kib * 1024,
            "load_average": {"min": min(samples), "mean": round(sum(samples) / len(samples), 2),
                             "max": max(samples), "samples": len(samples)},
            "cores": os.cpu_count(),
            "command": f"CONVEYOR_DATA_ROOT={root} python -m benchmarks.synthetic_papers_build "
                       f"--scale {scale} --seed {seed}"}


def markdown(r: dict) -> str:
    rows = "\n".join(f"| {name} | {size:,} |" for name, size in r["files"].items())
    return (f"# Building synthetic_papers at scale {r['scale']} (issue 47)\n\n`{r['command']}`\n\n"
            f"| figure | value |\n|---|---|\n| nodes | {r['num_nodes']:,} |\n| edges (CSC entries) | "
            f"{r['num_edges']:,} |\n| build wall time | {r['build_seconds']:,.0f} s "
            f"({r['build_seconds'] / 60:.1f} min) |\n"
            f"| disk | {r['disk_bytes']:,} bytes ({r['disk_bytes'] / 2**30:.1f} GiB) |\n| peak RSS | "
            f"{r['peak_rss_bytes'] / 2**30:.2f} GiB |\n| machine | {r['cores']} cores; load average during the build "
            f"min {r['load_average']['min']:.1f}, mean {r['load_average']['mean']:.1f}, max "
            f"{r['load_average']['max']:.1f} (shared with other work) |\n\n| file | bytes |\n|---|---|\n{rows}\n")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scale", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--root", default=os.environ.get("CONVEYOR_DATA_ROOT", "/work/data"))
    p.add_argument("--out", default=str(RESULTS / "synthetic_papers_build"))
    args = p.parse_args()
    result = measure(Path(args.root), args.scale, args.seed)
    Path(args.out).with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    Path(args.out).with_suffix(".md").write_text(markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
