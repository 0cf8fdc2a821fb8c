"""Loader benchmark: conveyor's `NeighborLoader` beside PyG's (0, 1 and 2 workers) and, with
`--dgl-python`, DGL's, on the synthetic products-shaped graph, as each library's user runs them.

Each row is one loader, run in its own subprocess: build it and take the first batch (the
start-up a user waits for: conveyor's async pipeline starts its stage processes here), finish
that epoch, then one warm epoch (the batches per second the ratios compare), then `close()` (or
dropping the loader). Every batch's x and y go to the device. With `--train`, one more epoch trains
PyG's stock `GraphSAGE` through the loader (the share of the loading a pipeline hides behind
training shows as a shorter epoch).

- Rows: `conveyor` (`--pipeline`, default async), `conveyor-serial` (its first batch is the
  start-up the async one is held to), `pyg-w0/1/2` (PyG's `NeighborLoader` with 0, 1, 2 persistent
  workers and its sampling backend as installed), `conveyor-edges` with `--edge-features W` (a
  W-wide edge_attr on every edge), `dgl-w0/2` with `--dgl-python PATH` (an interpreter with dgl 2.1
  and torch 2.2: DGL's `DataLoader` + `NeighborSampler` over the same graph, saved as .npy, and the
  same training nodes; benchmarks/loader_dgl.py).
- Rounds: `--rounds` (>= 5 by default) interleaved: each round runs every row once, starting one
  row later than the round before, so no row always follows the same one. Each figure is
  reported as the median and the range over the rounds; each row says the machine's load
  average (1 min) before its runs, and the torch threads.

    python -m benchmarks.loader --scale 0.05 --fanouts 15,10,5 --batch-size 1024 [--dgl-python PATH]

Prints a table, writes it and the JSON (default benchmarks/results/loader_<device>_s<scale>.md/.json).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

PYG_WORKERS = (0, 1, 2)
DGL_WORKERS = (0, 2)
METRICS = {"first batch s": ("first_batch_s",), "epoch 1 s": ("epoch1", "seconds"),
           "warm epoch s": ("epoch2", "seconds"), "batches/s": ("epoch2", "batches_per_s"), "close s": ("close_s",),
           "training epoch s": ("train", "seconds")}


def parse_args(argv=None):
    p = loader_arguments(__doc__, None)  # its rows' workers: conveyor*, pyg-w<N> (dgl-w<N> run loader_dgl.py)
    p.add_argument("--hidden", type=int, default=256, help="GraphSAGE's hidden_channels (with --train)")
    p.add_argument("--pipeline", default="async", choices=("async", "serial", "auto"),
                   help="the `conveyor` row's pipeline")
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds (each row once a round)")
    p.add_argument("--train", action="store_true", help="also one training epoch a run (stock GraphSAGE)")
    p.add_argument("--edge-features", type=int, default=0, help="also conveyor with a W-wide edge_attr per edge")
    p.add_argument("--dgl-python", default=None, help="a Python with dgl 2.1 + torch 2.2: adds DGL's rows")
    return p.parse_args(argv)


def loader_arguments(doc: str, workers) -> argparse.ArgumentParser:
    """The arguments every loader benchmark takes (the graph, device, batches, threads, seed, output)
    and the hidden ones of its per-loader subprocesses (`workers`: their names, None: any)."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scale", type=float, default=0.05, help="synthetic graph scale (1.0 = products)")
    p.add_argument("--data-root", default=os.environ.get("CONVEYOR_DATA_ROOT", str(REPO / ".cache" / "data")))
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--fanouts", default="15,10,5")
    p.add_argument("--threads", type=int, default=None, help="torch threads of the training process (every "
                                                             "loader; default: torch's)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="JSON path")
    p.add_argument("--worker", default=None, choices=workers, help=argparse.SUPPRESS)
    p.add_argument("--result", default=None, help=argparse.SUPPRESS)
    return p


def row_names(args) -> list:
    return ["conveyor", "conveyor-serial", *(f"pyg-w{w}" for w in PYG_WORKERS),
            *(["conveyor-edges"] if args.edge_features else []),
            *((f"dgl-w{w}" for w in DGL_WORKERS) if args.dgl_python else [])]


def make_loader(args, name: str, graph):
    """The loader `name`, over the training nodes, shuffled, and how it runs."""
    common = {"num_neighbors": [int(f) for f in args.fanouts.split(",")], "batch_size": args.batch_size,
              "input_nodes": graph.train_idx, "shuffle": True}
    if name.startswith("conveyor"):
        from conveyor import NeighborLoader
        pipeline = "serial" if name == "conveyor-serial" else args.pipeline
        loader = NeighborLoader(graph, **common, pipeline=pipeline, device=args.device, seed=args.seed)
        settings = loader.parts.settings
        return loader, {"pipeline": settings.name, "depth": settings.depth, "sampler": "bsp", "cache": "degree",
                        "stage_threads": settings.stage_threads if settings.name == "async" else None}
    import torch_geometric.typing as pyg_typing
    from torch_geometric.loader import NeighborLoader
    workers = int(name.removeprefix("pyg-w"))
    loader = NeighborLoader(graph.to_data(), **common, num_workers=workers, persistent_workers=workers > 0)
    return loader, {"workers": workers, "persistent_workers": workers > 0,
                    "sampling": "pyg-lib" if pyg_typing.WITH_PYG_LIB else "torch_sparse"}


def iterate(batches, device) -> dict:
    """One epoch (or what is left of it), each batch's x and y on the device."""
    import torch
    start, count, nodes = time.perf_counter(), 0, 0
    for batch in batches:
        batch = batch.to(device)
        nodes += batch.x.size(0)  # x and y are in the batch, on the device
        count += 1
    if device != "cpu":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "batches": count, "batches_per_s": count / seconds, "nodes_per_batch":
            nodes / max(count, 1)}


def train(loader, graph, args) -> dict:
    """One epoch of PyG's stock GraphSAGE through the loader."""
    import torch
    import torch.nn.functional as F
    from torch_geometric.nn import GraphSAGE
    torch.manual_seed(args.seed)
    model = GraphSAGE(graph.x.size(1), args.hidden, len(args.fanouts.split(",")), int(graph.num_classes))
    model = model.to(args.device).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.003)
    start, batches, loss_sum = time.perf_counter(), 0, 0.0
    for batch in loader:
        batch = batch.to(args.device)
        out = model(batch.x, batch.edge_index)[:batch.batch_size]
        loss = F.cross_entropy(out, batch.y[:batch.batch_size])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        loss_sum += loss.item()
        batches += 1
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "batches": batches, "mean_loss": loss_sum / max(batches, 1)}


def load_graph(args):
    import torch

    from conveyor.partition.datasets import load_dataset
    graph = load_dataset("synthetic", root=args.data_root, scale=args.scale, seed=args.seed)
    if args.worker == "conveyor-edges":
        g = torch.Generator().manual_seed(args.seed)
        graph.edge_attrs["edge_attr"] = torch.randn(graph.num_edges, args.edge_features, generator=g)
    return graph


def worker(args) -> None:
    """One row's run, in this process: first batch, epochs, close; the figures to --result."""
    import torch
    if args.threads:
        torch.set_num_threads(args.threads)
    graph = load_graph(args)
    figures = {"torch_threads": torch.get_num_threads(), "load_before": os.getloadavg()}
    start = time.perf_counter()
    loader, figures["how"] = make_loader(args, args.worker, graph)
    batches = iter(loader)
    iterate([next(batches)], args.device)
    figures["first_batch_s"] = time.perf_counter() - start
    rest = iterate(batches, args.device)
    figures["epoch1"] = {**rest, "seconds": figures["first_batch_s"] + rest["seconds"], "batches": rest["batches"] + 1}
    del batches
    figures["epoch2"] = iterate(loader, args.device)
    if args.train:
        figures["train"] = train(loader, graph, args)
    start = time.perf_counter()
    getattr(loader, "close", lambda: None)()
    del loader  # PyG's workers end with their iterator, once nothing holds the loader
    figures["close_s"] = time.perf_counter() - start
    figures["load_after"] = os.getloadavg()
    figures["graph"] = {"nodes": graph.num_nodes, "edges": graph.num_edges, "train": int(graph.train_idx.numel()),
                        "features": int(graph.x.size(1))}
    Path(args.result).write_text(json.dumps(figures))


def save_graph_for_dgl(args, directory: Path) -> None:
    """The graph as .npy files, for DGL's interpreter (which cannot import conveyor)."""
    import numpy as np
    graph = load_graph(args)
    for name in ("indptr", "indices", "x", "y", "train_idx"):
        np.save(directory / f"{name}.npy", getattr(graph, name).numpy())


def run_once(args, name: str, result: Path, graph_dir: Path) -> dict:
    common = ["--result", str(result), "--device", args.device, "--batch-size", str(args.batch_size),
              "--fanouts", args.fanouts, "--seed", str(args.seed), *(["--threads", str(args.threads)] if args.threads
                                                                     else [])]
    if name.startswith("dgl"):
        command = [str(Path(args.dgl_python).absolute()), str(REPO / "benchmarks" / "loader_dgl.py"),
                   "--graph", str(graph_dir), "--workers", name.removeprefix("dgl-w"), *common]
    else:
        command = [sys.executable, "-m", "benchmarks.loader", "--worker", name, "--scale", str(args.scale),
                   "--data-root", args.data_root, "--hidden", str(args.hidden), "--pipeline", args.pipeline,
                   "--edge-features", str(args.edge_features), *(["--train"] if args.train else []), *common]
    subprocess.run(command, check=True, cwd=REPO)
    figures = json.loads(result.read_text())
    result.unlink()
    return figures


def run_rounds(args, names: list, work: Path) -> dict:
    """Every row once a round, each round starting one row later: {name: [figures a round]}."""
    graph_dir = work / "graph"
    if args.dgl_python:
        graph_dir.mkdir()
        save_graph_for_dgl(args, graph_dir)
    runs = {name: [] for name in names}
    for r in range(args.rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            runs[name].append(run_once(args, name, work / f"{name}.json", graph_dir))
            print(f"round {r + 1}/{args.rounds} {name}: first batch {runs[name][-1]['first_batch_s']:.2f} s, "
                  f"warm {runs[name][-1]['epoch2']['batches_per_s']:.2f} batches/s", flush=True)
    return runs


def spread(runs: list, path: tuple) -> dict | None:
    values = []
    for run in runs:
        value = run
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        if value is not None:
            values.append(value)
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "values": values}


def summarise(runs: dict) -> dict:
    """Per row: each metric's median and range, the load before its runs, how it ran."""
    out = {}
    for name, row in runs.items():
        out[name] = {metric: spread(row, path) for metric, path in METRICS.items()}
        out[name]["load"] = spread([{"load": r["load_before"][0]} for r in row], ("load",))
        out[name]["how"], out[name]["torch_threads"] = row[0]["how"], row[0]["torch_threads"]
    return out


def ratios(summary: dict) -> dict:
    """conveyor's warm batches per second over each other row's (medians); its async first batch
    over its serial one's."""
    ours = summary["conveyor"]["batches/s"]["median"]
    out = {f"batches_per_s_vs_{name}": ours / row["batches/s"]["median"]
           for name, row in summary.items() if name != "conveyor"}
    out["first_batch_async_over_serial"] = (summary["conveyor"]["first batch s"]["median"]
                                            / summary["conveyor-serial"]["first batch s"]["median"])
    if summary["conveyor"]["training epoch s"]:
        out.update({f"training_epoch_{name}_over_conveyor": row["training epoch s"]["median"]
                    / summary["conveyor"]["training epoch s"]["median"]
                    for name, row in summary.items() if name != "conveyor" and row["training epoch s"]})
    return out


def cell(figure: dict | None) -> str:
    if figure is None:
        return "-"
    return f"{figure['median']:.2f} ({figure['min']:.2f}-{figure['max']:.2f})"


def table(summary: dict, graph: dict, args) -> str:
    metrics = [m for m in METRICS if summary["conveyor"][m] is not None]
    rows = [f"| row | {' | '.join(metrics)} | load (1 min) | threads | how |",
            "|---|" + "---|" * (len(metrics) + 3)]
    for name, row in summary.items():
        load = row["load"]
        rows.append(f"| {name} | {' | '.join(cell(row[m]) for m in metrics)} | "
                    f"{load['median']:.1f} ({load['min']:.1f}-{load['max']:.1f}) | {row['torch_threads']} | "
                    f"{row['how']} |")
    r = ratios(summary)
    command = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items()
                       if k in ("scale", "fanouts", "batch_size", "device", "pipeline", "threads", "rounds",
                                "edge_features") and v)
    return "\n".join([
        f"# Loader benchmark: synthetic scale {args.scale} ({graph['nodes']} nodes, {graph['edges']} edges, "
        f"{graph['train']} training nodes), fanouts [{args.fanouts}], batch {args.batch_size}, {args.device}", "",
        f"Median (min-max) over {args.rounds} interleaved rounds; each row a fresh process a round.", "",
        *rows, "",
        *(f"- conveyor / {k.removeprefix('batches_per_s_vs_')} batches per second (warm epoch, medians): **{v:.2f}x**"
          for k, v in r.items() if k.startswith("batches_per_s_vs_")),
        f"- conveyor's first batch, async / serial (medians): **{r['first_batch_async_over_serial']:.2f}x**",
        *(f"- training epoch, {k.removeprefix('training_epoch_').removesuffix('_over_conveyor')} / conveyor: "
          f"**{v:.2f}x**" for k, v in r.items() if k.startswith("training_epoch_")),
        f"- machine: {os.cpu_count()} cores, {platform.machine()}; the load column is the 1-minute load "
        f"average before each run (other users share this machine)",
        f"- command: python -m benchmarks.loader {command}"
        + (" --train" if args.train else "") + (" --dgl-python <dgl 2.1 + torch 2.2>" if args.dgl_python else "")])


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.worker:
        return worker(args)
    out = Path(args.out or REPO / "benchmarks" / "results" / f"loader_{args.device}_s{args.scale}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="conveyor-loader-bench-") as work:
        runs = run_rounds(args, row_names(args), Path(work))
    summary = summarise(runs)
    text = table(summary, runs["conveyor"][0]["graph"], args)
    print(text)
    out.write_text(json.dumps({"args": vars(args), "summary": summary, "runs": runs, **ratios(summary)}, indent=2))
    out.with_suffix(".md").write_text(text + "\n")


if __name__ == "__main__":
    main()
