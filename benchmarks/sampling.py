"""Sampler benchmark: `fused` (one persistent Triton kernel per batch or super-batch) against `bsp`
(one hop at a time with torch ops) and `pyg` (PyG's NeighborSampler), on the synthetic
products-shaped graph.

For fanouts [15,10,5] and [10,10,10] and batch sizes 1024 and 4096 (or --fanouts and
--batch-sizes) it times --batches batches of each sampler (the same seeds for all), and fused's
super-batch mode (`sample_many` of --super-batch batches per launch). Reported: ms per batch,
sampled edges per second, and the speedup over bsp measured in the same run (bsp ms / sampler
ms), plus the mean nodes and edges per batch as a check that the samplers draw subgraphs of the same size.

    python benchmarks/sampling.py --device cuda                   # scale 1.0 (products' size)
    python benchmarks/sampling.py                                 # CPU: a small graph

On CPU, fused runs under Triton's interpreter (TRITON_INTERPRET=1): its figures measure the
interpreter, not the kernel, and it gets --interpreter-batches batches only. They are marked
"interpreter" in the table and the JSON.

PyG's sampler runs on the CPU (seconds a batch at products scale): it gets --pyg-batches timed
batches a row. The samplers run one after another (fused, then bsp, then pyg, each over every
configuration), and the JSON is rewritten after every row, so a run cut off by a time limit keeps
every row it finished.

Prints a table and writes JSON (default benchmarks/results/sampling_<device>_s<scale>.json).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from conveyor.partition import ConveyorError  # noqa: E402
from conveyor.samplers import build_sampler  # noqa: E402

FANOUTS = ([15, 10, 5], [10, 10, 10])
BATCH_SIZES = (1024, 4096)


def parse_args(argv=None):
    cuda = torch.cuda.is_available()
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda" if cuda else "cpu", help="cpu or cuda")
    p.add_argument("--scale", type=float, default=None,
                   help="synthetic graph scale, 1.0 = products (default: 1.0 on CUDA, 0.005 on CPU)")
    p.add_argument("--batches", type=int, default=None, help="timed batches per sampler (default: 20 on "
                   "CUDA, 5 on CPU)")
    p.add_argument("--interpreter-batches", type=int, default=1,
                   help="timed batches for fused under the interpreter (CPU)")
    p.add_argument("--pyg-batches", type=int, default=None,
                   help="timed batches for pyg, whose sampler runs on the CPU (default: --batches)")
    p.add_argument("--super-batch", type=int, default=None,
                   help="batches per fused launch in super-batch mode (default: 8 on CUDA, 2 on CPU)")
    p.add_argument("--samplers", default="fused,bsp,pyg")
    p.add_argument("--fanouts", action="append", default=None,
                   help="fanouts of one configuration, e.g. 15,10,5; repeat for more (default: "
                        + " and ".join(",".join(map(str, f)) for f in FANOUTS) + ")")
    p.add_argument("--batch-sizes", default=None,
                   help="comma-separated (default: " + ",".join(map(str, BATCH_SIZES)) + ")")
    p.add_argument("--data-root", default="data", help="where the synthetic graph is cached")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.add_argument("--out", default=None, help="JSON path")
    args = p.parse_args(argv)
    gpu = args.device.startswith("cuda")
    args.scale = args.scale if args.scale is not None else (1.0 if gpu else 0.005)
    args.batches = args.batches or (20 if gpu else 5)
    args.pyg_batches = args.pyg_batches or args.batches
    args.super_batch = args.super_batch or (8 if gpu else 2)
    args.fanouts = [[int(f) for f in fanouts.split(",")] for fanouts in args.fanouts] if args.fanouts else FANOUTS
    args.batch_sizes = [int(b) for b in args.batch_sizes.split(",")] if args.batch_sizes else BATCH_SIZES
    return args


def synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def sampled_edges(name, batch) -> int:
    # pyg's hop h holds every edge of hops 1..h (see samplers/pyg.py): its last hop has them all.
    return batch.edge_index_per_hop[-1].size(1) if name == "pyg" else batch.num_sampled_edges


def run(name, sampler, warmup, seeds, device, group):
    """Sample `seeds` (one batch each), `group` batches per call, after an untimed call on
    `warmup` (compilation, buffers); returns seconds, nodes and sampled edges."""
    sample = sampler.sample_many if group > 1 else (lambda call: [sampler.sample(call[0])])
    if warmup:
        sample(warmup)
    synchronize(device)
    start = time.perf_counter()
    batches = [b for i in range(0, len(seeds), group) for b in sample(seeds[i: i + group])]
    synchronize(device)
    seconds = time.perf_counter() - start
    return seconds, sum(b.n_id.numel() for b in batches), sum(sampled_edges(name, b) for b in batches)


def measure(name, graph, fanouts, batches, device, args, interpreted):
    """Rows for one sampler on one configuration (two for fused: single and super-batch)."""
    modes = [("batch", 1), ("super-batch", args.super_batch)] if name == "fused" else [("batch", 1)]
    rows = []
    for mode, group in modes:
        row = {"sampler": name, "mode": mode, "group": group, "fanouts": fanouts,
               "batch_size": batches[0].numel(), "interpreter": name == "fused" and interpreted}
        try:
            sampler = build_sampler(name, graph, fanouts, device=device, seed=args.seed)
        except (ConveyorError, ImportError) as err:
            return [dict(row, available=False, reason=str(err))]
        count = args.interpreter_batches if row["interpreter"] else args.pyg_batches if name == "pyg" else args.batches
        count = max(group, count - count % group)  # whole super-batches
        warmup = [] if row["interpreter"] else batches[:group]  # nothing to compile in the interpreter
        seconds, nodes, edges = run(name, sampler, warmup, batches[group: group + count], device, group)
        rows.append(dict(row, available=True, batches=count, ms_per_batch=1000 * seconds / count,
                         edges_per_s=edges / seconds, nodes_per_batch=nodes / count,
                         edges_per_batch=edges / count))
    return rows


def main(argv=None):
    args = parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cpu":  # the fused kernel runs on CPU tensors only under Triton's interpreter
        os.environ.setdefault("TRITON_INTERPRET", "1")
    if args.threads:
        torch.set_num_threads(args.threads)
    from conveyor.partition.datasets import load_dataset
    from conveyor.samplers import fused
    graph = load_dataset("synthetic", root=args.data_root, scale=args.scale, seed=args.seed)
    interpreted = fused.INTERPRETED
    print(f"graph: synthetic scale {args.scale}: {graph.num_nodes:,} nodes, {graph.num_edges:,} edges; "
          f"device {device}{' (fused under the Triton interpreter)' if interpreted else ''}")

    out = Path(args.out) if args.out else (Path(__file__).resolve().parent / "results" /
                                           f"sampling_{device.type}_s{args.scale:g}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"device": str(device), "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
            "cpu": platform.processor() or platform.machine(), "cpu_count": os.cpu_count(),
            "threads": torch.get_num_threads(), "scale": args.scale, "num_nodes": graph.num_nodes,
            "num_edges": graph.num_edges, "fused_interpreted": interpreted, "super_batch": args.super_batch,
            "batches": args.batches, "pyg_batches": args.pyg_batches}
    configs = seed_batches(graph, args)
    rows = []
    for name in args.samplers.split(","):  # each sampler over every configuration, the JSON after each row
        for fanouts, batches in configs:
            new = measure(name, graph, fanouts, batches, device, args, interpreted)
            rows += new
            add_speedups(rows)
            print_rows(new)
            out.write_text(json.dumps({"meta": meta, "rows": rows, "complete": False}, indent=1))
    print()
    print_table(rows, interpreted)
    out.write_text(json.dumps({"meta": meta, "rows": rows, "complete": True}, indent=1))
    print(f"wrote {out}")


def seed_batches(graph, args) -> list:
    """(fanouts, seed batches) per configuration: the same seeds for every sampler, random
    training nodes (all nodes on graphs too small to fill a batch with them), distinct within a batch."""
    train = graph.train_idx if graph.train_idx is not None else torch.arange(graph.num_nodes)
    gen = torch.Generator().manual_seed(args.seed)
    needed = 2 * args.super_batch + max(args.batches, args.interpreter_batches, args.pyg_batches)
    configs = []
    for fanouts in args.fanouts:
        for batch_size in args.batch_sizes:
            pool = train if train.numel() >= batch_size else torch.arange(graph.num_nodes)
            configs.append((fanouts, [pool[torch.randperm(pool.numel(), generator=gen)[:batch_size]]
                                      for _ in range(needed)]))
    return configs


def add_speedups(rows) -> None:
    """Each available row's speed-up over bsp's row of the same configuration (bsp ms / its ms)."""
    for r in rows:
        bsp = next((b for b in rows if b["sampler"] == "bsp" and b["available"] and b["fanouts"] == r["fanouts"]
                    and b["batch_size"] == r["batch_size"]), None)
        if r["available"] and bsp:
            r["speedup_vs_bsp"] = bsp["ms_per_batch"] / r["ms_per_batch"]


HEAD = (f"{'sampler':9s} {'mode':14s} {'fanouts':13s} {'batch':>5s} {'n':>3s} {'ms/batch':>10s} "
        f"{'edges/s':>10s} {'vs bsp':>7s} {'nodes/b':>9s} {'edges/b':>9s}")


def print_rows(rows):
    for r in rows:
        mode = r["mode"] + (f" x{r['group']}" if r["group"] > 1 else "")
        name = r["sampler"] + ("*" if r["interpreter"] else "")
        if not r["available"]:
            print(f"{name:9s} {mode:14s} {str(r['fanouts']):13s} {r['batch_size']:5d}  unavailable: "
                  f"{r['reason'].split(';')[0]}", flush=True)
            continue
        speedup = f"{r['speedup_vs_bsp']:.2f}x" if r.get("speedup_vs_bsp") else "-"
        print(f"{name:9s} {mode:14s} {str(r['fanouts']):13s} {r['batch_size']:5d} {r['batches']:3d} "
              f"{r['ms_per_batch']:10.1f} {r['edges_per_s']:10.3g} {speedup:>7s} {r['nodes_per_batch']:9.0f} "
              f"{r['edges_per_batch']:9.0f}", flush=True)


def print_table(rows, interpreted):
    print(HEAD)
    print("-" * len(HEAD))
    print_rows(rows)
    if interpreted:
        print("* fused ran under Triton's CPU interpreter: interpreter figures, not the kernel's speed.")


if __name__ == "__main__":
    main()
