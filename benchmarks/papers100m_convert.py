"""`data=papers100m`'s conversion measured (issue 47): peak memory and time on a fake OGB archive in
ogbn-papers100M's real layout, at a fraction of its size, extrapolated to the full size.

    CONVEYOR_DATA_ROOT=/work/data python -m benchmarks.papers100m_convert --fractions 0.01,0.05

For each fraction f: an archive of round(f x 111,059,956) nodes and round(f x 1,615,685,872)
citations in OGB's names and formats (raw/data.npz compressed with edge_index [2, E] int64,
node_feat [N, 128] float32, node_year [N, 1] int64, num_nodes_list, num_edges_list;
raw/node-label.npz with node_label [N, 1] float64, NaN for the unlabelled; split/time/{train,
valid,test}.csv.gz with papers100M's split shares) is written streaming under
`<root>/papers100m_fake_<f>` (in-degrees skewed, low ids cited most; repeats and self loops
occur). Then `load_dataset("papers100m")` converts it in a child memory cgroup (`--cgroup`,
default 6 GiB: the bound) under `/usr/bin/time -v`: its peak anonymous memory (rss + shmem of
the cgroup, polled), the cgroup's peak usage (the page cache it charged too), the process's
peak RSS (mapped pages of the files it writes included) and the wall time. The archive and its
conversion are deleted after (`--keep` keeps them).

Extrapolation: a straight line through the fractions' peak anonymous memory (fixed chunk buffers
plus bytes a node) evaluated at f = 1, beside the converter's own bound (`convert_bytes`).
Writes benchmarks/results/papers100m_convert.{json,md}.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import shutil
import sys
import threading
import time
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).parent / "results"
NODES, EDGES, FEATURES = 111_059_956, 1_615_685_872, 128
SPLITS = {"train": 1_207_179, "valid": 125_265, "test": 214_338}  # papers100M's split sizes
LABELLED = 1_546_782  # nodes with a label (the rest NaN)
CHUNK = 1 << 23
CONVERT = ("import sys, time\nfrom conveyor.partition.datasets import load_dataset\nt = time.time()\n"
           "g = load_dataset('papers100m', root=sys.argv[1])\nprint(g)\n"
           "print('CONVERT_SECONDS', time.time() - t, file=sys.stderr)\n")  # last before time -v's report


def write_archive(folder: Path, n: int, e: int, seed: int = 0) -> None:
    """OGB's ogbn-papers100M files for n nodes and e citations, streaming through mapped temporaries."""
    rng = np.random.default_rng(seed)
    raw, split = folder / "raw", folder / "split" / "time"
    raw.mkdir(parents=True)
    split.mkdir(parents=True)
    scratch = folder / "scratch"
    scratch.mkdir()
    edges = np.lib.format.open_memmap(scratch / "e.npy", "w+", np.int64, (2, e))
    for start in range(0, e, CHUNK):
        count = min(CHUNK, e - start)
        edges[0, start:start + count] = rng.integers(0, n, count)
        edges[1, start:start + count] = (n * rng.random(count) ** 3).astype(np.int64)  # skewed: low ids cited most
    feat = np.lib.format.open_memmap(scratch / "x.npy", "w+", np.float32, (n, FEATURES))
    rows = CHUNK // FEATURES
    for start in range(0, n, rows):
        feat[start:start + rows] = rng.standard_normal((min(rows, n - start), FEATURES), dtype=np.float32)
    year = np.lib.format.open_memmap(scratch / "year.npy", "w+", np.int64, (n, 1))
    year[:, 0] = rng.integers(1950, 2021, n)
    np.savez_compressed(raw / "data.npz", edge_index=edges, node_feat=feat, node_year=year,
                        num_nodes_list=np.array([n]), num_edges_list=np.array([e]))
    del edges, feat, year
    labelled = rng.choice(n, size=max(3, round(LABELLED * n / NODES)), replace=False)
    labels = np.full((n, 1), np.nan)
    labels[labelled, 0] = rng.integers(0, 172, labelled.size)
    np.savez_compressed(raw / "node-label.npz", node_label=labels)
    del labels
    cuts = np.cumsum([round(SPLITS[s] * n / NODES) for s in ("train", "valid")])
    for name, part in zip(("train", "valid", "test"), np.split(rng.permutation(labelled), cuts)):
        with gzip.open(split / f"{name}.csv.gz", "wt") as f:
            np.savetxt(f, np.sort(part), fmt="%d")
    shutil.rmtree(scratch)


def convert(root: Path, limit: int) -> dict:
    """The conversion in a child memory cgroup under /usr/bin/time -v."""
    from benchmarks.out_of_core import in_cgroup
    loads, stop = [], threading.Event()

    def sample():
        while not stop.wait(10):
            loads.append(os.getloadavg()[0])

    threading.Thread(target=sample, daemon=True).start()
    start = time.time()
    out = in_cgroup(["/usr/bin/time", "-v", sys.executable, "-c", CONVERT, str(root)], limit, timeout=7200)
    wall = time.time() - start
    stop.set()
    if out["rc"] != 0:
        sys.exit(f"the conversion failed (rc {out['rc']}, OOM-killed: {out['oom_killed']}):\n{out['tail']}")
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", out["tail"]).group(1)) * 1024
    return {"wall_seconds": round(wall, 1), "peak_anon_bytes": out["peak_anon_bytes"],
            "cgroup_max_usage_bytes": out["max_usage_bytes"], "peak_rss_bytes": rss,
            "convert_seconds": float(re.search(r"CONVERT_SECONDS (\S+)", out["tail"]).group(1)),
            "load_average": [min(loads, default=0), max(loads, default=0)]}


def measure(root: Path, fraction: float, limit: int, keep: bool) -> dict:
    n, e = round(NODES * fraction), round(EDGES * fraction)
    base = root / f"papers100m_fake_{fraction:g}"
    folder = base / "ogbn_papers100M"
    if base.exists():
        sys.exit(f"{base} exists: delete it first.")
    try:
        start = time.time()
        write_archive(folder, n, e)
        written = time.time() - start
        archive_bytes = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
        figures = convert(base, limit)
        meta = json.loads((folder / "conveyor" / "meta.json").read_text())
        from conveyor.partition.datasets.papers100m import convert_bytes
        bound = sum(convert_bytes(folder / "raw" / "data.npz", n)["memory"].values())
        return {"fraction": fraction, "num_nodes": n, "citations": e, "num_edges": meta["num_edges"],
                "archive_bytes": archive_bytes, "archive_seconds": round(written, 1),
                "converted_bytes": sum(p.stat().st_size for p in (folder / "conveyor").rglob("*") if p.is_file()),
                "converter_bound_bytes": bound, **figures}
    finally:
        if not keep:
            shutil.rmtree(base, ignore_errors=True)


PER_NODE = 16  # bytes a node the converter holds at most: its int64 array, and a second one while counting


def extrapolate(results: list) -> dict:
    """Peak anonymous memory at the full size: with two fractions or more, a straight line (fixed
    chunk buffers + bytes a node) through them; with one, its peak plus PER_NODE bytes for every
    node more (the chunk buffers are fixed once a fraction has a whole chunk of citations)."""
    if not results:
        return {}
    if len(results) == 1:
        r = results[0]
        return {"method": f"the measured peak + {PER_NODE} bytes a node more (the converter's node-sized arrays)",
                "fixed_bytes": r["peak_anon_bytes"] - PER_NODE * r["num_nodes"], "bytes_per_node": PER_NODE,
                "full_peak_anon_bytes": r["peak_anon_bytes"] + PER_NODE * (NODES - r["num_nodes"]),
                "full_convert_seconds": r["convert_seconds"] * EDGES / r["citations"]}
    x = np.array([r["num_nodes"] for r in results], dtype=float)
    y = np.array([r["peak_anon_bytes"] for r in results], dtype=float)
    b, a = np.polyfit(x, y, 1)
    seconds = np.polyfit([r["citations"] for r in results], [r["convert_seconds"] for r in results], 1)
    return {"method": "a straight line through the measured peaks", "fixed_bytes": a, "bytes_per_node": b,
            "full_peak_anon_bytes": a + b * NODES, "full_convert_seconds": float(np.polyval(seconds, EDGES))}


def markdown(r: dict) -> str:
    gib = lambda v: f"{v / 2**30:.2f} GiB"  # noqa: E731
    rows = "\n".join(
        f"| {m['fraction']:g} | {m['num_nodes']:,} | {m['citations']:,} | {m['num_edges']:,} | "
        f"{gib(m['archive_bytes'])} | {m['convert_seconds']:,.0f} s | {gib(m['peak_anon_bytes'])} | "
        f"{gib(m['cgroup_max_usage_bytes'])} | {gib(m['peak_rss_bytes'])} | {gib(m['converter_bound_bytes'])} | "
        f"{m['load_average'][0]:.1f}-{m['load_average'][1]:.1f} |" for m in r["runs"])
    x = r.get("extrapolated", {})
    line = (f"\nExtrapolated to ogbn-papers100M (111,059,956 nodes, 1,615,685,872 citations), {x['method']}: "
            f"{gib(x['fixed_bytes'])} fixed + {x['bytes_per_node']:.1f} bytes a node = "
            f"**{gib(x['full_peak_anon_bytes'])}** of anonymous memory (bound 6 GiB); conversion time, linear in the "
            f"citations, ~{x['full_convert_seconds'] / 3600:.1f} h on this machine at this load.\n" if x else "")
    return (f"# data=papers100m: converting OGB's raw files (a fake archive in the real layout), measured\n\n"
            f"`{r['command']}`; each conversion in a {r['cgroup']} memory cgroup under /usr/bin/time -v; "
            f"{r['cores']} shared cores.\n\n"
            f"| fraction | nodes | citations | CSC entries | archive | time | peak anon | cgroup peak (page cache "
            f"too) | peak RSS (mapped files too) | converter's own bound | load |\n|---|---|---|---|---|---|---|---|"
            f"---|---|---|\n{rows}\n{line}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--fractions", default="0.01,0.05")
    p.add_argument("--root", default=os.environ.get("CONVEYOR_DATA_ROOT", "/work/data"))
    p.add_argument("--cgroup", default="6GiB")
    p.add_argument("--keep", action="store_true")
    p.add_argument("--out", default=str(RESULTS / "papers100m_convert"))
    args = p.parse_args()
    from conveyor.cache.options import parse_bytes
    limit = parse_bytes(args.cgroup, "--cgroup")
    runs = []
    for fraction in map(float, args.fractions.split(",")):
        runs.append(measure(Path(args.root), fraction, limit, args.keep))
        print(json.dumps(runs[-1]), flush=True)
    result = {"runs": runs, "extrapolated": extrapolate(runs), "cgroup": args.cgroup, "cores": os.cpu_count(),
              "command": f"CONVEYOR_DATA_ROOT={args.root} python -m benchmarks.papers100m_convert --fractions "
                         f"{args.fractions} --cgroup {args.cgroup}"}
    Path(args.out).with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    Path(args.out).with_suffix(".md").write_text(markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
