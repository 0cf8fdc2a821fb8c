"""Link loader benchmark: conveyor's `LinkNeighborLoader` beside PyG's, on the synthetic
products-shaped graph, as a PyG user runs them (issue #37, item 4).

Both loaders cut batches of `--batch-size` links from the same `--links` edges of the graph
(drawn once from `--seed`), with `--neg-ratio` binary negatives per link and the same fanouts:
conveyor's over its async pipeline (the sampler stage draws the negatives and samples every
endpoint's neighbourhood, the loader stage gathers x through the cache), PyG's with
`num_workers` as `mode=compare`'s reference sets them (`compare.reference.pyg_workers("auto")`),
persistent workers. Per loader, in its own subprocess (one at a time, the same torch threads):
- epoch 1: one epoch, each batch's x, edges and links on the device (`batch.to(device)`),
  starting the loader's processes included;
- epoch 2: the same, warm: batches per second, the figure the ratio compares.
With `--typed` the graph is the ogbn-mag-shaped `synthetic_mag` (`--scale` its scale) as a PyG
`HeteroData` with its reverse relations (`ToUndirected`), the links those of ("author", "writes",
"paper") and `--fanouts` per edge type: the typed link loader (issue 49). With `--serial`, a third
row runs conveyor's loader with `pipeline="serial"` (everything in the
loop's process): what the pipeline's processes add. `--rounds` rounds run every loader once each,
interleaved (the order reversed every other round); the table gives each figure's median and range
over the rounds, and the ratio's, taken per round.

    python -m benchmarks.link_loader --scale 0.05 --fanouts 15,10,5 --batch-size 1024 --links 20480 --rounds 5
    python -m benchmarks.link_loader --typed --scale 0.02 --fanouts 10,5 --batch-size 512 --links 10240 --rounds 3

Prints a table, writes it and the JSON (default benchmarks/results/link_loader_<device>_s<scale>.md/.json).
"""
from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path

from benchmarks.loader import iterate, loader_arguments

REPO = Path(__file__).resolve().parents[1]
LOADERS = ("conveyor", "pyg")


def parse_args(argv=None):
    p = loader_arguments(__doc__, (*LOADERS, "conveyor-serial"))
    p.add_argument("--links", type=int, default=20480, help="edges the batches are cut from (an epoch)")
    p.add_argument("--neg-ratio", type=float, default=1.0, help="binary negatives per link")
    p.add_argument("--serial", action="store_true", help="also conveyor's loader with pipeline='serial'")
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds: every loader once per round")
    p.add_argument("--typed", action="store_true", help="synthetic_mag as a HeteroData, author-writes-paper links")
    return p.parse_args(argv)


TYPED_LINKS = ("author", "writes", "paper")


def make_loader(args, name: str, data, links):
    """The loader `name` over `links`, shuffled, and how it runs."""
    common = {"num_neighbors": [int(f) for f in args.fanouts.split(",")], "batch_size": args.batch_size,
              "edge_label_index": (TYPED_LINKS, links) if args.typed else links, "neg_sampling_ratio": args.neg_ratio,
              "shuffle": True}
    if name.startswith("conveyor"):
        from conveyor import LinkNeighborLoader
        pipeline = "serial" if name == "conveyor-serial" else "async"
        loader = LinkNeighborLoader(data, **common, pipeline=pipeline, device=args.device, seed=args.seed)
        settings = loader.parts.settings
        return loader, {"pipeline": settings.name, "depth": settings.depth, "sampler": "bsp", "cache": "degree",
                        "stage_threads": settings.stage_threads if settings.name == "async" else None}
    import torch_geometric.typing as pyg_typing
    from torch_geometric.loader import LinkNeighborLoader

    from conveyor.compare.reference import pyg_workers
    workers = pyg_workers("auto")
    loader = LinkNeighborLoader(data, **common, num_workers=workers, persistent_workers=workers > 0)
    return loader, {"workers": workers, "persistent_workers": workers > 0,
                    "sampling": "pyg-lib" if pyg_typing.WITH_PYG_LIB else "torch_sparse"}


def worker(args) -> None:
    """One loader's two epochs, in this process; the figures to --result."""
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    graph, data = typed_data(args) if args.typed else plain_data(args)
    edges = data[TYPED_LINKS].edge_index if args.typed else data.edge_index
    g = torch.Generator().manual_seed(args.seed)
    links = edges[:, torch.randperm(edges.size(1), generator=g)[:args.links]]
    loader, how = make_loader(args, args.worker, data, links)
    figures = {"loader": args.worker, "how": how, "torch_threads": torch.get_num_threads(),
               "load_before": os.getloadavg()}
    epoch = typed_iterate if args.typed else (lambda batches: iterate(batches, args.device))
    figures["epoch1"] = epoch(loader)
    figures["epoch2"] = epoch(loader)
    figures["load_after"] = os.getloadavg()
    figures["graph"] = {"nodes": graph.num_nodes, "edges": int(data.num_edges), "links": int(links.size(1)),
                        "features": int(graph.x.size(1)) if graph.x is not None else "per type"}
    getattr(loader, "close", lambda: None)()
    Path(args.result).write_text(json.dumps(figures))


def plain_data(args):
    from conveyor.partition.datasets import load_dataset
    graph = load_dataset("synthetic", root=args.data_root, scale=args.scale, seed=args.seed)
    return graph, graph.to_data()


def typed_data(args):
    """synthetic_mag as a HeteroData with its reverse relations, as PyG's mag examples train it."""
    import torch_geometric.transforms as T

    from conveyor.partition.datasets.synthetic_mag import load_synthetic_mag
    graph = load_synthetic_mag(args.data_root, scale=args.scale)
    return graph, T.ToUndirected()(graph.to_data())


def typed_iterate(loader) -> dict:
    from benchmarks.hetero import iterate as hetero_iterate
    return hetero_iterate(loader)


def run_worker(args, name: str, result: Path) -> dict:
    command = [sys.executable, "-m", "benchmarks.link_loader", "--worker", name, "--result", str(result),
               "--scale", str(args.scale), "--data-root", args.data_root, "--device", args.device,
               "--batch-size", str(args.batch_size), "--links", str(args.links), "--neg-ratio", str(args.neg_ratio),
               "--fanouts", args.fanouts, "--seed", str(args.seed),
               *(["--threads", str(args.threads)] if args.threads else []), *(["--typed"] if args.typed else [])]
    subprocess.run(command, check=True, cwd=REPO)
    return json.loads(result.read_text())


def spread(values: list) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "values": values}


def ratios(results: dict) -> dict:
    """Per round, conveyor's warm batches per second over PyG's (the same round); their median and range."""
    per_s = {name: [f["epoch2"]["batches_per_s"] for f in rounds] for name, rounds in results.items()}
    out = {"batches_per_s_ratio": spread([c / p for c, p in zip(per_s["conveyor"], per_s["pyg"])])}
    if "conveyor-serial" in per_s:
        out["serial_batches_per_s_ratio"] = spread([c / p for c, p in zip(per_s["conveyor-serial"], per_s["pyg"])])
    return out


def row(name: str, rounds: list) -> str:
    warm = spread([f["epoch2"]["batches_per_s"] for f in rounds])
    first = statistics.median(f["epoch1"]["seconds"] for f in rounds)
    loads = [f["load_before"][0] for f in rounds]
    return (f"| {name} | {first:.2f} | {statistics.median(f['epoch2']['seconds'] for f in rounds):.2f} | "
            f"**{warm['median']:.2f}** ({warm['min']:.2f}-{warm['max']:.2f}) | "
            f"{statistics.median(f['epoch2']['nodes_per_batch'] for f in rounds):.0f} | "
            f"{min(loads):.1f}-{max(loads):.1f} | {rounds[0]['how']} |")


def table(results: dict, args) -> str:
    ours, r = results["conveyor"][0], ratios(results)
    g, said = ours["graph"], lambda x: f"**{x['median']:.2f}x** (range {x['min']:.2f}-{x['max']:.2f})"
    return "\n".join([
        f"# Link loader benchmark: {'synthetic_mag' if args.typed else 'synthetic'} scale {args.scale} "
        f"({g['nodes']} nodes, {g['edges']} edges{typed_note(args)}), "
        f"{g['links']} links, {args.neg_ratio:g} binary negatives per link, fanouts [{args.fanouts}], batch "
        f"{args.batch_size} links, {args.device}, {args.rounds} interleaved rounds", "",
        "| loader | epoch 1 (start-up incl.) s, median | warm epoch s, median | warm batches/s, median (range) | "
        "nodes per batch | load (1 min) before, range | how |", "|---|---|---|---|---|---|---|",
        *(row(name, rounds) for name, rounds in results.items()), "",
        f"- conveyor / PyG warm batches per second, per round (each round runs every loader once, the "
        f"order alternating): {said(r['batches_per_s_ratio'])}",
        *([f"- conveyor with pipeline='serial' / PyG: {said(r['serial_batches_per_s_ratio'])}"]
          if "serial_batches_per_s_ratio" in r else []),
        f"- machine: {os.cpu_count()} cores shared with other engineers' jobs, torch threads "
        f"{ours['torch_threads']}, {platform.machine()}; each loader in its own subprocess, one at a time",
        f"- command: python -m benchmarks.link_loader --scale {args.scale} --fanouts {args.fanouts} "
        f"--batch-size {args.batch_size} --links {args.links} --neg-ratio {args.neg_ratio:g} --device {args.device} "
        f"--rounds {args.rounds}" + (" --serial" if args.serial else "") + (" --typed" if args.typed else "")
        + (f" --threads {args.threads}" if args.threads else "")])


def typed_note(args) -> str:
    return f", a HeteroData with reverse relations, links of {TYPED_LINKS}" if args.typed else ""


def run_rounds(args, names: tuple, out: Path) -> None:
    """`--rounds` rounds, each running every loader once (the order reversed every other round, so
    that a drift in the machine's load falls on both); the table printed and beside the JSON."""
    out.parent.mkdir(parents=True, exist_ok=True)
    results = {name: [] for name in names}
    for round_ in range(args.rounds):
        for name in names if round_ % 2 == 0 else names[::-1]:
            scratch = out.with_name(f".{out.stem}.{name}.json")
            results[name].append(run_worker(args, name, scratch))
            scratch.unlink(missing_ok=True)
            print(f"round {round_}: {name} {results[name][-1]['epoch2']['batches_per_s']:.2f} batches/s", flush=True)
    text = table(results, args)
    print(text)
    out.write_text(json.dumps({"args": vars(args), "results": results, **ratios(results)}, indent=2))
    out.with_suffix(".md").write_text(text + "\n")


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.worker:
        return worker(args)
    kind = "typed_link_loader" if args.typed else "link_loader"
    out = Path(args.out or REPO / "benchmarks" / "results" / f"{kind}_{args.device}_s{args.scale}.json")
    run_rounds(args, LOADERS + (("conveyor-serial",) if args.serial else ()), out)


if __name__ == "__main__":
    main()
