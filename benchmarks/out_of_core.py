"""Out-of-core benchmark: SAGE 3x256 [15,10,5], batch 1024, a fixed number of training batches on
`data=synthetic_papers` (float16 features on disk), inside a memory cgroup smaller than the files,
against the same run at a scale whose files fit in memory, PyG's `NeighborLoader` on the same
files, the trace-optimal static cache of the host tier's size, and the disk's own bandwidth.

Rows, each run in its own process inside a child memory cgroup (v1, under this process's own;
`--cgroup`, default 16GiB), whose peak anonymous memory (rss + shmem of memory.stat, polled every
0.2 s) is reported:
- `conveyor-ooc`: `--scale` (1.0 = papers100M's 111M nodes), `trainer.max_batches=--batches`, the
  pipeline `--pipeline`; the cache as its defaults choose it (cache.host_capacity=auto: a host
  tier where the features do not fit). The epoch's figures: batches/s, the share of rows each tier
  served, bytes read from disk.
- `conveyor-ooc-async`: the same as conveyor-ooc with `pipeline=async`, whatever `--pipeline`.
- `conveyor-mem`: the same at `--in-memory-scale`, whose files fit (auto: no host tier).
- `pyg-ooc`, `pyg-mem`: PyG's `NeighborLoader` the documented way on the same files: `x` an
  np.memmap (torch.from_numpy), the CSC as a `SparseTensor` over the mapped `indptr` and the
  indices (PyG's samplers take int64 indices only: that one copy, 8 bytes an edge, is the reason
  it may not run at a scale), PyG's stock `GraphSAGE`, the same number of batches. A row that
  cannot run says why (its error, or the cgroup's OOM kill).
Rounds (`--rounds`) are interleaved, each starting one row later; figures are the median and the
range over rounds, written after every row (a run stopped early keeps what it measured). The load
average (1 min) is recorded before each run. A pyg row waits (15 min at most) for the shared
machine to have its cgroup's limit available, else is skipped and said so; its process is the OOM
killer's first choice should the machine run out all the same.

Also: the trace-optimal static cache (the `optimal` policy: the rows the measured batches read
most, as many as the host tier held) and Belady's dynamic optimum with the same room
(`cache/optimum.py`) on the same batches, re-sampled in this process (or read from `--trace`,
recorded beside the rows by `--record-trace`); and the
disk's random-read bandwidth (O_DIRECT 4 KiB preads at random offsets of x.npy, `--io-threads`
threads, 5 s) against what the loader read from disk per second of the epoch.

    python -m benchmarks.out_of_core --scale 1.0 --in-memory-scale 0.05 --batches 300 --rounds 2

Writes benchmarks/results/out_of_core_s<scale>.md and .json.
"""
from __future__ import annotations

import argparse
import json
import mmap
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ROWS = ("conveyor-ooc", "conveyor-ooc-async", "conveyor-mem", "pyg-ooc", "pyg-mem")
FANOUTS = [15, 10, 5]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scale", type=float, default=1.0, help="the out-of-core scale (1.0: papers100M's size)")
    p.add_argument("--in-memory-scale", type=float, default=0.05, help="a scale whose files fit in memory")
    p.add_argument("--pyg-scale", type=float, default=None, help="pyg-ooc's scale (default --scale)")
    p.add_argument("--data-root", default=os.environ.get("CONVEYOR_DATA_ROOT", "/work/data"))
    p.add_argument("--data", default="synthetic_papers", help="the dataset (a mapped one: its .npy files)")
    p.add_argument("--batches", type=int, default=300)
    p.add_argument("--pyg-batches", type=int, default=None,
                   help="the PyG rows' batch count (default --batches): fewer where its batches are slow")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--rows", default=",".join(ROWS))
    p.add_argument("--cgroup", default="16GiB", help="the memory limit of the out-of-core rows")
    p.add_argument("--mem-cgroup", default=None,
                   help="the memory limit of the -mem rows (default --cgroup); give the same --in-memory-scale "
                        "as --scale and a limit above its files for the same graph served from memory")
    p.add_argument("--pyg-cgroup", default=None,
                   help="the memory limit of pyg-ooc (default --cgroup): its int64 copy of the indices needs more")
    p.add_argument("--pipeline", default="async", choices=("async", "serial"))
    p.add_argument("--io-threads", type=int, default=4)
    p.add_argument("--host-capacity", default="auto", help="cache.host_capacity of the conveyor rows")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None)
    p.add_argument("--trace", default=None,
                   help="an .npz of conveyor-ooc's batches' n_id: read if it exists, else written once sampled")
    p.add_argument("--record-trace", action="store_true",
                   help="only sample conveyor-ooc's batches into --trace (run beside the rows to save time)")
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    p.add_argument("--result", default=None, help=argparse.SUPPRESS)
    p.add_argument("--worker-scale", type=float, default=None, help=argparse.SUPPRESS)
    return p.parse_args(argv)


# -- the rows, each in its own process ------------------------------------------------------------

def overrides(args, scale: float, out_dir: str) -> list:
    return [f"data={args.data}", f"data.scale={scale}", f"data.root={args.data_root}", "model=sage",
            "model.hidden=256", f"sampler.fanouts=[{','.join(map(str, FANOUTS))}]", "trainer.batch_size=1024",
            f"trainer.max_batches={args.batches}", "trainer.eval_batch_size=1024", "trainer.epochs=1",
            "trainer.progress=false", "run.device=cpu",
            f"run.seed={args.seed}", f"pipeline={args.pipeline}", f"cache.io_threads={args.io_threads}",
            f"cache.host_capacity={args.host_capacity}", f"run.out_dir={out_dir}"]


def conveyor_worker(args, scale: float) -> dict:
    """One epoch of `--batches` batches through conveyor's trainer (no evaluation: only training's
    batches are timed); the epoch's record and the host tier's size from the run's log."""
    from conveyor.config import load_settings
    from conveyor.trainer.context import LocalContext
    from conveyor.trainer.run import start_run, train_one_epoch
    # (TensorBoard's writer thread may still append as the folder goes: its error is not the row's)
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as out:
        settings = load_settings(overrides(args, scale, out))
        start = time.perf_counter()
        run = start_run(settings, LocalContext(settings))
        started = time.perf_counter() - start
        record = train_one_epoch(run, 1)
        cache = getattr(run.source.source, "cache", None)  # serial: in this process
        host = getattr(cache, "host", None)
        run.source.close()
        log = (Path(out) / "run.log").read_text()  # async: the loader stage's start-up line says it
    said = re.search(r"host tier ([\d,]+) nodes", log)
    host_nodes = host.static if host is not None else int(said.group(1).replace(",", "")) if said else 0
    return {**record, "start_s": started, "host_nodes": host_nodes,
            "batches_per_s": record["batches"] / record["epoch_time_s"], "sampler": settings.sampler.name,
            "pipeline": settings.pipeline.name, "num_nodes": run.graph.num_nodes}


def dataset_folder(args, scale: float) -> Path:
    """The mapped dataset's folder at `scale` (built by conveyor's loader if missing)."""
    from conveyor.config import load_settings
    from conveyor.partition.datasets import load_configured
    settings = load_settings(overrides(args, scale, tempfile.mkdtemp()), check_machine=False)
    graph = load_configured(settings.data)
    from conveyor.core.file_maps import file_maps, file_offset
    return Path(file_offset(file_maps(), graph.x)[0]).parent


def pyg_worker(args, scale: float) -> dict:
    """PyG's NeighborLoader on the same files: x an np.memmap, the CSC a SparseTensor over the
    mapped indptr (indices widened to int64: PyG's samplers take no int32), stock GraphSAGE."""
    import numpy as np
    import torch
    import torch.nn.functional as F
    from torch_geometric.data import Data
    from torch_geometric.loader import NeighborLoader
    from torch_geometric.nn import GraphSAGE
    from torch_sparse import SparseTensor
    folder = dataset_folder(args, scale)
    load = lambda name: torch.from_numpy(np.load(folder / f"{name}.npy", mmap_mode="r"))  # noqa: E731
    x, y, indptr, train_idx = load("x"), load("y"), load("indptr"), load("train_idx")
    meta = json.loads((folder / "meta.json").read_text())
    n = int(meta["num_nodes"])
    adj_t = SparseTensor(rowptr=indptr, col=load("indices").long(), sparse_sizes=(n, n), is_sorted=True,
                         trust_data=True)
    data = Data(x=x, y=y, adj_t=adj_t, num_nodes=n)
    torch.manual_seed(args.seed)
    # As PyG's users run it: one worker process beside training (the machine has 2 cores).
    loader = NeighborLoader(data, num_neighbors=FANOUTS, batch_size=1024, input_nodes=train_idx, shuffle=True,
                            num_workers=1)
    model = GraphSAGE(x.size(1), 256, len(FANOUTS), int(meta["num_classes"]))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.003)
    start, count = time.perf_counter(), 0
    for batch in loader:
        out = model(batch.x.float(), batch.adj_t)[:batch.batch_size]
        loss = F.cross_entropy(out, batch.y[:batch.batch_size].long())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        count += 1
        if count == args.batches:
            break
    seconds = time.perf_counter() - start
    return {"batches": count, "epoch_time_s": seconds, "batches_per_s": count / seconds, "num_nodes": n}


def run_worker(args) -> None:
    scale = args.worker_scale
    result = conveyor_worker(args, scale) if args.worker.startswith("conveyor") else pyg_worker(args, scale)
    Path(args.result).write_text(json.dumps(result))


# -- a child memory cgroup, and its peak anonymous memory -------------------------------------------

def own_cgroup() -> Path:
    line = next(line for line in Path("/proc/self/cgroup").read_text().splitlines() if ":memory:" in line)
    return Path("/sys/fs/cgroup/memory") / line.split(":", 2)[2].lstrip("/")


def anonymous_bytes(group: Path) -> int:
    stat = dict(line.split() for line in (group / "memory.stat").read_text().splitlines())
    return int(stat.get("total_rss", 0)) + int(stat.get("total_shmem", 0))


def join(group: Path, first_to_kill: bool) -> None:
    """Enter the child cgroup; `first_to_kill`: be the first process the kernel's OOM killer takes
    should the shared machine (not only the cgroup) run out, never someone else's (a row that may
    take most of the machine: pyg-ooc's int64 indices)."""
    (group / "cgroup.procs").write_text(str(os.getpid()))
    if first_to_kill:
        Path("/proc/self/oom_score_adj").write_text("1000")


def in_cgroup(command: list, limit: int, timeout: float, first_to_kill: bool = False) -> dict:
    """Run `command` in a new child memory cgroup limited to `limit` bytes; its exit code, output
    tail, peak anonymous memory and whether the cgroup's OOM killer acted."""
    group = own_cgroup() / f"conveyor-bench-{os.getpid()}-{time.monotonic_ns()}"
    group.mkdir()
    try:
        (group / "memory.limit_in_bytes").write_text(str(limit))
        enter = lambda: join(group, first_to_kill)  # noqa: E731
        peak, done = [0], threading.Event()

        def poll():
            while not done.wait(0.2):
                peak[0] = max(peak[0], anonymous_bytes(group))

        watcher = threading.Thread(target=poll, daemon=True)
        watcher.start()
        proc = subprocess.run(command, preexec_fn=enter, capture_output=True, text=True, timeout=timeout, cwd=REPO)
        done.set()
        watcher.join()
        oom = "oom_kill 1" in (group / "memory.oom_control").read_text() or proc.returncode == -9
        return {"rc": proc.returncode, "tail": (proc.stdout + proc.stderr)[-3000:], "peak_anon_bytes": peak[0],
                "max_usage_bytes": int((group / "memory.max_usage_in_bytes").read_text()), "oom_killed": oom}
    finally:
        for _ in range(50):
            try:
                group.rmdir()
                break
            except OSError:
                time.sleep(0.1)


def row_scale(args, row: str) -> float:
    if row.startswith("conveyor-ooc"):
        return args.scale
    return args.in_memory_scale if row.endswith("-mem") else args.pyg_scale or args.scale


def run_row(args, row: str, limit: int) -> dict:
    scale = row_scale(args, row)
    with tempfile.NamedTemporaryFile(suffix=".json") as result:
        batches = args.pyg_batches if row.startswith("pyg") and args.pyg_batches else args.batches
        command = [sys.executable, "-m", "benchmarks.out_of_core", "--worker", row, "--worker-scale", str(scale),
                   "--result", result.name, "--batches", str(batches), "--data-root", args.data_root,
                   "--data", args.data, "--host-capacity", args.host_capacity,
                   "--pipeline", "async" if row.endswith("-async") else args.pipeline,
                   "--io-threads", str(args.io_threads), "--seed", str(args.seed)]
        load = os.getloadavg()[0]
        outcome = in_cgroup(command, limit, timeout=3600, first_to_kill=row.startswith("pyg"))
        figures = json.loads(Path(result.name).read_text() or "{}") if outcome["rc"] == 0 else {}
    print(f"{row} s{scale}: rc {outcome['rc']}, {figures.get('batches_per_s', 0):.2f} batches/s, peak anon "
          f"{outcome['peak_anon_bytes'] / 2**30:.2f} GiB", flush=True)
    return {"row": row, "scale": scale, "load_1min": load, **outcome, **figures}


# -- the trace-optimal cache and the disk's own bandwidth ---------------------------------------------

def trace_optimal(args, host_nodes: int) -> dict:
    """The same batches as conveyor-ooc's (its seed, plan and sampler), re-sampled here: the share
    of their rows that a cache of `host_nodes` rows would serve at best, static (the rows they read
    most) and dynamic (Belady's MIN, warm: `cache/optimum.py`)."""
    import numpy as np
    import torch

    from conveyor.cache.optimum import belady_hits, static_optimum_hits
    from conveyor.config import load_settings
    from conveyor.loader.seeds import EpochPlan
    from conveyor.partition.datasets import load_configured
    from conveyor.pipeline.batch import reseed
    from conveyor.samplers import SamplerSpec
    settings = load_settings(overrides(args, args.scale, tempfile.mkdtemp()), check_machine=False)
    graph = load_configured(settings.data)
    sampler = SamplerSpec.of(settings.sampler, args.seed, "cpu").build(graph, torch.device("cpu"))
    plan = EpochPlan(graph.train_idx, 1024, args.seed)
    reseed(sampler, plan.sampler_seed(1))
    saved = Path(args.trace) if args.trace else None
    if saved is not None and saved.exists():  # recorded beforehand (`--record-trace`), the same batches
        with np.load(saved) as arrays:
            trace = [arrays[f"b{i}"] for i in range(min(args.batches, len(arrays.files)))]
    else:
        trace = [sampler.sample(graph.train_idx[positions]).n_id.numpy().astype(np.int64)
                 for positions in plan.positions(1)[:args.batches]]
        if saved is not None:
            part = saved.with_name(f"{saved.stem}.{os.getpid()}.part.npz")
            np.savez(part, **{f"b{i}": b for i, b in enumerate(trace)})
            part.rename(saved)
    total = sum(len(b) for b in trace)
    belady = int(belady_hits(trace, host_nodes).sum())
    return {"rows_read": total, "distinct_rows": len(np.unique(np.concatenate(trace))), "host_nodes": host_nodes,
            "optimal_static_hit_ratio": static_optimum_hits(trace, host_nodes) / max(total, 1),
            "belady_hit_ratio": belady / max(total, 1)}


def disk_bandwidth(path: Path, threads: int, seconds: float = 5.0, block: int = 4096) -> dict:
    """Random 4 KiB reads with O_DIRECT (no page cache) at random offsets of `path`, by `threads`
    threads for `seconds`: the disk's random-read rate (fio's randread, in Python)."""
    size = path.stat().st_size // block * block
    counts = []

    def reader(seed: int):
        fd, buffer, rng, n = os.open(path, os.O_RDONLY | os.O_DIRECT), mmap.mmap(-1, block), random.Random(seed), 0
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            os.preadv(fd, [buffer], rng.randrange(size // block) * block)
            n += 1
        os.close(fd)
        counts.append(n)

    workers = [threading.Thread(target=reader, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    reads = sum(counts)
    return {"threads": threads, "block_bytes": block, "seconds": seconds, "iops": reads / seconds,
            "bytes_per_s": reads * block / seconds}


# -- the report -------------------------------------------------------------------------------------

def median_range(values) -> str:
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    return f"{statistics.median(values):.3g} ({min(values):.3g}-{max(values):.3g})"


def summarise(runs: list) -> dict:
    rows = {}
    for row in dict.fromkeys(r["row"] for r in runs):
        mine = [r for r in runs if r["row"] == row]
        ok = [r for r in mine if r["rc"] == 0]
        rows[row] = {"scale": mine[0]["scale"], "runs": len(mine), "ok": len(ok),
                     "batches_per_s": [r["batches_per_s"] for r in ok],
                     "peak_anon_gib": [r["peak_anon_bytes"] / 2**30 for r in mine if r["rc"] is not None],
                     "tiers": {k: [r.get(k) for r in ok] for k in ("device_hit_ratio", "host_hit_ratio",
                                                                   "window_hit_ratio", "disk_ratio")},
                     "disk_bytes_per_s": [r["disk_bytes"] / r["epoch_time_s"] for r in ok if "disk_bytes" in r],
                     "failure": None if ok else (("OOM-killed in the cgroup. " if mine[0]["oom_killed"] else "")
                                                 + last_line(mine[0]["tail"]))}
    return rows


def last_line(text: str) -> str:
    """The last line of a child's output: its error, without the traceback above it."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def table(result: dict) -> str:
    rows, lines = result["rows"], []
    lines.append("| row | scale | batches/s | peak anon GiB | host tier | prefetched | from disk | disk MB/s |")
    lines.append("|---|---|---|---|---|---|---|---|")
    for name, r in rows.items():
        tiers = r["tiers"]
        lines.append(f"| {name} | {r['scale']} | {median_range(r['batches_per_s'])} | "
                     f"{median_range(r['peak_anon_gib'])} | {median_range(tiers['host_hit_ratio'])} | "
                     f"{median_range(tiers['window_hit_ratio'])} | {median_range(tiers['disk_ratio'])} | "
                     f"{median_range([b / 1e6 for b in r['disk_bytes_per_s']])} |")
    for name, r in rows.items():
        if r["failure"]:
            lines.append(f"\n{name} did not run: {r['failure']}")
    return "\n".join(lines)


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.worker:
        return run_worker(args)
    if args.record_trace:
        return print(trace_optimal(args, 0))
    from conveyor.cache.options import parse_bytes
    rows = args.rows.split(",")
    limits = {"ooc": parse_bytes(args.cgroup, "--cgroup"), "mem": parse_bytes(args.mem_cgroup or args.cgroup,
                                                                               "--mem-cgroup"),
              "pyg": parse_bytes(args.pyg_cgroup or args.cgroup, "--pyg-cgroup")}
    result = {"args": vars(args), "limit_bytes": limits["ooc"], "runs": []}
    for round_ in range(args.rounds):
        for row in rows[round_ % len(rows):] + rows[:round_ % len(rows)]:
            limit = limits["mem" if row.endswith("-mem") else "pyg" if row == "pyg-ooc" else "ooc"]
            run = run_row(args, row, limit) if room_for(row, limit) else skipped(args, row, limit)
            result["runs"].append({"round": round_, **run})
            write(args, result)  # after every row: a run stopped early keeps what it measured
            if row == "conveyor-ooc" and run["rc"] == 0 and "optimal" not in result:
                result.update(offline_figures(args, run["host_nodes"]))
                write(args, result)
    print(report(result))


def room_for(row: str, limit: int, wait_s: float = 900) -> bool:
    """Whether the machine (shared) has `limit` bytes available for a row that may take them all
    (pyg-ooc's int64 copy of the indices): waits up to `wait_s` for it, then gives the row up
    rather than push other people's processes into the kernel's OOM killer."""
    import psutil
    if not row.startswith("pyg"):
        return True
    end = time.monotonic() + wait_s
    while psutil.virtual_memory().available < limit + 2**30:
        if time.monotonic() > end:
            return False
        time.sleep(10)
    return True


def skipped(args, row: str, limit: int) -> dict:
    import psutil
    said = (f"not run: the shared machine had {psutil.virtual_memory().available / 2**30:.1f} GiB available, "
            f"under the row's {limit / 2**30:.0f} GiB limit and a GiB to spare, for 15 minutes")
    print(f"{row}: {said}", flush=True)
    return {"row": row, "scale": row_scale(args, row), "load_1min": os.getloadavg()[0], "rc": None, "tail": said,
            "peak_anon_bytes": 0, "max_usage_bytes": 0, "oom_killed": False}


def offline_figures(args, host_nodes: int) -> dict:
    """The disk's own random-read rate, the trace's optima, the files' size (after the first
    conveyor-ooc row, whose host tier sets the optima's capacity)."""
    folder = dataset_folder(args, args.scale)
    return {"disk": [disk_bandwidth(folder / "x.npy", t) for t in (1, args.io_threads)],
            "optimal": trace_optimal(args, host_nodes),
            "files_bytes": sum(f.stat().st_size for f in folder.iterdir())}


def write(args, result: dict) -> None:
    runs = result["runs"]
    result["rows"] = summarise(runs)
    speed = {row: [r["batches_per_s"] for r in runs if r["row"] == row and r["rc"] == 0]
             for row in ("conveyor-ooc", "conveyor-mem", "pyg-ooc")}
    for key, over in (("ooc_over_in_memory", "conveyor-mem"), ("ooc_over_pyg_ooc", "pyg-ooc")):
        if speed["conveyor-ooc"] and speed[over]:
            result[key] = statistics.median(speed["conveyor-ooc"]) / statistics.median(speed[over])
    out = Path(args.out or REPO / "benchmarks" / "results" / f"out_of_core_s{args.scale:g}.json")
    out.write_text(json.dumps(result, indent=1))
    out.with_suffix(".md").write_text(report(result))


def command_line(a: dict) -> str:
    """The command that made a result, from its recorded arguments."""
    optional = [f"--{name.replace('_', '-')} {a[name]}" for name in ("pyg_batches", "pyg_cgroup") if a.get(name)]
    return " ".join([f"python -m benchmarks.out_of_core --scale {a['scale']} --in-memory-scale {a['in_memory_scale']}",
                     f"--batches {a['batches']}", *optional[:1], f"--rounds {a['rounds']} --pipeline {a['pipeline']}",
                     f"--cgroup {a['cgroup']} --mem-cgroup {a.get('mem_cgroup') or a['cgroup']}", *optional[1:],
                     f"--host-capacity {a['host_capacity']} --rows {a['rows']}"])


def rounds_done(result: dict) -> str:
    """The rounds whose every row ran, and of how many, if a run was stopped early."""
    a, runs = result["args"], result["runs"]
    done = len(runs) // len(a["rows"].split(","))
    return str(done) if done == a["rounds"] else f"{done} (of {a['rounds']}: stopped early)"


def report(result: dict) -> str:
    a = result["args"]
    pyg = (f", pyg-ooc in {a['pyg_cgroup']}" if a.get("pyg_cgroup") else "") + "; PyG's loader with 1 worker" + (
        f", {a['pyg_batches']} batches" if a.get("pyg_batches") else "")
    parts = [f"# Out of core: SAGE 3x256 {FANOUTS}, batch 1024, {a['batches']} batches, pipeline={a['pipeline']}, "
             f"each out-of-core row in a {a['cgroup']} memory cgroup, each -mem row in "
             f"{a.get('mem_cgroup') or a['cgroup']}{pyg}", "",
             f"Command: `{command_line(a)}`; median (range) over {rounds_done(result)} interleaved rounds; "
             f"load (1 min) before the runs: {median_range([r['load_1min'] for r in result['runs']])}.", "",
             table(result), ""]
    if "ooc_over_in_memory" in result:
        parts.append(f"Out-of-core over in-memory batches/s: {result['ooc_over_in_memory']:.2f} (goal >= 0.5).")
    if "ooc_over_pyg_ooc" in result:
        parts.append(f"conveyor-ooc over pyg-ooc batches/s: {result['ooc_over_pyg_ooc']:.2f} (goal >= 2).")
    if "optimal" in result:
        o = result["optimal"]
        parts.append(f"Trace-optimal static cache of the host tier's {o['host_nodes']:,} rows on the same batches: "
                     f"{o['optimal_static_hit_ratio']:.3f} of {o['rows_read']:,} rows read ({o['distinct_rows']:,} "
                     f"distinct); the degree-ordered host tier served the share in the table.")
        if "belady_hit_ratio" in o:
            parts.append(f"Belady's dynamic optimum (MIN, warm) with room for the same {o['host_nodes']:,} rows: "
                         f"{o['belady_hit_ratio']:.3f}; the host tier and the look-ahead window together served "
                         f"host + prefetched.")
    for d in result.get("disk", []):
        parts.append(f"Disk, O_DIRECT random 4 KiB reads, {d['threads']} thread(s): {d['iops']:,.0f} IOPS, "
                     f"{d['bytes_per_s'] / 1e6:,.1f} MB/s.")
    if "files_bytes" in result:
        parts.append(f"Dataset files at scale {a['scale']}: {result['files_bytes'] / 2**30:,.1f} GiB.")
    return "\n".join(parts) + "\n"


if __name__ == "__main__":
    main()
