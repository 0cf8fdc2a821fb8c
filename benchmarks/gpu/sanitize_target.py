"""What `compute-sanitizer` watches: fused-sampler launches (`sample`, `sample_many`, both orders)
and cache gathers on a small graph, each result checked against the batch contract or graph.x.

    python benchmarks/gpu/sanitize_target.py [--device cuda|cpu] [--tiny] [--quick] [--no-fused]

On CPU the kernel runs under Triton's interpreter (TRITON_INTERPRET=1), with tiny sizes: a check
that this script still runs, for the CPU dry run. Prints one JSON line last.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cuda")
    p.add_argument("--tiny", action="store_true", help="interpreter-sized batches")
    p.add_argument("--no-fused", action="store_true", help="the cache alone (the fused kernel's smoke launch failed)")
    p.add_argument("--quick", action="store_true", help="under a sanitizer: one sampler, no sorts")
    args = p.parse_args()
    if args.device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")  # before samplers.fused defines the kernel
    import torch

    from conveyor.cache import build_cache
    from conveyor.partition.datasets.synthetic import generate
    from conveyor.samplers import build_sampler
    from tests.sampler_checks import assert_valid_batch  # the batch contract (#25 moves it into the package)

    start = time.perf_counter()
    graph = generate(scale=0.002, seed=0)  # 4.9K nodes, 247K edges: hubs and low-degree nodes
    fanouts, size, count = ([3, 2], 8, 2) if args.tiny else ([15, 10, 5], 256, 4)
    gen = torch.Generator().manual_seed(0)
    seeds = [torch.randperm(graph.num_nodes, generator=gen)[:size] for _ in range(count)]
    launches = batches = 0
    n_id = torch.cat(seeds[:2]).unique()  # the cache's ids when the kernel is left out
    modes = () if args.no_fused else (False,) if args.quick else (True,) if args.tiny else (True, False)
    for deterministic in modes:  # with and without the canonical order's sorts
        sampler = build_sampler("fused", graph, fanouts, device=args.device, seed=0,
                                deterministic=deterministic)
        out = [sampler.sample(s) for s in seeds[:2]] + sampler.sample_many(seeds)
        launches += 3
        for batch, s in zip(out, seeds[:2] + seeds):
            assert_valid_batch(batch, graph, s, fanouts)
        batches += len(out)
        n_id = out[-1].n_id
    gathers = 0
    for policy, capacity in (("degree", 0.3), ("none", 0), ("degree", 1.0)):
        cache = build_cache(policy, graph, capacity=capacity, device=args.device)
        for ids in (n_id, n_id.cpu(), seeds[0]):
            assert torch.equal(cache.gather(ids).cpu(), graph.x[ids.cpu()]), f"{policy} gather is wrong"
            gathers += 1
    if args.device.startswith("cuda"):
        torch.cuda.synchronize()
    print(json.dumps({"ok": True, "launches": launches, "batches": batches, "gathers": gathers,
                      "fanouts": fanouts, "batch_size": size, "seconds": time.perf_counter() - start}))


if __name__ == "__main__":
    main()
