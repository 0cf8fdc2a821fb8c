"""The trainer's dropout (trainer/models/dropout.py: masks from 16-bit slices of random words) against
`F.dropout` (model.fast_dropout=false): the whole CPU training step, and dropout alone.

    python -m benchmarks.dropout --data-root data --scale 0.05 --threads 2

One batch of the synthetic products-shaped graph (`[15, 10, 5]`, --batch-size seeds, bsp), the
built-in GraphSAGE (hidden 256, dropout 0.5, as the trainer's defaults) twice with the same
initial weights, one per dropout: forward, cross-entropy on the seeds, backward and an Adam step.
The two steps alternate (--repeats pairs, after one untimed pair), each pair's ratio is fast /
F.dropout, and the median ratio is reported with the median times. "Dropout alone" times the
forward and backward of dropout on the first hidden layer's output, the largest it is applied
to, the same way. Each row says its thread count and the 1-minute load average when it started.
Writes JSON and a Markdown table (default benchmarks/results/dropout_cpu_s<scale>.json, .md).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from conveyor.partition.datasets import load_dataset
from conveyor.samplers import build_sampler
from conveyor.trainer.models.dropout import dropout
from conveyor.trainer.models.sampled import SampledGNN


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-root", default="data", help="where the synthetic graph is cached")
    p.add_argument("--scale", type=float, default=0.05, help="synthetic graph scale, 1.0 = products")
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--fanouts", default="15,10,5")
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--threads", default="2", help="torch CPU threads, comma-separated for several")
    p.add_argument("--repeats", type=int, default=5, help="timed pairs of steps per thread count")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="JSON path")
    return p.parse_args(argv)


def timed(step) -> float:
    start = time.perf_counter()
    step()
    return time.perf_counter() - start


def pairs(baseline, fast, repeats: int) -> dict:
    """Alternate the two (one untimed pair first); median seconds and the median of per-pair ratios."""
    baseline(), fast()
    base_s, fast_s = [], []
    for _ in range(repeats):
        base_s.append(timed(baseline))
        fast_s.append(timed(fast))
    ratios = [f / b for b, f in zip(base_s, fast_s)]
    return {"f_dropout_ms": 1000 * statistics.median(base_s), "fast_ms": 1000 * statistics.median(fast_s),
            "ratio": statistics.median(ratios), "ratios": ratios}


def training_step(model, optimizer, x, layers, y):
    def step():
        out = model(x, layers)
        loss = F.cross_entropy(out, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return step


def dropout_alone(shape, fast: bool):
    x = torch.randn(shape, requires_grad=True)
    return lambda: dropout(x, 0.5, fast=fast).sum().backward()


def measure(graph, args) -> tuple[dict, dict]:
    """The batch and its figures, and a row per thread count (step and dropout alone)."""
    torch.manual_seed(args.seed)
    fanouts = [int(f) for f in args.fanouts.split(",")]
    seeds = graph.train_idx[torch.randperm(graph.train_idx.numel())[:args.batch_size]]
    batch = build_sampler("bsp", graph, fanouts, seed=args.seed).sample(seeds)
    x, y, layers = graph.x[batch.n_id].float(), graph.y[seeds], list(batch.layers())
    models = {}
    for fast in (False, True):
        torch.manual_seed(args.seed)  # the same initial weights
        model = SampledGNN("sage", x.size(1), args.hidden, graph.num_classes, len(fanouts), fast_dropout=fast)
        models[fast] = training_step(model, torch.optim.Adam(model.parameters(), lr=0.001), x, layers, y)
    hidden_rows = int(batch.num_nodes_per_hop[len(fanouts) - 1])  # the first layer's outputs
    shape = (hidden_rows, args.hidden)
    rows = []
    for threads in [int(t) for t in args.threads.split(",")]:
        torch.set_num_threads(threads)
        row = {"threads": threads, "load_1min": os.getloadavg()[0]}
        row["step"] = pairs(models[False], models[True], args.repeats)
        row["dropout_alone"] = pairs(dropout_alone(shape, False), dropout_alone(shape, True), args.repeats)
        rows.append(row)
        print(f"threads {threads}: step {row['step']['f_dropout_ms']:.0f} -> {row['step']['fast_ms']:.0f} ms "
              f"({row['step']['ratio']:.2f}x), dropout alone {row['dropout_alone']['f_dropout_ms']:.1f} -> "
              f"{row['dropout_alone']['fast_ms']:.1f} ms ({row['dropout_alone']['ratio']:.2f}x)", flush=True)
    sizes = {"nodes": batch.n_id.numel(), "edges": batch.num_sampled_edges, "dropout_shape": list(shape)}
    return sizes, rows


def markdown(meta, rows) -> str:
    lines = [f"# Dropout: the trainer's (16-bit slices of random words) against F.dropout, "
             f"scale {meta['scale']:g}", "", f"`{meta['command']}`", "",
             f"One batch of {meta['batch_size']} seeds, {meta['fanouts']} ({meta['batch']['nodes']:,} nodes, "
             f"{meta['batch']['edges']:,} sampled edges), built-in GraphSAGE hidden {meta['hidden']}, dropout 0.5; "
             f"{meta['cpu_count']} CPU cores, torch {meta['torch']}; {meta['repeats']} alternating pairs a row "
             f"after one untimed, medians; ratio = fast / F.dropout (below 1: faster). Dropout alone: forward "
             f"and backward on {meta['batch']['dropout_shape']} (the first hidden layer's output).", "",
             "| threads | load | step, F.dropout ms | step, fast ms | step ratio | dropout alone, F.dropout ms "
             "| dropout alone, fast ms | dropout ratio |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        s, d = r["step"], r["dropout_alone"]
        lines.append(f"| {r['threads']} | {r['load_1min']:.1f} | {s['f_dropout_ms']:.0f} | {s['fast_ms']:.0f} | "
                     f"{s['ratio']:.2f}x | {d['f_dropout_ms']:.1f} | {d['fast_ms']:.1f} | {d['ratio']:.2f}x |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    args = parse_args(argv)
    graph = load_dataset("synthetic", root=args.data_root, scale=args.scale, seed=args.seed)
    results = Path(__file__).resolve().parent / "results"
    out = Path(args.out) if args.out else results / f"dropout_cpu_s{args.scale:g}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"cpu": platform.processor() or platform.machine(), "cpu_count": os.cpu_count(), "torch": torch.__version__,
            "scale": args.scale, "batch_size": args.batch_size, "fanouts": args.fanouts, "hidden": args.hidden,
            "repeats": args.repeats, "load_1min_at_start": os.getloadavg()[0],
            "command": " ".join(["python", "benchmarks/dropout.py"] + (argv if argv is not None else sys.argv[1:]))}
    meta["batch"], rows = measure(graph, args)
    write_report(out, meta, {"rows": rows}, lambda: markdown(meta, rows))


def write_report(out: Path, meta: dict, body: dict, table) -> None:
    """The JSON (`meta` with the load at the end, and `body`) and beside it the Markdown `table()`."""
    meta["load_1min_at_end"] = os.getloadavg()[0]
    out.write_text(json.dumps({"meta": meta, **body}, indent=1))
    out.with_suffix(".md").write_text(table())
    print(f"wrote {out} and {out.with_suffix('.md')}")


if __name__ == "__main__":
    main()
