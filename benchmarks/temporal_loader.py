"""Temporal loader benchmark: conveyor's temporal `NeighborLoader` and `LinkNeighborLoader`
(`time_attr`, samplers/temporal.py, issue #49) with their rows sorted by time, beside the previous
release's draws (benchmarks/temporal_previous.py: every candidate edge keyed and ranked) and bsp
without time, on the same synthetic products-shaped graph.

The graph gets random times, drawn once from `--seed`: a node-level `time` (uniform integers in
0..999) for the node loader (each seed's time its node's own) and an edge-level `etime` for the link
loader (`--batches x --batch-size` random edges as the links, `edge_label_time` each edge's time,
one binary negative per link). Rows (each loader in its own subprocess, one at a time, every loader
with pipeline="serial" so that the previous draws can replace the current ones in-process and the
rows differ only by the sampler):
- node-bsp, node-temporal, node-temporal-previous: `--batches` batches of `--batch-size` seeds;
- link-bsp, link-temporal, link-temporal-previous: as many batches of links;
- pyg-temporal: PyG's own temporal NeighborLoader on the same data, which needs pyg-lib: without
  it the row says why it did not run.
Per loader: epoch 1 (warm-up), then epoch 2 timed: batches per second. `--rounds` rounds run every
loader once, the order reversed every other round; the table gives the median and range.

    python -m benchmarks.temporal_loader --scale 0.01 --fanouts 15,10 --batch-size 1024 --batches 8 --rounds 3

Prints a table, writes it and the JSON (default benchmarks/results/temporal_loader_<device>_s<scale>.md/.json).
"""
from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.loader import iterate, loader_arguments

REPO = Path(__file__).resolve().parents[1]
LOADERS = ("node-bsp", "node-temporal", "node-temporal-previous", "link-bsp", "link-temporal",
           "link-temporal-previous", "pyg-temporal")
TIMES = 1000


def parse_args(argv=None):
    p = loader_arguments(__doc__, LOADERS)
    p.add_argument("--batches", type=int, default=8, help="batches an epoch (seeds or links: batches x batch size)")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds: every loader once per round")
    p.add_argument("--loaders", default=",".join(LOADERS), help="which rows, comma-separated")
    return p.parse_args(argv)


def timed_data(args):
    """The synthetic graph as a PyG Data with a node-level `time` and an edge-level `etime`."""
    import torch

    from conveyor.partition.datasets import load_dataset
    graph = load_dataset("synthetic", root=args.data_root, scale=args.scale, seed=args.seed)
    data = graph.to_data()
    g = torch.Generator().manual_seed(args.seed)
    data.time = torch.randint(TIMES, (data.num_nodes,), generator=g)
    data.etime = torch.randint(TIMES, (data.num_edges,), generator=g)
    count = args.batches * args.batch_size
    seeds = torch.randperm(data.num_nodes, generator=g)[:count]
    links = torch.randperm(data.num_edges, generator=g)[:count]
    return data, seeds, links


def make_loader(args, name: str, data, seeds, links):
    """The loader `name` (module doc) and how it runs."""
    fanouts = [int(f) for f in args.fanouts.split(",")]
    if name == "pyg-temporal":
        from torch_geometric.loader import NeighborLoader
        return NeighborLoader(data, fanouts, input_nodes=seeds, batch_size=args.batch_size, time_attr="time",
                              shuffle=True), {"loader": "torch_geometric.loader.NeighborLoader", "workers": 0}
    import conveyor
    if name.endswith("previous"):  # the previous release's draws, in this process (pipeline=serial)
        use_previous_draws()
    common = {"batch_size": args.batch_size, "shuffle": True, "pipeline": "serial", "device": args.device,
              "seed": args.seed}
    timed = not name.endswith("bsp")
    if name.startswith("node"):
        loader = conveyor.NeighborLoader(data, fanouts, input_nodes=seeds, **common,
                                         **({"time_attr": "time"} if timed else {}))
    else:
        label = data.edge_index[:, links]
        loader = conveyor.LinkNeighborLoader(data, fanouts, edge_label_index=label, neg_sampling_ratio=1.0, **common,
                                             **({"time_attr": "etime", "edge_label_time": data.etime[links]}
                                                if timed else {}))
    sampler = "bsp" if not timed else "temporal, " + ("previous draws" if name.endswith("previous") else "sorted rows")
    return loader, {"pipeline": "serial", "sampler": sampler}


def use_previous_draws() -> None:
    """TemporalSpec builds the previous release's sampler (benchmarks/temporal_previous.py)."""
    from benchmarks.temporal_previous import PreviousTemporalSampler
    from conveyor.samplers.temporal import TemporalSpec

    def build(spec, graph, device):
        return PreviousTemporalSampler(graph, spec.fanouts, device, spec.seed, spec.time_attr, spec.strategy,
                                       spec.threads)
    TemporalSpec.build = build


class SamplerClock:
    """The node sampler's own seconds: every sampler the loader builds in this process (serial) has
    its sampling calls timed (a call inside another counts once)."""

    def __init__(self):
        self.seconds, self.depth = 0.0, 0

    def install(self) -> None:
        from conveyor.samplers import SamplerSpec
        from conveyor.samplers.temporal import TemporalSpec
        for spec in (SamplerSpec, TemporalSpec):
            spec.build = self.timing(spec.build)

    def timing(self, build):
        def timed_build(spec, graph, device):
            sampler = build(spec, graph, device)
            for name in ("sample", "sample_many", "sample_at"):
                if callable(getattr(sampler, name, None)):
                    setattr(sampler, name, self.timed(getattr(sampler, name)))
            return sampler
        return timed_build

    def timed(self, method):
        def call(*args, **kwargs):
            self.depth += 1
            start = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                self.depth -= 1
                if self.depth == 0:
                    self.seconds += time.perf_counter() - start
        return call


def worker(args) -> None:
    """One loader's two epochs, in this process; the figures (or why it did not run) to --result."""
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    data, seeds, links = timed_data(args)
    figures = {"loader": args.worker, "torch_threads": torch.get_num_threads(), "load_before": os.getloadavg(),
               "graph": {"nodes": int(data.num_nodes), "edges": int(data.num_edges), "seeds": int(seeds.numel())}}
    clock = SamplerClock()
    try:
        loader, figures["how"] = make_loader(args, args.worker, data, seeds, links)
        clock.install()  # after make_loader: the previous draws' build is timed too
        figures["epoch1"] = iterate(loader, args.device)
        clock.seconds = 0.0
        figures["epoch2"] = iterate(loader, args.device)
        figures["epoch2"]["sample_ms_per_batch"] = 1000 * clock.seconds / max(figures["epoch2"]["batches"], 1)
        getattr(loader, "close", lambda: None)()
    except (ImportError, ValueError) as error:  # PyG's temporal (disjoint) sampling without pyg-lib
        if "pyg-lib" not in str(error):
            raise
        figures["skipped"] = f"{type(error).__name__}: {error}"
    figures["load_after"] = os.getloadavg()
    Path(args.result).write_text(json.dumps(figures))


def run_worker(args, name: str, result: Path) -> dict:
    command = [sys.executable, "-m", "benchmarks.temporal_loader", "--worker", name, "--result", str(result),
               "--scale", str(args.scale), "--data-root", args.data_root, "--device", args.device,
               "--batch-size", str(args.batch_size), "--batches", str(args.batches), "--fanouts", args.fanouts,
               "--seed", str(args.seed), *(["--threads", str(args.threads)] if args.threads else [])]
    subprocess.run(command, check=True, cwd=REPO)
    return json.loads(result.read_text())


def spread(values: list) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "values": values}


def row(name: str, rounds: list) -> str:
    loads = [f["load_before"][0] for f in rounds]
    load = f"{min(loads):.1f}-{max(loads):.1f}"
    if "skipped" in rounds[0]:
        return f"| {name} | not run: {rounds[0]['skipped']} | | | | {load} |"
    warm = spread([f["epoch2"]["batches_per_s"] for f in rounds])
    nodes = statistics.median(f["epoch2"]["nodes_per_batch"] for f in rounds)
    ms = spread([f["epoch2"]["sample_ms_per_batch"] for f in rounds])
    return (f"| {name} | **{warm['median']:.2f}** ({warm['min']:.2f}-{warm['max']:.2f}) | "
            f"{ms['median']:.0f} ({ms['min']:.0f}-{ms['max']:.0f}) | {nodes:.0f} | {rounds[0]['how']['sampler']} | "
            f"{load} |")


def speedups(results: dict) -> dict:
    """Per round, the sorted rows' batches per second over the previous draws' (the same round), and
    the previous draws' sampler time over the sorted rows' (`<kind>-sampler`)."""
    out = {}
    for kind in ("node", "link"):
        now, before = results.get(f"{kind}-temporal"), results.get(f"{kind}-temporal-previous")
        if now and before:
            pairs = [(a["epoch2"], b["epoch2"]) for a, b in zip(now, before)]
            out[kind] = spread([a["batches_per_s"] / b["batches_per_s"] for a, b in pairs])
            out[f"{kind}-sampler"] = spread([b["sample_ms_per_batch"] / a["sample_ms_per_batch"] for a, b in pairs])
    return out


def table(results: dict, args) -> str:
    g = next(iter(results.values()))[0]["graph"]
    said = {k: f"**{v['median']:.1f}x** (range {v['min']:.1f}-{v['max']:.1f})" for k, v in speedups(results).items()}
    return "\n".join([
        f"# Temporal loader benchmark: synthetic scale {args.scale} ({g['nodes']} nodes, {g['edges']} edges), "
        f"{args.batches} batches of {args.batch_size} seeds (or links + as many negatives), fanouts [{args.fanouts}], "
        f"{args.device}, {args.rounds} interleaved rounds", "",
        "| loader | warm batches/s, median (range) | sampler ms per batch, median (range) | nodes per batch | "
        "sampler | load (1 min) before, range |", "|---|---|---|---|---|---|",
        *(row(name, rounds) for name, rounds in results.items()), "",
        *(f"- {kind.replace('-sampler', '')} loader, sorted rows over previous draws, per round"
          + (": the sampler's speed-up (previous ms / sorted ms) " if kind.endswith("sampler") else ": batches/s ")
          + text for kind, text in said.items()),
        "- every conveyor row runs pipeline='serial' (the sampler in the loop's process), so the rows differ by "
        "the sampler only; node loaders: node-level time (each seed's its node's), link loaders: edge-level time",
        "- PyG's temporal sampling needs pyg-lib, which is not installable here: its row says so when it did not run",
        f"- machine: {os.cpu_count()} cores shared with other engineers' jobs, torch threads "
        f"{next(iter(results.values()))[0]['torch_threads']}, {platform.machine()}; each loader in its own "
        f"subprocess, one at a time",
        f"- command: python -m benchmarks.temporal_loader --scale {args.scale} --fanouts {args.fanouts} "
        f"--batch-size {args.batch_size} --batches {args.batches} --device {args.device} --rounds {args.rounds}"
        + (f" --threads {args.threads}" if args.threads else "")])


def interleaved(names: tuple, rounds: int) -> list:
    """(round, loader) in the order they run: every loader once a round, the order reversed every
    other round, so that a drift in the machine's load falls on all of them."""
    return [(r, name) for r in range(rounds) for name in (names if r % 2 == 0 else names[::-1])]


def run_rounds(args, names: tuple, out: Path) -> dict:
    """`--rounds` interleaved rounds; the table printed and written beside the JSON."""
    out.parent.mkdir(parents=True, exist_ok=True)
    results = {name: [] for name in names}
    for round_, name in interleaved(names, args.rounds):
        scratch = out.with_name(f".{out.stem}.{name}.json")
        got = run_worker(args, name, scratch)
        scratch.unlink(missing_ok=True)
        results[name].append(got)
        said = f"{got['epoch2']['batches_per_s']:.2f} batches/s" if "epoch2" in got else "not run"
        print(f"{time.strftime('%H:%M:%S')} round {round_}: {name} {said}", flush=True)
    text = table(results, args)
    print(text)
    out.write_text(json.dumps({"args": vars(args), "results": results, "speedups": speedups(results)}, indent=2))
    out.with_suffix(".md").write_text(text + "\n")
    return results


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.worker:
        return worker(args)
    names = tuple(n for n in args.loaders.split(",") if n)
    unknown = [n for n in names if n not in LOADERS]
    if unknown:
        raise SystemExit(f"--loaders: unknown {unknown}; known: {', '.join(LOADERS)}")
    out = Path(args.out or REPO / "benchmarks" / "results" / f"temporal_loader_{args.device}_s{args.scale}.json")
    run_rounds(args, names, out)


if __name__ == "__main__":
    main()
