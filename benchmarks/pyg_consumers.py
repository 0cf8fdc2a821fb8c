"""PyG's code that consumes a loader, over conveyor's loader and PyG's beside it (issue 48, item 5),
on the synthetic products-shaped graph (the stand-in for PyG's datasets: nothing downloaded).

Three workloads, each as PyG's examples write it, with only the loader's class changed:
- `inference`: `GraphSAGE(...).inference(NeighborLoader(data, [-1], batch_size=B))` (PyG's exact
  layer-wise inference; reddit.py's test) with and without `cache=True`: seconds, and the largest
  difference from the full-graph forward (the same for both loaders: it is exact);
- `imbalanced`: one training epoch of GraphSAGE over `sampler=ImbalancedSampler(data)` (torch's
  sampler of seeds, drawn with replacement by class weight): seconds, the loss, and how balanced
  the classes' seeds came (the most drawn class's count over the least drawn's: ~1 when balanced);
- `disjoint`: one training epoch of SGFormer over `disjoint=True` batches (ogbn_train.py's default
  path; PyG needs pyg-lib for it): seconds and the loss.
Each workload and loader runs in its own subprocess (one at a time, the same torch threads), in
`--rounds` interleaved rounds; a loader PyG cannot build here (no pyg-lib or torch_sparse, or no
pyg-lib for disjoint) is a row saying so. The load average before each run is in the JSON.

    python -m benchmarks.pyg_consumers --scale 0.01 --rounds 3

Prints a table, writes it and the JSON (default benchmarks/results/pyg_consumers_s<scale>.md/.json).
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.loader import loader_arguments

REPO = Path(__file__).resolve().parents[1]
WORKLOADS = ("inference", "imbalanced", "disjoint")
LOADERS = ("conveyor", "pyg")


def parse_args(argv=None):
    p = loader_arguments(__doc__, [f"{w}:{loader}" for w in WORKLOADS for loader in LOADERS])
    p.add_argument("--rounds", type=int, default=3)
    p.set_defaults(fanouts="10,5", batch_size=512)
    return p.parse_args(argv)


def loader_class(name: str, disjoint: bool = False):
    """The NeighborLoader class `name`, or the reason PyG's cannot sample here."""
    if name == "conveyor":
        from conveyor import NeighborLoader
        return NeighborLoader, None
    import torch_geometric.typing as pyg_typing
    if disjoint and not pyg_typing.WITH_PYG_LIB:
        return None, "PyG's disjoint sampling needs pyg-lib, not installed"
    if not (pyg_typing.WITH_PYG_LIB or pyg_typing.WITH_TORCH_SPARSE):
        return None, "PyG's NeighborLoader needs pyg-lib or torch_sparse, neither installed"
    from torch_geometric.loader import NeighborLoader
    return NeighborLoader, None


def inference(cls, data, args) -> dict:
    import torch
    from torch_geometric.nn import GraphSAGE
    torch.manual_seed(args.seed)
    model = GraphSAGE(data.num_features, 64, 2, int(data.y.max()) + 1).eval()
    full = model(data.x, data.edge_index)
    out = {}
    for cache in (False, True):
        loader = cls(data, [-1], batch_size=args.batch_size)
        start = time.perf_counter()
        got = model.inference(loader, cache=cache)
        out[f"cache={cache}"] = {"seconds": time.perf_counter() - start,
                                 "max_abs_diff": float((got - full).abs().max())}
        getattr(loader, "close", lambda: None)()
    return out


def train_epoch(cls, data, args, model, forward, **keywords) -> dict:
    import torch
    import torch.nn.functional as F
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    loader = cls(data, [int(f) for f in args.fanouts.split(",")], batch_size=args.batch_size, **keywords)
    start, losses, seeds = time.perf_counter(), [], []
    for batch in loader:
        optimizer.zero_grad()
        loss = F.cross_entropy(forward(model, batch)[:batch.batch_size], batch.y[:batch.batch_size])
        loss.backward()
        optimizer.step()
        losses.append(float(loss))
        seeds.append(batch.y[:batch.batch_size])
    seconds = time.perf_counter() - start
    getattr(loader, "close", lambda: None)()
    classes = int(data.y.max()) + 1
    present = torch.bincount(data.y[keywords["input_nodes"]], minlength=classes) > 0  # the training labels
    counts = torch.bincount(torch.cat(seeds), minlength=classes)[present].float()
    return {"seconds": seconds, "batches": len(losses), "last_loss": losses[-1],
            "class_spread": float(counts.max() / counts.min()) if counts.min() > 0 else float("inf")}


def imbalanced(cls, data, args) -> dict:
    import torch
    from torch_geometric.loader import ImbalancedSampler
    from torch_geometric.nn import GraphSAGE
    torch.manual_seed(args.seed)
    model = GraphSAGE(data.num_features, 64, 2, int(data.y.max()) + 1)
    return train_epoch(cls, data, args, model, lambda m, b: m(b.x, b.edge_index), input_nodes=data.train_mask,
                       sampler=ImbalancedSampler(data, input_nodes=data.train_mask))


def disjoint(cls, data, args) -> dict:
    import torch
    from torch_geometric.nn.models import SGFormer
    torch.manual_seed(args.seed)
    model = SGFormer(data.num_features, 64, int(data.y.max()) + 1, trans_num_heads=1, gnn_num_layers=2)
    model.reset_parameters()
    return train_epoch(cls, data, args, model, lambda m, b: m(b.x, b.edge_index, b.batch),
                       input_nodes=data.train_mask, shuffle=True, disjoint=True)


def worker(args) -> None:
    import torch

    from conveyor.partition.datasets import load_dataset
    if args.threads:
        torch.set_num_threads(args.threads)
    workload, name = args.worker.split(":")
    graph = load_dataset("synthetic", root=args.data_root, scale=args.scale, seed=args.seed)
    data = graph.to_data()
    data.train_mask = torch.zeros(data.num_nodes, dtype=torch.bool)
    data.train_mask[graph.train_idx] = True
    cls, why = loader_class(name, disjoint=workload == "disjoint")
    figures = {"workload": workload, "loader": name, "load_before": os.getloadavg(),
               "torch_threads": torch.get_num_threads(),
               "graph": {"nodes": graph.num_nodes, "edges": graph.num_edges, "train": int(graph.train_idx.numel())}}
    figures["result"] = {"not_run": why} if cls is None else globals()[workload](cls, data, args)
    Path(args.result).write_text(json.dumps(figures))


def run_worker(args, name: str, result: Path) -> dict:
    command = [sys.executable, "-m", "benchmarks.pyg_consumers", "--worker", name, "--result", str(result),
               "--scale", str(args.scale), "--data-root", args.data_root, "--batch-size", str(args.batch_size),
               "--fanouts", args.fanouts, "--seed", str(args.seed),
               *(["--threads", str(args.threads)] if args.threads else [])]
    subprocess.run(command, check=True, cwd=REPO)
    return json.loads(result.read_text())


def cell(runs: list, key: str, fmt: str) -> str:
    values = [r[key] for r in runs if key in r]
    return "n/a" if not values else f"{statistics.median(values):{fmt}}"


def lines(name: str, rounds: list) -> list:
    """A workload's loader's rows: its figures' medians over the rounds, or why it did not run."""
    workload, loader = name.split(":")
    first = rounds[0]["result"]
    if "not_run" in first:
        return [f"| {workload} | {loader} | {first['not_run']} | | | |"]
    if workload == "inference":
        return [f"| {workload} ({c}) | {loader} | {cell([r['result'][c] for r in rounds], 'seconds', '.2f')} | "
                f"max abs diff from full-graph {cell([r['result'][c] for r in rounds], 'max_abs_diff', '.1e')} | | |"
                for c in ("cache=False", "cache=True")]
    results = [r["result"] for r in rounds]
    return [f"| {workload} | {loader} | {cell(results, 'seconds', '.2f')} | last loss "
            f"{cell(results, 'last_loss', '.3f')} | seeds of the most / least drawn training class "
            f"{cell(results, 'class_spread', '.1f')} "
            f"| {cell(results, 'batches', '.0f')} batches |"]


def table(results: dict, args) -> str:
    graph = next(iter(results.values()))[0]["graph"]
    loads = [r["load_before"][0] for rounds in results.values() for r in rounds]
    return "\n".join([
        f"# PyG's code over conveyor's loader and PyG's: synthetic scale {args.scale} ({graph['nodes']} nodes, "
        f"{graph['edges']} edges, {graph['train']} training nodes), fanouts [{args.fanouts}], batch "
        f"{args.batch_size}, {args.rounds} interleaved rounds (medians)", "",
        "| workload | loader | seconds | metric | | |", "|---|---|---|---|---|---|",
        *(line for name, rounds in results.items() for line in lines(name, rounds)), "",
        f"- machine: {os.cpu_count()} cores shared with other jobs, load (1 min) before each run "
        f"{min(loads):.1f}-{max(loads):.1f}; each run in its own subprocess, one at a time",
        f"- command: python -m benchmarks.pyg_consumers --scale {args.scale} --fanouts {args.fanouts} "
        f"--batch-size {args.batch_size} --rounds {args.rounds}" + (f" --threads {args.threads}" if args.threads
                                                                    else "")])


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.worker:
        return worker(args)
    out = Path(args.out or REPO / "benchmarks" / "results" / f"pyg_consumers_s{args.scale}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    names = [f"{w}:{loader}" for w in WORKLOADS for loader in LOADERS]
    results = {name: [] for name in names}
    for round_ in range(args.rounds):
        for name in names if round_ % 2 == 0 else names[::-1]:
            scratch = out.with_name(f".{out.stem}.{name.replace(':', '_')}.json")
            results[name].append(run_worker(args, name, scratch))
            scratch.unlink(missing_ok=True)
            print(f"round {round_}: {name} done", flush=True)
    text = table(results, args)
    print(text)
    out.write_text(json.dumps({"args": vars(args), "results": results}, indent=2))
    out.with_suffix(".md").write_text(text + "\n")


if __name__ == "__main__":
    main()
