"""A stock PyG model in `conveyor.fit`: hop by hop (PerHopGNN, the fast path) against its own
`forward(x, edge_index)` on each batch's merged subgraph (EdgeIndexGNN, how PyG's
NeighborLoader feeds a model without `trim_to_layer`): training time per epoch and accuracy.

    python -m benchmarks.adapters [--data NAME ...] [--epochs N] [--out PATH]

Per dataset, the same GraphSAGE (hidden 64, one layer per fanout, the same initial weights) is
trained twice through `conveyor.fit`, pipeline=serial, the same seed and so the same batches;
the baseline is the merged subgraph. Times are the mean over the epochs after the first (its
allocations warm up): `train_s` is the forward, loss, backward and step of every batch, `epoch_s`
the whole epoch. The ratio is the baseline's time over the hop-by-hop time.
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import tempfile
from pathlib import Path

import torch
from torch import nn

import conveyor
from conveyor.partition.datasets import load_dataset

REPO = Path(__file__).resolve().parent.parent
DATA = {"cora": ([10, 10], {}), "pubmed": ([10, 10], {}),
        "synthetic": ([15, 10, 5], {"scale": 0.01, "seed": 0})}


class MergedSubgraph(nn.Module):
    """The model as PyG's loop calls it: forward(x, edge_index) (fit wraps it in EdgeIndexGNN)."""

    def __init__(self, gnn: nn.Module):
        super().__init__()
        self.gnn = gnn

    def forward(self, x, edge_index):
        return self.gnn(x, edge_index)


def measure(name: str, root: Path, epochs: int, tmp: Path) -> dict:
    from torch_geometric.nn import GraphSAGE
    fanouts, options = DATA[name]
    graph = load_dataset(name, root=root, **options)
    torch.manual_seed(0)
    gnn = GraphSAGE(graph.x.size(1), 64, len(fanouts), graph.num_classes, dropout=0.5)
    runs = {}
    for way, model in (("merged", MergedSubgraph(copy.deepcopy(gnn))), ("hop_by_hop", copy.deepcopy(gnn))):
        result = conveyor.fit(graph, model, fanouts=fanouts, batch_size=512, epochs=epochs, lr=0.01, seed=0,
                              out_dir=tmp / name / way, overrides=["trainer.progress=false",
                                                                   f"trainer.eval_every={epochs}"])
        later = result.history[1:]
        runs[way] = {"train_s": sum(e["train_s"] for e in later) / len(later),
                     "epoch_s": sum(e["epoch_time_s"] for e in later) / len(later),
                     "test_acc": result.final["test_acc"], "loss": result.history[-1]["loss"]}
    return {"data": name, "fanouts": fanouts, "nodes": graph.num_nodes, **{f"{w}_{k}": v for w, r in runs.items()
                                                                          for k, v in r.items()},
            "train_ratio": runs["merged"]["train_s"] / runs["hop_by_hop"]["train_s"],
            "epoch_ratio": runs["merged"]["epoch_s"] / runs["hop_by_hop"]["epoch_s"]}


def table(rows) -> str:
    lines = ["| data | fanouts | train s merged (baseline) | train s hop by hop | ratio | epoch s merged | "
             "epoch s hop by hop | ratio | test acc merged | test acc hop by hop |", "|---" * 10 + "|"]
    for r in rows:
        lines.append(f"| {r['data']} | {r['fanouts']} | {r['merged_train_s']:.3f} | {r['hop_by_hop_train_s']:.3f} | "
                     f"{r['train_ratio']:.2f}x | {r['merged_epoch_s']:.3f} | {r['hop_by_hop_epoch_s']:.3f} | "
                     f"{r['epoch_ratio']:.2f}x | {r['merged_test_acc']:.4f} | {r['hop_by_hop_test_acc']:.4f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", nargs="+", default=list(DATA), choices=list(DATA))
    default_root = os.environ.get("CONVEYOR_TEST_DATA", REPO / ".cache" / "data")
    parser.add_argument("--root", type=Path, default=Path(default_root))
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "adapters_cpu.json")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        rows = [measure(name, args.root, args.epochs, Path(tmp)) for name in args.data]
    report = {"machine": platform.platform(), "torch": torch.__version__, "threads": torch.get_num_threads(),
              "cpus": os.cpu_count(), "load_1min": [load_before, os.getloadavg()[0]], "epochs": args.epochs,
              "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1))
    args.out.with_suffix(".md").write_text(caption(report) + table(rows) + "\n")
    print(caption(report) + table(rows))


def caption(report: dict) -> str:
    return (f"A stock PyG GraphSAGE (hidden 64) trained by conveyor.fit, pipeline=serial, batch 512, on "
            f"its own merged sampled subgraph (EdgeIndexGNN, the baseline) and hop by hop (PerHopGNN); "
            f"{report['machine']}, {report['cpus']} CPUs, {report['threads']} torch threads, 1-minute load "
            f"{report['load_1min'][0]:.1f} before and {report['load_1min'][1]:.1f} after; seconds are means "
            f"over epochs 2..{report['epochs']}.\n\n")


if __name__ == "__main__":
    main()
