"""The fused kernel's first launches on a machine, alone in their process: `check` runs this
under a hard 60 s limit before anything else touches the kernel, so a kernel that hangs costs one
minute, not the tests, the sanitizer and the benchmarks after it (pytest's timeout cannot
interrupt a thread blocked in a CUDA synchronisation; a killed process group can).

For each variant (--batches, default `1,w1,8`: the uniform kernel for super-batches of 1 and 8,
and the weighted one (weight_attr, random edge weights; `w` before the count) for 1; none started
after --stop-after seconds): compile it (registers, spills, shared memory, programs of the persistent grid), launch
it on a small products-shaped graph, and check every batch against the batch contract. It prints
one JSON line per stage as it goes, so a run killed at its limit still says where it stopped,
and a last line with "ok": true.

    python -m benchmarks.gpu.smoke [--device cuda|cpu] [--batches 1,w1,8]
"""
from __future__ import annotations

import argparse
import faulthandler
import json
import os
import time

START = time.perf_counter()


def stage(name: str, **figures) -> None:
    print(json.dumps({"stage": name, "t": round(time.perf_counter() - START, 2), **figures}), flush=True)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda")
    p.add_argument("--batches", default="1,w1,8", help="super-batch sizes to compile and launch; `w`: of the "
                   "weighted kernel (weight_attr)")
    p.add_argument("--tiny", action="store_true", help="interpreter-sized batches (the CPU dry run)")
    p.add_argument("--stop-after", type=float, default=35,
                   help="seconds after which no further variant is started (the first always runs)")
    return p.parse_args(argv)


def launch_variant(sampler, graph, count: int, size: int, fanouts, gen, device: str) -> dict:
    """Compile the variant for super-batches of `count`, launch it once, check every batch."""
    import torch

    from conveyor.samplers.checks import assert_valid_batch  # the batch contract
    seeds = [torch.randperm(graph.num_nodes, generator=gen)[:size] for _ in range(count)]
    weighted = sampler.weighted
    stage("compiling", batches=count, weighted=weighted)
    start = time.perf_counter()
    compiled = sampler.compile(count)
    compile_s = time.perf_counter() - start
    stage("launching", batches=count, weighted=weighted, compile_s=round(compile_s, 2))
    start = time.perf_counter()
    batches = sampler.sample_many(seeds)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    launch_s = time.perf_counter() - start
    for batch, s in zip(batches, seeds):
        assert_valid_batch(batch, graph, s, fanouts)
    figures = {k: v for k, v in compiled.items() if k != "meta"}
    stage("checked", batches=count, weighted=weighted, first_launch_s=round(launch_s, 3), **figures)
    return {"batches": count, "weighted": weighted, "compile_s": compile_s, "first_launch_s": launch_s,
            "launches": sampler.num_launches, **figures, "meta": compiled["meta"]}


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")  # before samplers.fused defines the kernel
    faulthandler.dump_traceback_later(args.stop_after * 1.4, exit=False)  # a hang shows where, before the kill
    import torch

    from conveyor.partition.datasets.synthetic import generate
    from conveyor.samplers.fused import FusedSampler

    graph = generate(scale=0.002, seed=0)  # 4.9K nodes, 247K edges: hubs and low-degree nodes
    graph.edge_attrs["w"] = torch.rand(graph.num_edges, generator=torch.Generator().manual_seed(1))
    fanouts, size = ([3, 2], 8) if args.tiny else ([15, 10, 5], 512)
    stage("imported", torch=torch.__version__, device=args.device, nodes=graph.num_nodes, edges=graph.num_edges)
    samplers = {weight: FusedSampler(graph, fanouts, device=args.device, seed=0, deterministic=False,
                                     weight_attr=weight) for weight in (None, "w")}
    gen = torch.Generator().manual_seed(0)
    variants = []
    for variant in args.batches.split(","):
        if variants and time.perf_counter() - START > args.stop_after:
            stage("stopped", reason=f"{args.stop_after:.0f} s passed: no further variant started")
            break
        sampler = samplers["w" if variant.startswith("w") else None]
        variants.append(launch_variant(sampler, graph, int(variant.lstrip("w")), size, fanouts, gen, args.device))
    faulthandler.cancel_dump_traceback_later()
    print(json.dumps({"ok": True, "variants": variants, "fanouts": fanouts, "batch_size": size,
                      "seconds": time.perf_counter() - START}))


if __name__ == "__main__":
    main()
