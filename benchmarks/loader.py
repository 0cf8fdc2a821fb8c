"""Loader benchmark: conveyor's `NeighborLoader` beside PyG's, on the synthetic products-shaped
graph, as a PyG user runs them.

For each loader (conveyor's, default async pipeline; PyG's with `num_workers` as `mode=compare`'s
reference sets them, `conveyor.compare.reference.pyg_workers("auto")`, persistent workers):
- epoch 1: iterate one epoch of the training nodes (shuffled), each batch's x and y on the device
  (`batch.to(device)`): this epoch includes starting the loader's processes;
- epoch 2: the same, warm: batches per second, the figure the ratio compares;
- epoch 3: train PyG's stock `GraphSAGE` one epoch through the loader
  (`model(batch.x, batch.edge_index)[:batch.batch_size]`, cross-entropy, Adam): the share of the
  loading a pipeline hides behind training shows as a shorter epoch.

Each loader runs in its own subprocess (one at a time), with the same torch threads; the table
says how it ran (cores, threads, load average, PyG's sampling backend, workers). With
`--edge-features W` a third row runs conveyor's loader over the same graph with a W-wide float
`edge_attr` on every edge, which each batch carries by `e_id`: its batches per second over the
plain row's is what carrying edge features costs.

    python -m benchmarks.loader --scale 0.05 --fanouts 15,10,5 --batch-size 1024

Prints a table, writes it and the JSON (default benchmarks/results/loader_<device>_s<scale>.md/.json).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

LOADERS = ("conveyor", "pyg")


def parse_args(argv=None):
    p = loader_arguments(__doc__, (*LOADERS, "conveyor-edges"))
    p.add_argument("--hidden", type=int, default=256, help="GraphSAGE's hidden_channels (conveyor's model.hidden)")
    p.add_argument("--pipeline", default="async", choices=("async", "serial"), help="conveyor's loader's pipeline")
    p.add_argument("--edge-features", type=int, default=0, help="also conveyor with a W-wide edge_attr per edge")
    return p.parse_args(argv)


def loader_arguments(doc: str, workers) -> argparse.ArgumentParser:
    """The arguments every loader benchmark takes (the graph, device, batches, threads, seed, output)
    and the hidden ones of its per-loader subprocesses (`workers`: their names)."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scale", type=float, default=0.05, help="synthetic graph scale (1.0 = products)")
    p.add_argument("--data-root", default=os.environ.get("CONVEYOR_DATA_ROOT", str(REPO / ".cache" / "data")))
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--fanouts", default="15,10,5")
    p.add_argument("--threads", type=int, default=None, help="torch threads of the training process (both loaders; "
                                                             "default: torch's)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="JSON path")
    p.add_argument("--worker", default=None, choices=workers, help=argparse.SUPPRESS)
    p.add_argument("--result", default=None, help=argparse.SUPPRESS)
    return p


def make_loader(args, name: str, graph):
    """The loader `name`, over the training nodes, shuffled, and how it runs."""
    fanouts = [int(f) for f in args.fanouts.split(",")]
    common = {"num_neighbors": fanouts, "batch_size": args.batch_size, "input_nodes": graph.train_idx,
              "shuffle": True}
    if name.startswith("conveyor"):
        from conveyor import NeighborLoader
        loader = NeighborLoader(graph, **common, pipeline=args.pipeline, device=args.device, seed=args.seed)
        settings = loader.parts.settings
        return loader, {"pipeline": settings.name, "depth": settings.depth, "sampler": "bsp", "cache": "degree",
                        "stage_threads": settings.stage_threads if settings.name == "async" else None}
    import torch_geometric.typing as pyg_typing
    from torch_geometric.loader import NeighborLoader

    from conveyor.compare.reference import pyg_workers
    workers = pyg_workers("auto")
    loader = NeighborLoader(graph.to_data(), **common, num_workers=workers, persistent_workers=workers > 0)
    return loader, {"workers": workers, "persistent_workers": workers > 0,
                    "sampling": "pyg-lib" if pyg_typing.WITH_PYG_LIB else "torch_sparse"}


def iterate(loader, device) -> dict:
    """One epoch, each batch's x and y on the device."""
    import torch
    start, batches, nodes = time.perf_counter(), 0, 0
    for batch in loader:
        batch = batch.to(device)
        nodes += batch.x.size(0)  # x and y are in the batch, on the device
        batches += 1
    if device != "cpu":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "batches": batches, "batches_per_s": batches / seconds, "nodes_per_batch":
            nodes / max(batches, 1)}


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


def worker(args) -> None:
    """One loader's three epochs, in this process; the figures to --result."""
    import torch

    from conveyor.partition.datasets import load_dataset
    if args.threads:
        torch.set_num_threads(args.threads)
    graph = load_dataset("synthetic", root=args.data_root, scale=args.scale, seed=args.seed)
    if args.worker == "conveyor-edges":
        g = torch.Generator().manual_seed(args.seed)
        graph.edge_attrs["edge_attr"] = torch.randn(graph.num_edges, args.edge_features, generator=g)
    loader, how = make_loader(args, args.worker, graph)
    figures = {"loader": args.worker, "how": how, "torch_threads": torch.get_num_threads(),
               "load_before": os.getloadavg()}
    figures["epoch1"] = iterate(loader, args.device)
    figures["epoch2"] = iterate(loader, args.device)
    figures["train"] = train(loader, graph, args)
    figures["load_after"] = os.getloadavg()
    figures["graph"] = {"nodes": graph.num_nodes, "edges": graph.num_edges, "train": int(graph.train_idx.numel()),
                        "features": int(graph.x.size(1))}
    getattr(loader, "close", lambda: None)()
    Path(args.result).write_text(json.dumps(figures))


def run_worker(args, name: str, result: Path) -> dict:
    command = [sys.executable, "-m", "benchmarks.loader", "--worker", name, "--result", str(result),
               "--scale", str(args.scale),
               "--data-root", args.data_root, "--device", args.device, "--batch-size", str(args.batch_size),
               "--fanouts", args.fanouts, "--hidden", str(args.hidden), "--pipeline", args.pipeline,
               "--seed", str(args.seed), "--edge-features", str(args.edge_features),
               *(["--threads", str(args.threads)] if args.threads else [])]
    subprocess.run(command, check=True, cwd=REPO)
    return json.loads(result.read_text())


def ratios(results: dict) -> dict:
    ours, theirs = results["conveyor"], results["pyg"]
    out = {"batches_per_s_ratio": ours["epoch2"]["batches_per_s"] / theirs["epoch2"]["batches_per_s"],
           "train_epoch_ratio": theirs["train"]["seconds"] / ours["train"]["seconds"]}
    if "conveyor-edges" in results:
        out["edge_features_batches_per_s_ratio"] = (results["conveyor-edges"]["epoch2"]["batches_per_s"]
                                                    / ours["epoch2"]["batches_per_s"])
    return out


def table(results: dict, args) -> str:
    ours, theirs, r = results["conveyor"], results["pyg"], ratios(results)
    rows = ["| loader | epoch 1 (start-up incl.) s | warm epoch s | batches/s | training epoch s | how |",
            "|---|---|---|---|---|---|"]
    for name, f in results.items():
        rows.append(f"| {name} | {f['epoch1']['seconds']:.2f} | {f['epoch2']['seconds']:.2f} | "
                    f"{f['epoch2']['batches_per_s']:.2f} | {f['train']['seconds']:.2f} | {f['how']} |")
    g = ours["graph"]
    return "\n".join([
        f"# Loader benchmark: synthetic scale {args.scale} ({g['nodes']} nodes, {g['edges']} edges, "
        f"{g['train']} training nodes), fanouts [{args.fanouts}], batch {args.batch_size}, {args.device}", "",
        *rows, "",
        f"- conveyor / PyG batches per second (warm epoch): **{r['batches_per_s_ratio']:.2f}x**",
        f"- PyG / conveyor training epoch time (stock GraphSAGE, hidden {args.hidden}): "
        f"**{r['train_epoch_ratio']:.2f}x**",
        *([f"- conveyor with a {args.edge_features}-wide edge_attr / without, batches per second (warm epoch): "
           f"**{r['edge_features_batches_per_s_ratio']:.2f}x**"] if args.edge_features else []),
        f"- machine: {os.cpu_count()} cores, torch threads {ours['torch_threads']}, load average (1 min) before "
        f"{ours['load_before'][0]:.2f} / {theirs['load_before'][0]:.2f} (conveyor / PyG) {platform.machine()}",
        f"- command: python -m benchmarks.loader --scale {args.scale} --fanouts {args.fanouts} "
        f"--batch-size {args.batch_size} --device {args.device} --pipeline {args.pipeline}"
        + (f" --edge-features {args.edge_features}" if args.edge_features else "")
        + (f" --threads {args.threads}" if args.threads else "")])


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.worker:
        return worker(args)
    out = Path(args.out or REPO / "benchmarks" / "results" / f"loader_{args.device}_s{args.scale}.json")
    names = LOADERS + (("conveyor-edges",) if args.edge_features else ())
    run_and_write(args, names, out, run_worker, table, ratios)


def run_and_write(args, names, out: Path, run_one, make_table, make_ratios) -> None:
    """Each loader's worker in turn (`run_one(args, name, result_path)`), then the table (printed,
    and beside the JSON of every figure at `out`)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    results = {name: run_one(args, name, out.with_name(f".{out.stem}.{name}.json")) for name in names}
    text = make_table(results, args)
    print(text)
    out.write_text(json.dumps({"args": vars(args), "results": results, **make_ratios(results)}, indent=2))
    out.with_suffix(".md").write_text(text + "\n")
    for name in names:
        out.with_name(f".{out.stem}.{name}.json").unlink(missing_ok=True)


if __name__ == "__main__":
    main()
