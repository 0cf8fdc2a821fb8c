"""One layer-wise evaluation of the default run's model, batch by batch (the kept LayerwisePlan,
the serial pipeline's way before #51) against whole layers (WholeLayerPlan), in one process,
interleaved: the same logits (checked bit for bit first), and the seconds of a pass.

    python -m benchmarks.whole_layer_eval --threads 1,2 --rounds 5

The default run's graph (synthetic, scale 0.02: 48,981 nodes, 2.47M edges), SAGE 3 x 256 at seed
0, its val and test nodes, batches of 4,096 targets (trainer.eval_batch_size). The first pass of
each is timed alone (the batch plan draws and relabels its batches then, the whole-layer plan
builds its matrices); later passes are the rounds' median (range). Writes JSON and Markdown
(default benchmarks/results/whole_layer_eval_cpu.json, .md) with the 1-minute load of each row.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import torch

from conveyor.partition.datasets import load_dataset
from conveyor.trainer.loop.layerwise import layerwise_logits
from conveyor.trainer.loop.plan import LayerwisePlan, WholeLayerPlan
from conveyor.trainer.models.sampled import SampledGNN

PLANS = {"batches": LayerwisePlan, "whole layers": WholeLayerPlan}


def measure(graph, threads: int, rounds: int, batch_size: int) -> dict:
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = SampledGNN("sage", graph.x.size(1), 256, graph.num_classes, 3).eval()
    nodes = torch.cat([graph.val_idx, graph.test_idx])
    plans = {name: plan(graph, nodes, 3, batch_size) for name, plan in PLANS.items()}

    def one_pass(plan):
        start = time.perf_counter()
        logits = layerwise_logits(model, graph, nodes, batch_size, torch.device("cpu"), plan=plan)
        return time.perf_counter() - start, logits

    first = {name: one_pass(plan) for name, plan in plans.items()}
    same = torch.equal(first["batches"][1], first["whole layers"][1])
    later = {name: [] for name in plans}
    for _ in range(rounds):
        for name, plan in plans.items():
            later[name].append(one_pass(plan)[0])
    row = {"threads": threads, "load_1min": os.getloadavg()[0], "same_logits": same}
    for name in plans:
        row[name] = {"first_s": first[name][0], "median_s": statistics.median(later[name]),
                     "range_s": [min(later[name]), max(later[name])]}
    row["ratio"] = row["whole layers"]["median_s"] / row["batches"]["median_s"]
    return row


def markdown(meta: dict, rows: list) -> str:
    lines = ["# Layer-wise evaluation: batches against whole layers", "", f"`{meta['command']}`", "",
             f"{meta['graph']}; SAGE 3 x 256, val + test nodes, batches of {meta['batch_size']}; "
             f"{meta['rounds']} interleaved rounds; seconds a pass. The machine is shared: 1-minute load per row.", "",
             "| threads | load | same logits | batches: first | batches: later | whole layers: first | "
             "whole layers: later | whole / batches |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        cells = [str(r["threads"]), f"{r['load_1min']:.1f}", "yes" if r["same_logits"] else "NO"]
        for plan in PLANS:
            timing = r[plan]
            cells += [f"{timing['first_s']:.2f}", f"{timing['median_s']:.2f} ({timing['range_s'][0]:.2f}-"
                                                  f"{timing['range_s'][1]:.2f})"]
        lines.append("| " + " | ".join(cells + [f"{r['ratio']:.2f}x"]) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", default="1,2")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--scale", type=float, default=0.02)
    p.add_argument("--batch-size", type=int, default=4096)
    p.add_argument("--data-root", default=".cache/data")
    p.add_argument("--out", default=None, help="JSON path")
    args = p.parse_args(argv)
    graph = load_dataset("synthetic", root=args.data_root, scale=args.scale)
    rows = [measure(graph, int(t), args.rounds, args.batch_size) for t in args.threads.split(",")]
    meta = {"command": "python -m benchmarks.whole_layer_eval " + " ".join(argv or []), "graph": str(graph),
            "rounds": args.rounds, "batch_size": args.batch_size}
    out = Path(args.out) if args.out else Path(__file__).resolve().parent / "results" / "whole_layer_eval_cpu.json"
    out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    out.with_suffix(".md").write_text(markdown(meta, rows))
    print(markdown(meta, rows))


if __name__ == "__main__":
    main()
