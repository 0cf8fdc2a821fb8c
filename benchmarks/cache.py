"""Feature cache benchmark: hit ratio of degree / random / optimal versus cache size, bytes read
from host versus no cache, and gather throughput with versus without the cache.

One epoch (or --batches batches) of real `bsp` sampler batches over the synthetic products-shaped
graph: seeds are the shuffled training nodes in batches of --batch-size. Hit ratios and host
bytes cover every batch, counted with each cache's own slot map (the lookup gather does) and
cross-checked against gather's counters on the timed batches; gather time is the fastest of
--repeats passes over the first --timed-batches batches, and the first cache of each policy
checks its output against graph.x[n_id]. `optimal` ranks nodes by their access count in this very
trace: the best any static cache can do on it (PaGraph's "optimal").

On CPU the "device" is host memory, so a cache can only add work there and the timings mostly
measure the allocator and the machine's load; the with/without comparison is meant for CUDA.

    python -m benchmarks.cache --scale 0.1                       # CPU, a few minutes
    python -m benchmarks.cache --scale 1.0 --batches 40 --threads 1
    python -m benchmarks.cache --scale 1.0 --device cuda         # + auto capacity on the GPU
    python -m benchmarks.cache --scale 1.0 --device cuda --simulate-peak 77GiB   # H100: a partial cache

Prints tables, writes JSON (default benchmarks/results/cache_<device>_s<scale>.json; rewritten
after each policy, "complete": false until the end, so a run cut off keeps what it measured) and a
PNG of hit ratio versus cache size next to it.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import torch

from conveyor.cache import build_cache
from conveyor.samplers import build_sampler

POLICIES = ("degree", "random", "optimal")
BAR = 0.9  # degree at 20% must reach 90% of optimal's hit ratio


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scale", type=float, default=0.1, help="synthetic graph scale (1.0 = products)")
    p.add_argument("--data-root", default=os.environ.get("CONVEYOR_DATA_ROOT", "~/.cache/conveyor/data"),
                   help="where the synthetic graph is cached (as data.root in conf/data)")
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--batches", type=int, default=None, help="batches to run (default: one epoch)")
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--fanouts", default="15,10,5")
    p.add_argument("--sizes", default="0.05,0.1,0.2,0.4,1.0", help="cache sizes, fractions of nodes")
    p.add_argument("--dtype", default=None, help="cache dtype (default: the features' own)")
    p.add_argument("--simulate-peak", default="0B",
                   help="CUDA auto capacity: bytes to hold on the device as a stand-in for the "
                        "training's peak before fitting (e.g. 20GiB)")
    p.add_argument("--timed-batches", type=int, default=20,
                   help="gathers timed per cache (hit ratios always cover every batch; 0: all)")
    p.add_argument("--repeats", type=int, default=3, help="timed passes; the fastest counts")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None,
                   help="torch CPU threads (1 gives steadier timings on a busy machine)")
    p.add_argument("--out", default=None, help="JSON path (the PNG goes next to it)")
    return p.parse_args(argv)


def load_graph(args):
    from conveyor.partition.datasets import load_dataset
    return load_dataset("synthetic", root=Path(args.data_root).expanduser(), scale=args.scale,
                        seed=args.seed)


def record_trace(graph, args, device):
    """n_id of every batch of one epoch (or the first --batches), from the real sampler."""
    gen = torch.Generator().manual_seed(args.seed)
    train = graph.train_idx if graph.train_idx is not None else torch.arange(graph.num_nodes)
    seeds = train[torch.randperm(train.numel(), generator=gen)].split(args.batch_size)
    epoch_batches = len(seeds)
    seeds = seeds[: args.batches] if args.batches else seeds
    sampler = build_sampler("bsp", graph, [int(f) for f in args.fanouts.split(",")],
                            device=device, seed=args.seed)
    start = time.perf_counter()
    trace = [sampler.sample(s).n_id for s in seeds]  # on the sampler's device, as in training
    return trace, epoch_batches, time.perf_counter() - start


def synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run_cache(cache, graph, trace, check: bool):
    cache.reset_stats()
    for n_id in trace:
        out = cache.gather(n_id)
        if check:
            assert torch.equal(out.cpu(), graph.x[n_id.cpu()].to(out.dtype)), "gather is wrong"
        del out  # as the plain baseline: the allocator may reuse the memory for the next batch
    return cache.stats()


def count_hits(cache, trace) -> int:
    """Hits over the trace by the cache's own slot map (gather's lookup without moving rows)."""
    if cache.slot is None:
        return 0
    return sum(int((cache.slot[n_id.to(cache.device)] >= 0).sum()) for n_id in trace)


def measure(cache, graph, trace, timed, repeats, row_bytes, check):
    """Hit ratio and host bytes over the whole trace; gather time over its first `timed` batches
    (the fastest of `repeats` passes, so a warm-up or a busy moment does not count)."""
    requests = sum(n.numel() for n in trace)
    hits = count_hits(cache, trace)
    passes = [run_cache(cache, graph, trace[:timed], check and r == 0) for r in range(repeats)]
    assert passes[0]["hits"] == count_hits(cache, trace[:timed]), "gather's counters disagree"
    seconds = min(p["gather_time_s"] for p in passes)
    delivered = sum(n.numel() for n in trace[:timed]) * row_bytes
    stats = passes[0]
    return {"hit_ratio": hits / requests, "bytes_from_host": (requests - hits) * row_bytes,
            "gather_ms_per_batch": 1e3 * seconds / timed, "gather_gb_s": delivered / seconds / 1e9,
            "capacity_nodes": stats["capacity_nodes"], "cached_bytes": stats["cached_bytes"]}


def sweep(graph, trace, sizes, device, dtype, timed, repeats, row_bytes, progress=lambda results: None):
    """Every policy at every size, plus `none`, each through its own FeatureCache; `progress` sees
    the results after each policy."""
    results = {}
    none = build_cache("none", graph, capacity=0, device=device, dtype=dtype)
    results["none"] = measure(none, graph, trace, timed, repeats, row_bytes, check=True)
    for policy in POLICIES:
        progress(results)
        results[policy] = {}
        for size in sizes:
            cache = build_cache(policy, graph, capacity=size, device=device, dtype=dtype,
                                trace=trace if policy == "optimal" else None, seed=0)
            results[policy][size] = measure(cache, graph, trace, timed, repeats, row_bytes,
                                            check=size == sizes[0])  # checks are untimed
            del cache
    return results


def plain_gather(graph, trace, device, dtype, repeats):
    """The baseline without any cache class: x[n_id] on the host, then one copy to the device
    (the fastest of `repeats` passes)."""
    x = graph.x if dtype is None else graph.x.to(dtype)
    passes = []
    for _ in range(repeats):
        seconds = 0.0
        for n_id in trace:
            start = time.perf_counter()
            x.index_select(0, n_id.cpu()).to(device)
            synchronize(device)
            seconds += time.perf_counter() - start
        passes.append(seconds)
    return min(passes)


def auto_capacity(graph, trace, device, dtype, simulate_peak):
    """PaGraph's sizing: an empty cache, a few warm-up gathers, then fit to the free memory."""
    from conveyor.cache.options import parse_bytes
    peak = parse_bytes(simulate_peak, "--simulate-peak")
    held = torch.empty(peak, dtype=torch.uint8, device=device) if peak and device.type == "cuda" else None
    cache = build_cache("degree", graph, capacity="auto", device=device, dtype=dtype)
    run_cache(cache, graph, trace[:3], check=False)  # warm-up: on CUDA all misses, sets the peak
    nodes = cache.fit_to_free_memory()
    stats = run_cache(cache, graph, trace, check=False)
    info = {"capacity_nodes": nodes, "capacity_fraction": nodes / graph.num_nodes,
            "hit_ratio": stats["hit_ratio"], "gather_ms_per_batch": 1e3 * stats["gather_time_s"] / len(trace),
            "simulated_peak_bytes": peak, **cache.fit_info}
    del held, cache
    return info


def print_tables(res, sizes, none, plain, batches, epoch_batches, timed, auto):
    print(f"\nhit ratio vs cache size ({batches} of {epoch_batches} batches of the epoch)")
    print(f"{'size':>6} {'degree':>8} {'random':>8} {'optimal':>8} {'deg/opt':>8}")
    for s in sizes:
        d, r, o = (res[p][s]["hit_ratio"] for p in POLICIES)
        print(f"{s:>6.0%} {d:>8.3f} {r:>8.3f} {o:>8.3f} {d / o if o else float('nan'):>8.3f}")
    per_epoch = epoch_batches / batches / 1e9  # bytes over the batches run -> GB per epoch
    print(f"\ndegree cache: bytes from host per epoch (scaled from {batches} batches) vs no cache, "
          f"and gather time (best pass over {timed} batches) vs no cache")
    print(f"{'size':>7} {'GB/epoch':>9} {'vs none':>8}   {'ms/batch':>9} {'GB/s':>7} {'speedup':>8}")
    for s in sizes:
        r = res["degree"][s]
        print(f"{s:>7.0%} {r['bytes_from_host'] * per_epoch:>9.2f} "
              f"{r['bytes_from_host'] / none['bytes_from_host']:>8.3f}   "
              f"{r['gather_ms_per_batch']:>9.2f} {r['gather_gb_s']:>7.2f} "
              f"{none['gather_ms_per_batch'] / r['gather_ms_per_batch']:>7.2f}x")
    print(f"{'none':>7} {none['bytes_from_host'] * per_epoch:>9.2f} {1:>8.3f}   "
          f"{none['gather_ms_per_batch']:>9.2f} {none['gather_gb_s']:>7.2f} {1:>7.2f}x")
    print(f"{'x[n_id]':>7} {'':>9} {'':>8}   {plain['gather_ms_per_batch']:>9.2f} "
          f"{plain['gather_gb_s']:>7.2f} "
          f"{none['gather_ms_per_batch'] / plain['gather_ms_per_batch']:>7.2f}x   (plain index + copy)")
    print(f"\nauto capacity: {auto['capacity_nodes']:,} nodes ({auto['capacity_fraction']:.1%}), "
          f"hit ratio {auto['hit_ratio']:.3f}, {auto['gather_ms_per_batch']:.2f} ms/batch; device "
          f"total {auto['total_bytes'] / 2**30:.1f} GiB, peak in use {auto['peak_bytes'] / 2**30:.2f} "
          f"GiB, budget {auto['budget_bytes'] / 2**30:.2f} GiB")


def plot(res, sizes, path, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(5.5, 4))
    for policy, marker in zip(POLICIES, "osD"):
        ax.plot([100 * s for s in sizes], [res[policy][s]["hit_ratio"] for s in sizes],
                marker=marker, label=policy)
    ax.set(xlabel="cache size (% of nodes)", ylabel="hit ratio", ylim=(0, 1.02), title=title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None):
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    sizes = [float(s) for s in args.sizes.split(",")]
    out = Path(args.out or f"benchmarks/results/cache_{device.type}_s{args.scale:g}.json")
    out.parent.mkdir(parents=True, exist_ok=True)

    t0 = time.perf_counter()
    graph = load_graph(args)
    print(f"{graph} loaded in {time.perf_counter() - t0:.1f}s")
    trace, epoch_batches, sample_s = record_trace(graph, args, device)
    timed = min(args.timed_batches or len(trace), len(trace))
    dtype = None if args.dtype is None else getattr(torch, args.dtype)
    row_bytes = graph.x.size(1) * (graph.x.element_size() if dtype is None else dtype.itemsize)
    nodes_per_batch = sum(n.numel() for n in trace) / len(trace)
    print(f"{len(trace)} batches sampled in {sample_s:.1f}s, {nodes_per_batch:,.0f} nodes/batch "
          f"({nodes_per_batch / graph.num_nodes:.1%} of the graph)")

    head = report_head(args, sizes, device, graph, row_bytes, trace, epoch_batches, timed, sample_s)

    def progress(res):  # the figures so far, should a time limit stop the run
        done = [p for p in POLICIES if p in res]
        out.write_text(json.dumps({**head, "complete": False, "none": res.get("none"),
                                   "hit_ratio": {p: {str(s): res[p][s]["hit_ratio"] for s in res[p]} for p in done},
                                   "policies": {p: {str(s): res[p][s] for s in res[p]} for p in done}}, indent=1))

    res = sweep(graph, trace, sizes, device, dtype, timed, args.repeats, row_bytes, progress)
    none = res.pop("none")
    plain_s = plain_gather(graph, trace[:timed], device, dtype, args.repeats)
    plain = {"gather_ms_per_batch": 1e3 * plain_s / timed,
             "gather_gb_s": sum(n.numel() for n in trace[:timed]) * row_bytes / plain_s / 1e9}
    progress({**res, "none": none})
    auto = auto_capacity(graph, trace[:timed], device, dtype, args.simulate_peak)
    print_tables(res, sizes, none, plain, len(trace), epoch_batches, timed, auto)

    ref = 0.2 if 0.2 in sizes else sizes[0]
    ratio = res["degree"][ref]["hit_ratio"] / max(res["optimal"][ref]["hit_ratio"], 1e-12)
    passed = ratio >= BAR
    print(f"\nbar: degree at {ref:.0%} reaches {ratio:.1%} of optimal's hit ratio "
          f"(needs {BAR:.0%}): {'PASS' if passed else 'FAIL'}")

    png = out.with_suffix(".png")
    plot(res, sizes, png, f"{graph.name}, scale {args.scale:g}, {len(trace)} batches")
    report = final_report(head, res, sizes, none, plain, auto, ref, ratio, png)
    out.write_text(json.dumps(report, indent=1))
    print(f"wrote {out} and {png}")
    return report


def report_head(args, sizes, device, graph, row_bytes, trace, epoch_batches, timed, sample_s) -> dict:
    """What the run was: config, machine, graph, trace (the JSON's first part, partial or not)."""
    return {"config": {**vars(args), "sizes": sizes},
            "machine": {"device": torch.cuda.get_device_name(device) if device.type == "cuda"
                        else f"CPU, {os.cpu_count()} cores", "torch_threads": torch.get_num_threads(),
                        "platform": platform.platform(), "torch": torch.__version__},
            "graph": {"name": graph.name, "num_nodes": graph.num_nodes, "num_edges": graph.num_edges,
                      "feature_dim": graph.x.size(1), "row_bytes": row_bytes},
            "batches": len(trace), "epoch_batches": epoch_batches, "timed_batches": timed,
            "sample_s": sample_s, "nodes_per_batch": sum(n.numel() for n in trace) / len(trace)}


def final_report(head, res, sizes, none, plain, auto, ref, ratio, png) -> dict:
    return {
        **head, "complete": True,
        "hit_ratio": {p: {str(s): res[p][s]["hit_ratio"] for s in sizes} for p in POLICIES},
        "policies": {p: {str(s): res[p][s] for s in sizes} for p in POLICIES},
        "none": none, "plain_index": plain,
        "bytes_from_host_vs_none": {str(s): res["degree"][s]["bytes_from_host"] / none["bytes_from_host"]
                                    for s in sizes},
        "gather_speedup_vs_none": {str(s): none["gather_ms_per_batch"] / res["degree"][s]["gather_ms_per_batch"]
                                   for s in sizes},
        "auto": auto,
        "bar": {"size": ref, "degree_over_optimal": ratio, "required": BAR, "passed": ratio >= BAR},
        "plot": str(png),
    }


if __name__ == "__main__":
    main()
