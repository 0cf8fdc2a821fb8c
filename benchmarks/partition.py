"""Partition benchmark: pagraph, random and metis on the products-shaped synthetic graph.

For each K in --parts and each method: the time to partition (plan: assignment and expansion;
build: every part's local graph, features and ranking, in memory, one at a time), the replication
factor (sum of part sizes / graph size; also counting only the nodes within num_hops of the
training nodes, PaGraph's own figure), the balance (training nodes per part, nodes per part
max / mean), and the degree-cache hit ratio each part would get: --batches bsp batches of the
part's own training nodes sampled on the part's graph, with a cache of the --cache fraction of the
part's nodes of highest local out-degree (its saved ranking), counting hits in n_id. The baseline
of the hit ratio is the same batches sampled from the full graph (identical n_id: see
tests/partition/test_partition.py) with the same-fraction degree cache of the full graph; the baseline of
time and replication is `random`, run beside each method. Ratios are method / baseline.

Each run is a child process with a time limit (--limit), so a METIS run that is too slow or too
large is stopped; it is then retried at --metis-fallback-scale and the table says so.

    python -m benchmarks.partition                       # scale 1.0 (products-sized), K = 2, 4, 8
    python -m benchmarks.partition --scale 0.1 --parts 2,4 --methods pagraph,random

Prints a table and writes JSON (default benchmarks/results/partition_s<scale>_L<hops>.json).
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import time
from pathlib import Path

import torch

METHODS = ("pagraph", "random", "metis")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scale", type=float, default=1.0, help="synthetic graph scale (1.0 = products)")
    p.add_argument("--data-root", default=os.environ.get("CONVEYOR_DATA_ROOT", "~/.cache/conveyor/data"))
    p.add_argument("--parts", default="2,4,8", help="values of K")
    p.add_argument("--methods", default=",".join(METHODS))
    p.add_argument("--num-hops", type=int, default=3)
    p.add_argument("--fanouts", default="15,10,5", help="bsp fanouts for the hit ratio (num-hops of them)")
    p.add_argument("--splits", default="train,val,test", help="splits distributed to the parts")
    p.add_argument("--cache", type=float, default=0.2, help="cache size, a fraction of each part's nodes")
    p.add_argument("--batches", type=int, default=4, help="bsp batches per part for the hit ratio")
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--limit", type=float, default=1200, help="seconds allowed per run")
    p.add_argument("--metis-fallback-scale", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="JSON path")
    return p.parse_args(argv)


def load_graph(root, scale, seed=0):
    from conveyor.partition.datasets import load_dataset
    return load_dataset("synthetic", root=Path(root).expanduser(), scale=scale, seed=seed)


def hit_ratio(sampler, seeds_batches, cached: torch.Tensor, to_sampler=lambda s: s):
    hits = total = 0
    for i, seeds in enumerate(seeds_batches):
        sampler.manual_seed(i)
        n_id = sampler.sample(to_sampler(seeds)).n_id
        hits += int(cached[n_id].sum())
        total += n_id.numel()
    return hits / max(total, 1)


def top_fraction(ranking: torch.Tensor, num_nodes: int, fraction: float) -> torch.Tensor:
    cached = torch.zeros(num_nodes, dtype=torch.bool)
    cached[ranking[:int(fraction * num_nodes)]] = True
    return cached


def run_one(config: dict) -> dict:
    """One (scale, K, method) run: partition, then measure every part; returns the figures."""
    from conveyor.partition.partitioner import build_part, partition_info, plan_partition
    from conveyor.samplers import build_sampler

    graph = load_graph(config["root"], config["scale"])
    fanouts, k = config["fanouts"], config["num_parts"]
    start, cpu = time.perf_counter(), time.process_time()
    plan = plan_partition(graph, k, config["num_hops"], config["method"], seed=config["seed"],
                          splits=config["splits"])
    plan_s = time.perf_counter() - start
    info = partition_info(graph, k, config["num_hops"], config["method"], config["seed"],
                          config["splits"])
    full_cached = top_fraction(torch.sort(graph.out_degree(), descending=True, stable=True).indices,
                               graph.num_nodes, config["cache"])
    full_sampler = build_sampler("bsp", graph, fanouts)
    rows, build_s, sample_cpu = [], 0.0, 0.0
    for rank in range(k):
        start = time.perf_counter()
        part = build_part(graph, plan, rank, info)
        build_s += time.perf_counter() - start
        sample_start = time.process_time()
        g = torch.Generator().manual_seed(config["seed"] + rank)
        train = part.graph.train_idx[torch.randperm(part.graph.train_idx.numel(), generator=g)]
        batches = list(train[:config["batches"] * config["batch_size"]].split(config["batch_size"]))
        cached = top_fraction(part.degree_ranking, part.node_ids.numel(), config["cache"])
        part_hits = hit_ratio(build_sampler("bsp", part.graph, fanouts), batches, cached)
        full_hits = hit_ratio(full_sampler, batches, full_cached, lambda s, ids=part.node_ids: ids[s])
        sample_cpu += time.process_time() - sample_start
        rows.append(dict(part.info, hit_ratio=part_hits, full_graph_hit_ratio=full_hits))
        del part
    cpu_s = time.process_time() - cpu - sample_cpu
    nodes = [r["nodes"] for r in rows]
    return {
        "scale": config["scale"], "num_parts": k, "method": config["method"],
        "graph_nodes": graph.num_nodes, "graph_edges": graph.num_edges,
        "plan_seconds": plan_s, "build_seconds": build_s, "seconds": plan_s + build_s,
        "cpu_seconds": cpu_s,
        "plan_breakdown": plan.seconds,
        "replication_factor": sum(nodes) / graph.num_nodes,
        "train_replication": sum(plan.train_closure) / graph.num_nodes,
        "edge_replication": sum(r["edges"] for r in rows) / graph.num_edges,
        "train_counts": [r["train"] for r in rows],
        "nodes_max_over_mean": max(nodes) / (sum(nodes) / k),
        "hit_ratio": sum(r["hit_ratio"] for r in rows) / k,
        "full_graph_hit_ratio": sum(r["full_graph_hit_ratio"] for r in rows) / k,
        "parts": rows,
    }


def child(config, queue):
    try:
        queue.put(run_one(config))
    except BaseException as error:  # reported by the parent, which keeps going
        queue.put({"error": f"{type(error).__name__}: {error}"})


def run_limited(config: dict, limit: float) -> dict:
    """run_one in a child process; {'error': ...} when it fails, dies (e.g. out of memory) or
    runs past `limit` seconds."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=child, args=(config, queue))
    start = time.perf_counter()
    proc.start()
    result = None
    while result is None:
        try:
            result = queue.get(timeout=5)
        except Exception:  # queue.Empty: still running, died, or out of time
            if not proc.is_alive():
                result = {"error": f"the run died (exit code {proc.exitcode}; out of memory?)"}
            elif time.perf_counter() - start > limit:
                result = {"error": f"stopped after {limit:.0f} s (--limit)"}
    proc.join(5)
    if proc.is_alive():
        proc.kill()
        proc.join()
    if "error" in result:
        result.update(scale=config["scale"], num_parts=config["num_parts"], method=config["method"],
                      wall_seconds=time.perf_counter() - start)
    return result


def table(results) -> str:
    head = ("scale", "K", "method", "time s", "cpu s", "x random", "repl", "x random", "train repl",
            "train/part", "nodes max/mean", "hit", "full-graph hit", "hit x full")
    lines = [" | ".join(head)]
    base = {(r["scale"], r["num_parts"]): r for r in results
            if r["method"] == "random" and "error" not in r}
    for r in results:
        if "error" in r:
            lines.append(f"{r['scale']:g} | {r['num_parts']} | {r['method']} | {r['error']}")
            continue
        b = base.get((r["scale"], r["num_parts"]))
        def ratio(key, r=r, b=b):
            return f"{r[key] / b[key]:.2f}" if b and b[key] else "-"

        counts = r["train_counts"]
        lines.append(" | ".join([
            f"{r['scale']:g}", str(r["num_parts"]), r["method"], f"{r['seconds']:.1f}",
            f"{r['cpu_seconds']:.1f}", ratio("cpu_seconds"),
            f"{r['replication_factor']:.3f}", ratio("replication_factor"),
            f"{r['train_replication']:.3f}", f"{min(counts)}-{max(counts)}",
            f"{r['nodes_max_over_mean']:.3f}", f"{r['hit_ratio']:.3f}",
            f"{r['full_graph_hit_ratio']:.3f}", f"{r['hit_ratio'] / r['full_graph_hit_ratio']:.3f}"]))
    return "\n".join(lines)


def main(argv=None):
    args = parse_args(argv)
    root = str(Path(args.data_root).expanduser())
    start = time.perf_counter()
    graph = load_graph(root, args.scale, args.seed)  # generate (or find) it once, outside the timings
    print(f"{graph} ready in {time.perf_counter() - start:.0f} s", flush=True)
    del graph
    methods = [m for m in args.methods.split(",") if m]
    fanouts = [int(f) for f in args.fanouts.split(",")][:args.num_hops]
    config = dict(root=root, num_hops=args.num_hops, fanouts=fanouts, seed=args.seed,
                  splits=args.splits.split(","), cache=args.cache, batches=args.batches,
                  batch_size=args.batch_size)
    results = []
    for k in [int(x) for x in args.parts.split(",")]:
        for method in methods:
            done = len(results)
            result = run_limited(dict(config, scale=args.scale, num_parts=k, method=method), args.limit)
            results.append(result)
            if method == "metis" and "error" in result and args.metis_fallback_scale < args.scale:
                small = dict(config, scale=args.metis_fallback_scale, num_parts=k)
                load_graph(root, small["scale"], args.seed)
                for m in ("random", "metis"):  # metis beside its baseline at the smaller scale
                    results.append(run_limited(dict(small, method=m), args.limit))
            print("\n".join(table(results[done:]).splitlines()[1:]), flush=True)
    print()
    print(table(results))
    out = Path(args.out or Path(__file__).parent / "results" /
               f"partition_s{args.scale:g}_L{args.num_hops}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    machine = {"platform": platform.platform(), "cpus": os.cpu_count(), "torch": torch.__version__,
               "threads": torch.get_num_threads(), "load_average": os.getloadavg()}
    out.write_text(json.dumps({"args": vars(args), "machine": machine, "results": results}, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
