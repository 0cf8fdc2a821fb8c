"""Sampler benchmark: `fused` (one persistent Triton kernel per batch or super-batch) against `bsp`
(one hop at a time: compiled loops on the CPU, samplers/bsp_compiled.py; torch ops on CUDA),
`bsp-previous` (bsp's release before #28, benchmarks/bsp_previous.py: the same algorithm and
work, its draws from torch's stream), `dgl` (DGL's stock `NeighborSampler`
with int32 ids, in its own interpreter: benchmarks/sampling_dgl.py; a row saying why not where
it cannot run; `dgl-unfused` the same with fused=False, `dgl-int64` with int64 ids) and `pyg`
(PyG's NeighborSampler: without pyg-lib its torch_sparse path, one-element `randint` calls per
node), on the synthetic products-shaped graph. `gather` is the floor a sampler is held to: bsp's
edges of the same batches read from the graph with one `index_select` per hop, nothing drawn.

    python -m benchmarks.sampling --samplers bsp,dgl,dgl-unfused,dgl-int64 --threads 1,2 --scale 0.05 \
        --fanouts 15,10,5 --batch-sizes 256,1024,4096 --dgl-python PATH   # bsp against DGL

For fanouts [15,10,5] and [10,10,10] and batch sizes 1024 and 4096 (or --fanouts and
--batch-sizes) it times --batches batches of each sampler (the same seeds for all), and fused's
super-batch mode (`sample_many` of --super-batch batches per launch). --rounds rounds (default 5)
each time every sampler of a configuration once, one after another, so that a change in the
machine's load touches them all; a row is the median round, with the range. Reported: ms per
batch, sampled edges per second, and the speedup over bsp measured in the same run (bsp ms /
sampler ms), plus the mean nodes and edges per batch as a check that the samplers draw subgraphs
of the same size. Each call's batches are counted and let go before the next call, as a run's
sampler stage lets a batch go once it is in its slot (a round's ten held to its end made bsp 1.04x
slower, every batch's buffers in fresh memory). With --threads 1,2 every configuration runs at
each torch thread count, the thread counts' rounds interleaved too (DGL's interpreter is started at
each): the count is forced on every sampler, never conveyor's threads="auto" (which takes fewer on
a busy machine), and each row records the thread count its sampler really ran at (the sampler's
own, DGL's as its interpreter set it) and the 1-minute load average when it started
(os.getloadavg), as the machine may be shared.

DGL cannot share conveyor's torch (its registry builds stop at torch 2.2): --dgl-python names an
interpreter with dgl 2.1 and torch 2.2 (default: this one, whose `dgl` row then says why it could
not run). It reads the graph saved as .npy and the same seed batches, and times its rounds there.

    python -m benchmarks.sampling --device cuda                   # scale 1.0 (products' size)
    python -m benchmarks.sampling                                 # CPU: a small graph

Only a run that asks for `fused` imports it (and triton), and only one that asks for `pyg` imports
PyG (which imports torch._dynamo, and triton with it): `--samplers bsp,dgl` runs without.

--draws is sampler.draws for conveyor's samplers: per_node (the default, as a run's), each node
drawing once, its batches' edges counted once (hop h of a per_node batch repeats hops 1..h, and the
floor reads each hop's own draws); per_hop, every node again at each hop (bsp-previous's only form).
bsp's threads are its own (samplers/bsp_threads.py: chunks of a hop's draws with their gathers, and
of its relabelling, on a small pool, torch's intra-op threads at 1, the caller alone while the
machine leaves no spare core, a hop below bsp_hop.SPLIT_FROM edges, or a batch of a kind that took
less time unsplit); a row's thread count is the one its sampler ran at, and a bsp row at more than
one says how often it split and how much its workers ran (`split_counts` in the JSON).

On CPU, fused runs under Triton's interpreter (TRITON_INTERPRET=1): its figures measure the
interpreter, not the kernel, and it gets --interpreter-batches batches only. They are marked
"interpreter" in the table and the JSON.

PyG's sampler runs on the CPU (seconds a batch at products scale): it gets --pyg-batches timed
batches a row. The JSON is rewritten after every configuration, so a run cut off by a time limit
keeps every configuration it finished.

Prints a table and writes JSON and a Markdown table (default
benchmarks/results/sampling_<device>_s<scale>.json and .md).
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

import numpy as np
import torch

from benchmarks.bsp_previous import PreviousBSPSampler
from conveyor.core import ConveyorError
from conveyor.samplers import build_sampler
from conveyor.samplers.bsp_hop import SPLIT_FROM

FANOUTS = ([15, 10, 5], [10, 10, 10])
# DGL's rows: the id type of its graph and seeds, and whether its sampler fuses a hop's steps
# (its default; at 2 threads DGL 2.1's fused sampler with int32 ids draws too few edges).
DGL_ROWS = {"dgl": ("int32", True), "dgl-unfused": ("int32", False), "dgl-int64": ("int64", True)}
BATCH_SIZES = (1024, 4096)


def parse_args(argv=None):
    cuda = torch.cuda.is_available()
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda" if cuda else "cpu", help="cpu or cuda")
    p.add_argument("--scale", type=float, default=None,
                   help="synthetic graph scale, 1.0 = products (default: 1.0 on CUDA, 0.005 on CPU)")
    p.add_argument("--batches", type=int, default=None, help="timed batches per sampler (default: 20 on "
                   "CUDA, 5 on CPU)")
    p.add_argument("--interpreter-batches", type=int, default=1,
                   help="timed batches for fused under the interpreter (CPU)")
    p.add_argument("--pyg-batches", type=int, default=None,
                   help="timed batches for pyg, whose sampler runs on the CPU (default: --batches)")
    p.add_argument("--super-batch", type=int, default=None,
                   help="batches per fused launch in super-batch mode (default: 8 on CUDA, 2 on CPU)")
    p.add_argument("--samplers", default="fused,bsp,bsp-previous,dgl,pyg",
                   help="comma-separated: fused, bsp, bsp-previous, gather (the floor), dgl, dgl-unfused, "
                        "dgl-int64, pyg")
    p.add_argument("--fanouts", action="append", default=None,
                   help="fanouts of one configuration, e.g. 15,10,5; repeat for more (default: "
                        + " and ".join(",".join(map(str, f)) for f in FANOUTS) + ")")
    p.add_argument("--batch-sizes", default=None,
                   help="comma-separated (default: " + ",".join(map(str, BATCH_SIZES)) + ")")
    p.add_argument("--data-root", default="data", help="where the synthetic graph is cached")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--draws", default="per_node", choices=["per_node", "per_hop"],
                   help="sampler.draws for conveyor's samplers: per_node (the default: each node draws once, as "
                        "PyG's) or per_hop (every node again at each hop; bsp-previous's only form)")
    p.add_argument("--threads", default=None, help="torch CPU threads, comma-separated for several "
                   "(each configuration at each; default: torch's)")
    p.add_argument("--rounds", type=int, default=5, help="rounds, each timing every sampler once, interleaved; "
                   "a row is the median round (default: 5)")
    p.add_argument("--dgl-python", default=sys.executable, help="the Python that runs the `dgl` row "
                   "(benchmarks/sampling_dgl.py: dgl 2.1 with torch 2.2; default: this one)")
    p.add_argument("--out", default=None, help="JSON path")
    args = p.parse_args(argv)
    gpu = args.device.startswith("cuda")
    args.scale = args.scale if args.scale is not None else (1.0 if gpu else 0.005)
    args.batches = args.batches or (20 if gpu else 5)
    args.pyg_batches = args.pyg_batches or args.batches
    args.super_batch = args.super_batch or (8 if gpu else 2)
    args.fanouts = [[int(f) for f in fanouts.split(",")] for fanouts in args.fanouts] if args.fanouts else FANOUTS
    args.batch_sizes = [int(b) for b in args.batch_sizes.split(",")] if args.batch_sizes else BATCH_SIZES
    args.threads = [int(t) for t in args.threads.split(",")] if args.threads else [torch.get_num_threads()]
    return args


def synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class DGLProcess:
    """DGL's stock `NeighborSampler` with int32 ids (its faster path) in its own interpreter
    (benchmarks/sampling_dgl.py), at one thread count, over the graph saved as .npy: its rounds
    are timed there and interleaved with conveyor's here."""

    def __init__(self, python: str, graph_dir: Path, threads: int, seed: int):
        script = Path(__file__).resolve().parent / "sampling_dgl.py"
        self.process = subprocess.Popen([python, str(script), "--graph", str(graph_dir), "--threads", str(threads),
                                         "--seed", str(seed)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True)
        self.threads = self.reply()["threads"]  # the thread count DGL's interpreter set

    def request(self, **message) -> dict:
        self.process.stdin.write(json.dumps(message) + "\n")
        self.process.stdin.flush()
        return self.reply()

    def reply(self) -> dict:
        line = self.process.stdout.readline()
        if not line:
            error = self.process.stderr.read().strip().splitlines()
            raise ImportError(f"DGL's interpreter ended ({error[-1] if error else 'no message'}); --dgl-python "
                              "names a Python with dgl 2.1 and torch 2.2 (dgl is not a dependency of conveyor)")
        return json.loads(line)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.communicate("\n", timeout=60)


def dgl_timer(dgl, name, fanouts, batches, work: Path):
    """A timer (first, count) -> seconds, nodes, edges for DGL's sampler on these seed batches
    (`dgl`: its process, or why it could not start)."""
    if not isinstance(dgl, DGLProcess):
        raise dgl
    seeds = work / f"seeds_{name}.npy"
    np.save(seeds, torch.stack(batches).numpy())
    ids, fused = DGL_ROWS[name]
    dgl.request(row=name, seeds=str(seeds), fanouts=fanouts, ids=ids, fused=fused)

    def timer(first, count):
        figures = dgl.request(row=name, first=first, count=count)
        return figures["seconds"], figures["nodes"], figures["edges"]
    timer.threads = dgl.threads
    return timer


def gather_timer(graph, fanouts, batches, device, seed, draws):
    """The floor (`gather`): bsp's sampled edges of each batch read from `indices` with no draw, no
    dedup, no relabelling: one `index_select` per hop of the positions bsp drew (computed before;
    per_node: each hop's own draws, not the earlier hops' repeated in it)."""
    sampler = build_sampler("bsp", graph, fanouts, device=device, seed=seed, draws=draws, threads=1)
    positions = [own_draws(sampler.sample(seeds).edge_pos_per_hop, draws) for seeds in batches]
    indices = graph.indices.to(device)

    def timer(first, count):
        synchronize(device)
        start = time.perf_counter()
        for hops in positions[first:first + count]:
            for pos in hops:
                indices.index_select(0, pos)
        synchronize(device)
        return (time.perf_counter() - start, 0, sum(p.numel() for hops in positions[first:first + count] for p in hops))
    timer.threads = torch.get_num_threads()
    return timer


def own_draws(positions, draws) -> list:
    """Each hop's own drawn positions (per_node's hop h holds hops 1..h: its tail is its own)."""
    if draws == "per_hop":
        return positions
    return [p[(positions[h - 1].numel() if h else 0):] for h, p in enumerate(positions)]


def local_timer(name, graph, fanouts, batches, device, seed, group, interpreted, draws):
    """A timer (first, count) -> seconds, nodes, edges for one of conveyor's samplers (or bsp's
    previous release, or the gather floor), `group` batches a call, after an untimed call
    (compilation, buffers)."""
    if name == "gather":
        return gather_timer(graph, fanouts, batches, device, seed, draws)
    if name == "bsp-previous":  # it has no threads of its own: it runs at the process's, set by main
        if draws != "per_hop":
            raise ConveyorError("bsp-previous draws per_hop only: run with --draws per_hop to compare it")
        sampler = PreviousBSPSampler(graph, fanouts, device=device, seed=seed)
    else:  # the thread count forced, never "auto" (which picks fewer on a busy machine)
        sampler = build_sampler(name, graph, fanouts, device=device, seed=seed, threads=torch.get_num_threads(),
                                draws=draws)
    sample = sampler.sample_many if group > 1 else (lambda call: [sampler.sample(call[0])])
    if not (name == "fused" and interpreted):  # nothing to compile in the interpreter
        sample(batches[:group])

    def timer(first, count):
        nodes = edges = 0
        synchronize(device)
        start = time.perf_counter()
        for i in range(first, first + count, group):  # each call's batches counted and let go, as a pipeline's stage
            done = sample(batches[i: i + group])  # lets go of one once it is in a slot
            nodes += sum(b.n_id.numel() for b in done)
            edges += sum(sampled_edges(name, b, draws) for b in done)
            del done
        synchronize(device)
        return time.perf_counter() - start, nodes, edges
    timer.threads = getattr(sampler, "threads", torch.get_num_threads())  # the count its calls run at
    timer.split = getattr(sampler, "split", None)  # bsp's own threads: how much its workers ran
    return timer


def sampled_edges(name, batch, draws) -> int:
    # per_node (pyg's only form): hop h holds every edge of hops 1..h (samplers/pyg.py), the last hop has them all.
    return batch.edge_index_per_hop[-1].size(1) if name == "pyg" or draws == "per_node" else batch.num_sampled_edges


def timed_batches(name, interpreted, group, args) -> int:
    count = args.interpreter_batches if interpreted else args.pyg_batches if name == "pyg" else args.batches
    return max(group, count - count % group)  # whole super-batches


def measure(names, graph, fanouts, batches, device, args, dgls, work, interpreted):
    """Rows for one configuration: every sampler (fused twice: single and super-batch) at every
    thread count timed once a round, the rounds interleaved (so that 1 and 2 threads meet the same
    load), each row the median round and the range."""
    rows, timers = [], []
    for threads in args.threads:
        torch.set_num_threads(threads)  # forced on every sampler built now, and again before each of its rounds
        for row, timer in sampler_timers(names, graph, fanouts, batches, device, args, dgls[threads], work,
                                         interpreted):
            rows.append(row)
            if timer is not None:
                timers.append((row, timer, [], threads))
    for _ in range(args.rounds):
        for row, timer, rounds, threads in timers:
            torch.set_num_threads(threads)
            rounds.append(timer(row["group"], row["batches"]))
    for row, timer, rounds, _ in timers:
        if getattr(timer, "split", None) is not None and timer.threads > 1:
            row["split_counts"] = dict(timer.split.counts)  # since it was built (the untimed call too)
        seconds = sorted(r[0] for r in rounds)
        nodes, edges = (sum(r[i] for r in rounds) / len(rounds) for i in (1, 2))  # a round's mean
        median = statistics.median(seconds)
        row.update(rounds=len(rounds), round_ms=[1000 * r[0] / row["batches"] for r in rounds],
                   ms_per_batch=1000 * median / row["batches"],
                   ms_range=[1000 * seconds[0] / row["batches"], 1000 * seconds[-1] / row["batches"]],
                   edges_per_s=edges / median, nodes_per_batch=nodes / row["batches"],
                   edges_per_batch=edges / row["batches"])
    return rows


# Samplers that draw one way only run it whatever --draws says, and their rows say so.
ONLY_DRAWS = {"fused": "per_hop", "pyg": "per_node"}


def sampler_timers(names, graph, fanouts, batches, device, args, dgl, work, interpreted):
    """(row, timer) for each sampler at torch's thread count now; a row saying why, and no timer,
    for one that cannot run."""
    for name in names:
        draws = ONLY_DRAWS.get(name, args.draws)
        for mode, group in [("batch", 1), ("super-batch", args.super_batch)] if name == "fused" else [("batch", 1)]:
            row = {"sampler": name, "mode": mode, "group": group, "fanouts": fanouts, "draws": draws,
                   "batch_size": batches[0].numel(), "interpreter": name == "fused" and interpreted,
                   "threads": torch.get_num_threads(), "load_1min": os.getloadavg()[0]}
            try:
                timer = (dgl_timer(dgl, name, fanouts, batches, work) if name in DGL_ROWS else
                         local_timer(name, graph, fanouts, batches, device, args.seed, group, interpreted,
                                     draws))
            except (ConveyorError, ImportError) as err:
                yield dict(row, available=False, reason=str(err)), None
                continue
            yield dict(row, available=True, batches=timed_batches(name, row["interpreter"], group, args),
                       threads=timer.threads), timer


def start_dgl(args, graph, threads, work: Path):
    """DGL's interpreter at this thread count, over the graph saved once: its process, the reason
    it cannot run, or None when the run has no `dgl` row."""
    if not set(DGL_ROWS) & set(args.samplers.split(",")):
        return None
    graph_dir = work / "graph"
    if not graph_dir.exists():
        graph_dir.mkdir()
        np.save(graph_dir / "indptr.npy", graph.indptr.numpy())
        np.save(graph_dir / "indices.npy", graph.indices.numpy())
    try:
        return DGLProcess(args.dgl_python, graph_dir, threads, args.seed)
    except (ImportError, OSError) as err:
        return ImportError(str(err))


def main(argv=None):
    args = parse_args(argv)
    device = torch.device(args.device)
    from conveyor.partition.datasets import load_dataset
    interpreted = fused_interpreted(device) if "fused" in args.samplers.split(",") else False
    graph = load_dataset("synthetic", root=args.data_root, scale=args.scale, seed=args.seed)
    print(f"graph: synthetic scale {args.scale}: {graph.num_nodes:,} nodes, {graph.num_edges:,} edges; "
          f"device {device}{' (fused under the Triton interpreter)' if interpreted else ''}")

    out = Path(args.out) if args.out else (Path(__file__).resolve().parent / "results" /
                                           f"sampling_{device.type}_s{args.scale:g}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = describe(args, device, graph, interpreted, argv)
    rows = []
    with tempfile.TemporaryDirectory() as work:
        dgls = {threads: start_dgl(args, graph, threads, Path(work)) for threads in args.threads}
        for fanouts, batches in seed_batches(graph, args):  # the JSON after each configuration
            new = measure(args.samplers.split(","), graph, fanouts, batches, device, args, dgls, Path(work),
                          interpreted)
            rows += new
            add_speedups(rows)
            print_rows(new)
            out.write_text(json.dumps({"meta": meta, "rows": rows, "complete": False}, indent=1))
        for dgl in dgls.values():
            if isinstance(dgl, DGLProcess):
                dgl.close()
    print()
    print_table(rows, interpreted and "fused" in args.samplers.split(","))
    meta["load_1min_at_end"] = os.getloadavg()[0]
    out.write_text(json.dumps({"meta": meta, "rows": rows, "complete": True}, indent=1))
    out.with_suffix(".md").write_text(markdown(meta, rows))
    print(f"wrote {out} and {out.with_suffix('.md')}")


def fused_interpreted(device) -> bool:
    """Whether the fused sampler runs under Triton's interpreter (always on CPU tensors). Imported
    only when a run asks for it: the other samplers' rows run without triton."""
    if device.type == "cpu":  # the fused kernel runs on CPU tensors only under Triton's interpreter
        os.environ.setdefault("TRITON_INTERPRET", "1")
    from conveyor.samplers import fused
    return fused.INTERPRETED


def describe(args, device, graph, interpreted, argv) -> dict:
    """How the run ran: the machine, its load, the graph, the settings, the command."""
    command = ["python", "benchmarks/sampling.py"] + (argv if argv is not None else sys.argv[1:])
    return {"device": str(device), "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
            "cpu": platform.processor() or platform.machine(), "cpu_count": os.cpu_count(),
            "threads": args.threads, "load_1min_at_start": os.getloadavg()[0], "torch": torch.__version__,
            "scale": args.scale, "num_nodes": graph.num_nodes,
            "num_edges": graph.num_edges, "fused_interpreted": interpreted, "super_batch": args.super_batch,
            "batches": args.batches, "pyg_batches": args.pyg_batches, "rounds": args.rounds, "draws": args.draws,
            "pyg_path": pyg_path() if "pyg" in args.samplers.split(",") else None,
            "command": " ".join(command)}


def markdown(meta, rows) -> str:
    """The table as Markdown, with how it ran, and a line for each sampler that could not run."""
    lines = [f"# Sampling: synthetic products-shaped graph, scale {meta['scale']:g}", "",
             f"`{meta['command']}`", "",
             f"{meta['num_nodes']:,} nodes, {meta['num_edges']:,} edges; device {meta['device']}, "
             f"{meta['cpu_count']} CPU cores, torch {meta['torch']} at {meta['threads']} thread(s), sampler.draws "
             f"{meta.get('draws', 'per_hop')}; 1-minute load "
             f"{meta['load_1min_at_start']:.1f} at the start, {meta['load_1min_at_end']:.1f} at the end "
             f"(each row's below); {meta['batches']} timed batches a row after one untimed, the median of "
             f"{meta['rounds']} interleaved rounds (range in brackets); DGL's rows: int32 ids, fused (its default) "
             "unless named otherwise" + (f"; PyG's path: {meta['pyg_path']}" if meta["pyg_path"] else "")
             + ". `bsp x` is bsp's sampled edges per second over the row's (PyG draws fewer "
             "edges a batch: each node once), measured back to back at the same thread count. `edges vs bsp`: a "
             "row's sampled edges a batch over bsp's, on the same seeds; far from 100% (pyg aside) the row "
             "did less work than the others, and its time is no comparison.", "",
             "| threads | load | sampler | fanouts | batch | ms/batch (range) | edges/s | bsp x | nodes/batch | "
             "edges/batch | edges vs bsp |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["available"]:
            ratio = f"{r['bsp_edges_per_s_over_this']:.2f}x" if r.get("bsp_edges_per_s_over_this") else "-"
            name = r["sampler"] + (f" {r['mode']} x{r['group']}" if r["group"] > 1 else "") + (
                " (Triton interpreter)" if r["interpreter"] else "") + workers_note(r)
            low, high = r["ms_range"]
            lines.append(f"| {r['threads']} | {r['load_1min']:.1f} | {name} | {r['fanouts']} | "
                         f"{r['batch_size']} | {r['ms_per_batch']:.1f} ({low:.1f}-{high:.1f}) | "
                         f"{r['edges_per_s']:.3g} | {ratio} | "
                         f"{r['nodes_per_batch']:.0f} | {r['edges_per_batch']:.0f} | "
                         f"{r['edges_vs_bsp'] if 'edges_vs_bsp' in r else float('nan'):.0%} |")
    lines += [""] + [f"- {r['threads']} thread(s), batch {r['batch_size']}, {r['fanouts']}: bsp's time over "
                     f"{r['sampler']}'s in the same round, median {r['bsp_time_over_this_per_round'][0]:.2f}x "
                     f"({r['bsp_time_over_this_per_round'][1]:.2f}-{r['bsp_time_over_this_per_round'][2]:.2f}x)"
                     for r in rows if r["available"] and "bsp_time_over_this_per_round" in r]
    lines += [f"- bsp at {r['threads']} threads, batch {r['batch_size']}, {r['fanouts']}: its time over 1 thread's in "
              f"the same round, median {r['time_over_one_thread_per_round'][0]:.2f}x "
              f"({r['time_over_one_thread_per_round'][1]:.2f}-{r['time_over_one_thread_per_round'][2]:.2f}x)"
              for r in rows if "time_over_one_thread_per_round" in r]
    skipped = {r["sampler"]: r["reason"] for r in rows if not r["available"]}
    lines += [""] + [f"- `{name}` skipped: {reason}" for name, reason in skipped.items()]
    return "\n".join(lines) + "\n"


def workers_note(row) -> str:
    """How much of a multi-threaded bsp row its workers did: of its batches with a hop of
    bsp_hop.SPLIT_FROM edges or more, the share that split such hops (the machine's spare cores let
    them, and such batches took less time an edge split: bsp_threads.Splitter.worth_splitting), and
    the share of those chunks the workers ran."""
    counts = row.get("split_counts")
    if not counts:
        return ""
    chunks = counts["caller"] + counts["workers"]
    return (f" (split {counts['batches split']} of {counts['batches']} batches with a hop from {SPLIT_FROM:,} "
            f"edges, workers ran {counts['workers'] / max(chunks, 1):.0%} of chunks)")


def pyg_path() -> str:
    """Which PyG sampling path a `pyg` row ran: pyg-lib's C++ one, or torch_sparse's. Asked only
    when a run has a `pyg` row: importing PyG imports torch._dynamo, and with it triton."""
    try:
        from torch_geometric import typing as pyg
    except ImportError as err:
        return f"PyG not importable ({err})"
    return "pyg-lib" if pyg.WITH_PYG_LIB else "torch_sparse" if pyg.WITH_TORCH_SPARSE else "neither"


def seed_batches(graph, args) -> list:
    """(fanouts, seed batches) per configuration: the same seeds for every sampler, random
    training nodes (all nodes on graphs too small to fill a batch with them), distinct within a batch."""
    train = graph.train_idx if graph.train_idx is not None else torch.arange(graph.num_nodes)
    gen = torch.Generator().manual_seed(args.seed)
    needed = 2 * args.super_batch + max(args.batches, args.interpreter_batches, args.pyg_batches)
    configs = []
    for fanouts in args.fanouts:
        for batch_size in args.batch_sizes:
            pool = train if train.numel() >= batch_size else torch.arange(graph.num_nodes)
            configs.append((fanouts, [pool[torch.randperm(pool.numel(), generator=gen)[:batch_size]]
                                      for _ in range(needed)]))
    return configs


def add_speedups(rows) -> None:
    """Each available row's speed-up over bsp's row of the same configuration and thread count
    (bsp ms / its ms); a bsp row at more threads, its time over bsp's at 1 round by round."""
    for r in rows:
        bsp = same_configuration(rows, r, "bsp", r.get("threads"))
        if r["available"] and bsp:
            r["speedup_vs_bsp"] = bsp["ms_per_batch"] / r["ms_per_batch"]
            r["bsp_edges_per_s_over_this"] = bsp["edges_per_s"] / r["edges_per_s"]  # fair where sizes differ
            r["edges_vs_bsp"] = r["edges_per_batch"] / bsp["edges_per_batch"]  # 1 where the subgraphs match
            if r is not bsp and len(r.get("round_ms", [])) == len(bsp.get("round_ms", [])) > 0:
                # bsp's time over the row's in the same round: the host's drift between rounds cancels out
                r["bsp_time_over_this_per_round"] = per_round_ratio(bsp["round_ms"], r["round_ms"])
        alone = same_configuration(rows, r, "bsp", 1)
        if r["sampler"] == "bsp" and r.get("threads", 1) > 1 and alone and r.get("round_ms") and alone.get("round_ms"):
            # the thread counts' rounds interleave too: the same round's 1-thread time is its baseline
            r["time_over_one_thread_per_round"] = per_round_ratio(r["round_ms"], alone["round_ms"])


def same_configuration(rows, row, sampler, threads):
    """The available row of `sampler` at `threads` with `row`'s fanouts and batch size, or None."""
    return next((b for b in rows if b["sampler"] == sampler and b["available"] and b["fanouts"] == row["fanouts"]
                 and b["batch_size"] == row["batch_size"] and b.get("threads") == threads), None)


def per_round_ratio(times, baseline) -> list:
    """[median, min, max] over rounds of a row's time over another's in the same round."""
    ratios = sorted(t / b for t, b in zip(times, baseline))
    return [statistics.median(ratios), ratios[0], ratios[-1]]


HEAD = (f"{'thr':>3s} {'sampler':12s} {'mode':14s} {'fanouts':13s} {'batch':>5s} {'n':>3s} {'ms/batch':>10s} "
        f"{'edges/s':>10s} {'vs bsp':>7s} {'nodes/b':>9s} {'edges/b':>9s}")


def print_rows(rows):
    for r in rows:
        mode = r["mode"] + (f" x{r['group']}" if r["group"] > 1 else "")
        name = r["sampler"] + ("*" if r["interpreter"] else "")
        if not r["available"]:
            print(f"{r['threads']:3d} {name:12s} {mode:14s} {str(r['fanouts']):13s} {r['batch_size']:5d}  skipped: "
                  f"{r['reason'].split(';')[0]}", flush=True)
            continue
        speedup = f"{r['speedup_vs_bsp']:.2f}x" if r.get("speedup_vs_bsp") else "-"
        print(f"{r['threads']:3d} {name:12s} {mode:14s} {str(r['fanouts']):13s} {r['batch_size']:5d} {r['batches']:3d} "
              f"{r['ms_per_batch']:10.1f} {r['edges_per_s']:10.3g} {speedup:>7s} {r['nodes_per_batch']:9.0f} "
              f"{r['edges_per_batch']:9.0f}", flush=True)


def print_table(rows, interpreted):
    print(HEAD)
    print("-" * len(HEAD))
    print_rows(rows)
    if interpreted:
        print("* fused ran under Triton's CPU interpreter: interpreter figures, not the kernel's speed.")


if __name__ == "__main__":
    main()
