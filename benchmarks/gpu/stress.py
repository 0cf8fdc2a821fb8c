"""Stress of the fused sampler's persistent kernel: thousands of launches of random shapes.

Each call samples a super-batch of a random number of batches (1 to 64) of random sizes (1 to
4096 seeds, log-uniform) on a products-shaped graph, or, one call in five, on a graph where a
fanout exceeds every degree (the kernel's WIDE path), or, one in five, on the products-shaped
graph with random edge weights (the WEIGHTED kernel, weight_attr). Samplers start with buffers at 1% of their
worst case and are replaced every --reset-every calls, so overflow reruns keep happening; their
grid has --oversubscribe times as many programs as can be resident on the GPU at once (the
kernel must not deadlock when its programs do not all run together). Every --check-every calls
the batches are checked against the batch contract, and every --replay-every calls the same call
is replayed from the same stream position and must give identical batches.

A watchdog thread ends the process (exit 3, every thread's stack printed) when no call finishes
for --stall-s seconds. The figures go to --out as they accrue (every 2 s), so a run killed at its
time limit keeps them; the last line printed is the same JSON.

    python -m benchmarks.gpu.stress --device cuda --seconds 90 --out stress.json
"""
from __future__ import annotations

import argparse
import faulthandler
import json
import math
import os
import random
import sys
import threading
import time
from pathlib import Path

STARTED = time.perf_counter()

BATCH_COUNTS = (1, 1, 1, 2, 3, 4, 6, 8, 12, 16, 24, 33, 48, 64)  # every compiled variant, 1..64
WIDE_BATCH_COUNTS = (1, 8)
WEIGHTED_BATCH_COUNTS = (1, 8)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda")
    p.add_argument("--seconds", type=float, default=90, help="seconds of calls, counted after start-up (the "
                   "graphs and the compiles)")
    p.add_argument("--deadline-s", type=float, default=None, help="no call starts this long after the process "
                   "started, start-up included (a step's time limit less a margin)")
    p.add_argument("--calls", type=int, default=20000, help="stop after this many calls")
    p.add_argument("--batch-counts", default=None, help="the super-batch sizes drawn, comma-separated "
                   "(default: " + ",".join(map(str, sorted(set(BATCH_COUNTS)))) + ", 1 the most often)")
    p.add_argument("--max-seeds", type=int, default=4096)
    p.add_argument("--oversubscribe", type=int, default=4, help="programs per resident program")
    p.add_argument("--buffer-scale", type=float, default=0.01)
    p.add_argument("--reset-every", type=int, default=25)
    p.add_argument("--check-every", type=int, default=10)
    p.add_argument("--replay-every", type=int, default=25)
    p.add_argument("--stall-s", type=float, default=30)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tiny", action="store_true", help="interpreter sizes (the CPU dry run)")
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    args.batch_counts = tuple(int(c) for c in args.batch_counts.split(",")) if args.batch_counts else BATCH_COUNTS
    return args


class Figures:
    """What the run has done so far; written to --out every 2 s and at the end."""

    def __init__(self, out: Path):
        self.out, self.written = out, 0.0
        self.data = {"status": "running", "calls": 0, "launches": 0, "overflow_reruns": 0, "batches": 0,
                     "seeds": 0, "sampled_edges": 0, "seconds": 0.0, "max_batches_per_call": 0,
                     "checked_batches": 0, "replays": 0, "failures": [], "compile_s": {}, "weighted_calls": 0}
        self.call_ms: list[float] = []

    def count(self, seeds, batches, launches: int, seconds: float) -> None:
        d = self.data
        self.call_ms.append(1e3 * seconds)
        d["calls"] += 1
        d["launches"] += launches
        d["overflow_reruns"] += launches - 1  # one launch per call of up to 64 batches, unless a buffer overflowed
        d["batches"] += len(batches)
        d["seeds"] += sum(s.numel() for s in seeds)
        d["sampled_edges"] += sum(b.num_sampled_edges for b in batches)
        d["max_batches_per_call"] = max(d["max_batches_per_call"], len(batches))

    def write(self, force: bool = False) -> None:
        if not force and time.monotonic() - self.written < 2:
            return
        d = self.data
        if self.call_ms:
            ms = sorted(self.call_ms)
            d["call_ms"] = {"p50": ms[len(ms) // 2], "p99": ms[min(len(ms) - 1, int(0.99 * len(ms)))], "max": ms[-1]}
        d["launches_per_s"] = d["launches"] / d["seconds"] if d["seconds"] else None
        tmp = self.out.with_suffix(".tmp")
        tmp.write_text(json.dumps(d, indent=1))
        tmp.replace(self.out)
        self.written = time.monotonic()


def watchdog(figures: Figures, progress: list, stall_s: float) -> None:
    """Exit 3 (stacks printed, figures written) once no call has finished for `stall_s`."""
    while True:
        time.sleep(1)
        if time.monotonic() - progress[0] > stall_s:
            figures.data.update(status="stalled", reason=f"no call finished for {stall_s:.0f} s: the kernel hangs "
                                f"(call {figures.data['calls'] + 1}: {progress[1]})")
            figures.write(force=True)
            print(json.dumps(figures.data), flush=True)
            faulthandler.dump_traceback(all_threads=True)
            os._exit(3)


def make_configs(args, torch):
    """(name, graph, fanouts, batch counts, draw weight, weight_attr): products-shaped, one with a
    WIDE path, and the products-shaped graph drawn by edge weight."""
    from conveyor.partition import Graph
    from conveyor.partition.datasets.synthetic import generate
    gen = torch.Generator().manual_seed(args.seed)
    if args.tiny:
        main = generate(scale=0.001, seed=0)
        wide_nodes, wide_edges, fanouts = 300, 3000, [3, 2]
    else:
        main = generate(scale=0.01, seed=0)  # 24K nodes, 1.2M edges, hubs
        wide_nodes, wide_edges, fanouts = 3000, 60000, [15, 10, 5]
    # In-degrees ~20 (at most ~45): a fanout of 64 takes every neighbour, more than one tile wide.
    wide = Graph.from_edge_index(torch.randint(0, wide_nodes, (2, wide_edges), generator=gen), wide_nodes)
    main.edge_attrs["w"] = torch.rand(main.num_edges, generator=gen)
    return [("products-shaped", main, fanouts, args.batch_counts, 3, None),
            ("wide", wide, [4, 64], WIDE_BATCH_COUNTS, 1, None),
            ("weighted", main, fanouts, WEIGHTED_BATCH_COUNTS, 1, "w")]


def precompile(configs, device, figures: Figures) -> dict:
    """Compile every variant the run uses (timed apart) and find the resident grid of each config."""
    from conveyor.samplers.fused import FusedSampler
    resident = {}
    for name, graph, fanouts, counts, _, weight in configs:
        probe = FusedSampler(graph, fanouts, device=device, seed=0, weight_attr=weight)
        for count in sorted(set(counts)):
            start = time.perf_counter()
            compiled = probe.compile(count)
            figures.data["compile_s"][f"{name} x{count}"] = time.perf_counter() - start
            resident[name] = max(resident.get(name, 0), compiled["programs"])
            figures_ = {k: v for k, v in compiled.items() if k != "meta"}
            print(json.dumps({"compiled": name, "batches": count, **figures_}), flush=True)
    return resident


def draw_call(rng, graph, counts, args, torch):
    """Seeds of a super-batch: a random number of batches of log-uniform random sizes."""
    count = rng.choice(counts)
    top = min(args.max_seeds, graph.num_nodes)
    sizes = [max(1, int(math.exp(rng.uniform(0, math.log(top))))) for _ in range(count)]
    gen = torch.Generator().manual_seed(rng.getrandbits(62))
    return [torch.randperm(graph.num_nodes, generator=gen)[:size] for size in sizes]


def check(call, sampler, graph, fanouts, seeds, batches, figures, args, torch):
    """The batch contract on two batches; and, every --replay-every calls, the same call again."""
    from conveyor.samplers.checks import assert_valid_batch, same_batch
    if call % args.check_every == 0:
        for i in sorted({0, len(batches) - 1}):
            assert_valid_batch(batches[i], graph, seeds[i], fanouts)
            figures.data["checked_batches"] += 1
    if call % args.replay_every == 0:
        sampler.stream -= len(seeds)  # rewind to where this call started
        again = sampler.sample_many(seeds)
        assert all(same_batch(a, b) for a, b in zip(batches, again)), "a replayed call drew other batches"
        figures.data["replays"] += 1


def run_calls(args, configs, resident: dict, figures: Figures, torch) -> None:
    """Random calls until --calls, --seconds of calls or --deadline-s, each counted, some checked,
    under the watchdog."""
    from conveyor.samplers.fused import FusedSampler
    rng, samplers, d = random.Random(args.seed), {}, figures.data
    progress = [time.monotonic(), "starting"]
    threading.Thread(target=watchdog, args=(figures, progress, args.stall_s), daemon=True).start()
    start = time.perf_counter()
    deadline = STARTED + (args.deadline_s if args.deadline_s is not None else float("inf"))
    while d["calls"] < args.calls and time.perf_counter() - start < args.seconds and time.perf_counter() < deadline:
        name, graph, fanouts, counts, _, weight = rng.choices(configs, weights=[c[4] for c in configs])[0]
        if name not in samplers or d["calls"] % args.reset_every == 0:  # fresh, too small buffers
            samplers[name] = FusedSampler(graph, fanouts, device=args.device, seed=rng.getrandbits(31),
                                          buffer_scale=args.buffer_scale, weight_attr=weight,
                                          num_programs=args.oversubscribe * resident[name])
        d["weighted_calls"] += weight is not None
        sampler = samplers[name]
        seeds = draw_call(rng, graph, counts, args, torch)
        progress[1] = f"{name}, {len(seeds)} batches of {[s.numel() for s in seeds][:8]}... seeds"
        launches, t0 = sampler.num_launches, time.perf_counter()
        batches = sampler.sample_many(seeds)
        figures.count(seeds, batches, sampler.num_launches - launches, time.perf_counter() - t0)
        try:
            check(d["calls"], sampler, graph, fanouts, seeds, batches, figures, args, torch)
        except AssertionError as err:
            d["failures"].append(f"call {d['calls']} ({progress[1]}): {err}")
        progress[0] = time.monotonic()
        d["seconds"] = time.perf_counter() - start
        figures.write()


def main(argv=None):
    args = parse_args(argv)
    if args.device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")
    import torch
    figures = Figures(Path(args.out))
    configs = make_configs(args, torch)
    resident = precompile(configs, args.device, figures)
    figures.data.update(resident_programs=resident,
                        programs={n: args.oversubscribe * r for n, r in resident.items()},
                        configs=[{"name": n, "nodes": g.num_nodes, "fanouts": f, "batch_counts": sorted(set(c)),
                                  "weight_attr": w} for n, g, f, c, _, w in configs])
    figures.data["startup_s"] = time.perf_counter() - STARTED
    run_calls(args, configs, resident, figures, torch)
    d = figures.data
    d["status"] = "failed" if d["failures"] or not d["calls"] else "passed"
    if not d["calls"]:  # a stress run that made no call proved nothing
        d["reason"] = f"no call was made ({d['startup_s']:.0f} s of start-up; --deadline-s {args.deadline_s})"
    elif d["failures"]:
        d["reason"] = f"{len(d['failures'])} of {d['calls']} calls failed their checks: {d['failures'][0]}"
    figures.write(force=True)
    print(json.dumps(d), flush=True)
    sys.exit(1 if d["status"] == "failed" else 0)


if __name__ == "__main__":
    main()
