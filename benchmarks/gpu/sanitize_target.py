"""What `compute-sanitizer` watches: fused-sampler launches (`sample`, `sample_many`, with and
without the deterministic sorts, of the uniform kernel and of the weighted one: weight_attr) and
cache gathers on a small graph, each result checked against
the batch contract or graph.x.

    python -m benchmarks.gpu.sanitize_target [--device cuda|cpu] [--tiny] [--quick] [--no-fused]

--quick (under a sanitizer, where every launch is slow): the fused launches only, one ordering.
--no-fused (after a failed smoke launch): the cache's gathers only. On CPU the kernel runs under
Triton's interpreter (TRITON_INTERPRET=1), with tiny sizes: a check that this script still runs,
for the CPU dry run. Prints one JSON line last, with "ok": true; exit 1 if it checked nothing.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

# (fanouts, seeds per batch, batches): interpreter-sized; under a sanitizer, where every launch is slow,
# smaller batches of the plain run's variants (batch sizes never recompile: its compiles serve)
SIZES = {"tiny": ([3, 2], 8, 2), "quick": ([15, 10, 5], 64, 4), "full": ([15, 10, 5], 256, 4)}

def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda")
    p.add_argument("--tiny", action="store_true", help="interpreter-sized batches")
    p.add_argument("--quick", action="store_true", help="the fused launches only, one ordering (under a sanitizer)")
    p.add_argument("--no-fused", action="store_true", help="the cache's gathers only")
    args = p.parse_args(argv)
    if args.quick and args.no_fused:
        p.error("--quick runs only the fused launches and --no-fused none of them: nothing would be checked")
    return args


def fused_launches(graph, seeds, fanouts, args) -> tuple[int, int, object]:
    """Launches of `sample` and `sample_many`, of both kernels, every batch checked: (launches,
    batches, last n_id)."""
    import itertools

    from conveyor.samplers import build_sampler
    from conveyor.samplers.checks import assert_valid_batch
    launches = batches = 0
    n_id = None
    orders = (True,) if args.tiny or args.quick else (True, False)  # with and without the sorts
    for weight, deterministic in itertools.product((None, "w"), orders):
        sampler = build_sampler("fused", graph, fanouts, device=args.device, seed=0, deterministic=deterministic,
                                weight_attr=weight)
        out = [sampler.sample(s) for s in seeds[:2]] + sampler.sample_many(seeds)
        launches += 3
        for batch, s in zip(out, seeds[:2] + seeds):
            assert_valid_batch(batch, graph, s, fanouts)
        batches += len(out)
        n_id = out[-1].n_id
    return launches, batches, n_id


def cache_gathers(graph, id_sets, device) -> int:
    """Gathers through the degree cache (partly and fully cached) and no cache, checked against graph.x."""
    import torch

    from conveyor.cache import build_cache
    gathers = 0
    for policy, capacity in (("degree", 0.3), ("none", 0), ("degree", 1.0)):
        cache = build_cache(policy, graph, capacity=capacity, device=device)
        for ids in id_sets:
            assert torch.equal(cache.gather(ids).cpu(), graph.x[ids.cpu()]), f"{policy} gather is wrong"
            gathers += 1
    return gathers


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")  # before samplers.fused defines the kernel
    import torch

    from conveyor.partition.datasets.synthetic import generate
    start = time.perf_counter()
    graph = generate(scale=0.002, seed=0)  # 4.9K nodes, 247K edges: hubs and low-degree nodes
    graph.edge_attrs["w"] = torch.rand(graph.num_edges, generator=torch.Generator().manual_seed(1))
    fanouts, size, count = SIZES["tiny" if args.tiny else "quick" if args.quick else "full"]
    gen = torch.Generator().manual_seed(0)
    seeds = [torch.randperm(graph.num_nodes, generator=gen)[:size] for _ in range(count)]
    launches, batches, n_id = (0, 0, None) if args.no_fused else fused_launches(graph, seeds, fanouts, args)
    id_sets = [seeds[0]] if n_id is None else [n_id, n_id.cpu(), seeds[0]]
    gathers = 0 if args.quick else cache_gathers(graph, id_sets, args.device)
    if args.device.startswith("cuda"):
        torch.cuda.synchronize()
    print(json.dumps({"ok": launches + gathers > 0, "launches": launches, "batches": batches, "gathers": gathers,
                      "weighted_launches": launches // 2,
                      "fanouts": fanouts, "batch_size": size, "seconds": time.perf_counter() - start}))
    sys.exit(0 if launches + gathers > 0 else 1)


if __name__ == "__main__":
    main()
