"""Pipeline benchmark: epoch time of pipeline=serial versus pipeline=async on the synthetic
products-shaped graph, beside each stage's time when it runs alone.

- serial / async: --epochs training epochs (no evaluation) through the real batch sources; the
  first epoch (process start-up, warm-up) is reported apart, the others averaged;
- stages alone, in one process over one epoch's batches: the sampler alone, the loader alone over
  pre-sampled batches, the trainer alone over pre-gathered batches. Their sum is what serial
  costs; the slowest of them is the best a perfect pipeline can do;
- overlap efficiency: async epoch time / slowest stage alone (1.0 is perfect overlap);
- IPC overhead per batch (copying batches into and out of the shared slots) and its share of an
  iteration; peak memory of all processes (sum of RSS, and of PSS, which counts shared pages once);
- bytes written into the pipeline's slots per batch over the bytes the batch holds (n_id, edges,
  x, y, measured here on the trainer's side): 1.0 when each byte is written once (the pipeline's
  BatchCost.slot_bytes; absent from pipelines that do not count them, e.g. older code);
- on CUDA (--device cuda: sampler fused, cache degree): async with and without MPS (a private MPS
  control daemon started for the run, with its own pipe and log directories, and quit after; no
  card setting changes), and the GPU utilisation over the epochs (NVML, or nvidia-smi sampling).

Every mode runs in its own subprocess, so CUDA contexts, MPS and memory figures do not mix.

    python -m benchmarks.pipeline --scale 0.02 --device cpu --epochs 3
    python -m benchmarks.pipeline --scale 1.0 --device cuda --epochs 3

Prints a table, writes it and the JSON (default benchmarks/results/pipeline_<device>_s<scale>.md
and .json).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scale", type=float, default=0.02, help="synthetic graph scale (1.0 = products)")
    p.add_argument("--data-root", default=os.environ.get("CONVEYOR_DATA_ROOT", "data"))
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    p.add_argument("--epochs", type=int, default=3, help="training epochs per mode (>= 2)")
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--fanouts", default="15,10,5")
    p.add_argument("--model", default="sage")
    p.add_argument("--sampler", default=None, help="default: fused on CUDA, bsp on CPU")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="JSON path")
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)  # internal: one mode
    p.add_argument("--result", default=None, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def modes_for(device: str) -> list[str]:
    return ["serial", "async", "async_mps"] if device == "cuda" else ["serial", "async"]


def overrides(args, mode: str) -> list[str]:
    sampler, cache = args.sampler or ("fused" if args.device == "cuda" else "bsp"), "degree"
    pipeline = "serial" if mode in ("serial", "stages") else "async"
    out = [f"pipeline={pipeline}", f"sampler={sampler}", f"cache={cache}", "data=synthetic",
           f"data.scale={args.scale}", f"data.root={args.data_root}", f"data.seed={args.seed}",
           f"model={args.model}", f"sampler.fanouts=[{args.fanouts}]", f"run.device={args.device}",
           f"trainer.batch_size={args.batch_size}", f"run.seed={args.seed}", "trainer.progress=false"]
    if mode == "async":
        out.append("pipeline.mps.enabled=false")
    elif mode == "async_mps":
        out.append("pipeline.mps.enabled=true")
    return out


def compose(overrides_: list[str]):
    """The run's settings for these overrides, as launch.py builds them."""
    from conveyor.config import load_settings
    return load_settings(overrides_)


# -- measuring ----------------------------------------------------------------------------------

class Monitor:
    """Samples, in a thread: the memory of this process and all its children, and the GPU's
    utilisation (NVML if pynvml is installed, else nvidia-smi)."""

    def __init__(self, device: str, every_s: float = 0.25):
        self.device, self.every_s = device, every_s
        self.peak_rss = self.peak_pss = 0
        self.gpu: list[float] = []
        self.recording = False
        self._stop = threading.Event()
        self._gpu_read = self._gpu_reader() if device == "cuda" else None
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self):
        import psutil
        me, tick = psutil.Process(), 0
        while not self._stop.wait(self.every_s):
            full = tick % 4 == 0  # PSS reads /proc/*/smaps: slower, so every fourth sample
            tick += 1
            rss = pss = 0
            for proc in [me] + me.children(recursive=True):
                try:
                    info = proc.memory_full_info() if full else proc.memory_info()
                    rss, pss = rss + info.rss, pss + getattr(info, "pss", 0)
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    pass
            self.peak_rss = max(self.peak_rss, rss)
            if full:
                self.peak_pss = max(self.peak_pss, pss)
            if self._gpu_read is not None and self.recording:
                value = self._gpu_read()
                if value is not None:
                    self.gpu.append(value)

    def _gpu_reader(self):
        import torch
        index = torch.cuda.current_device()
        try:
            import pynvml
            pynvml.nvmlInit()
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            return lambda: float(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu)
        except Exception:  # no pynvml (or no NVML through it): ask nvidia-smi
            def smi():
                try:
                    out = subprocess.run(["nvidia-smi", f"--id={index}", "--query-gpu=utilization.gpu",
                                          "--format=csv,noheader,nounits"], capture_output=True,
                                         text=True, timeout=5).stdout
                    return float(out.strip().splitlines()[0])
                except Exception:
                    return None
            return smi

    def close(self) -> dict:
        self._stop.set()
        self._thread.join()
        gpu = sum(self.gpu) / len(self.gpu) if self.gpu else None
        return {"peak_rss_bytes": self.peak_rss, "peak_pss_bytes": self.peak_pss,
                "gpu_util_percent": gpu, "gpu_samples": len(self.gpu)}


def setup(args, mode):
    import torch

    from conveyor.partition.datasets import load_configured
    from conveyor.trainer.models.sampled import build_model
    cfg = compose(overrides(args, mode))
    graph = load_configured(cfg.data)
    device = torch.device(args.device)
    torch.manual_seed(args.seed)
    model = build_model(cfg.model, graph.x.size(1), int(graph.num_classes), len(cfg.sampler.fanouts)).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.trainer.lr)
    return cfg, graph, device, model, optimizer


def epoch_batches(args, graph, epoch):
    from conveyor.loader.seeds import STREAM_SAMPLER, epoch_seed_batches, stream_seed
    return (epoch_seed_batches(graph.train_idx, args.batch_size, args.seed, epoch),
            stream_seed(args.seed, epoch, STREAM_SAMPLER))


def run_mode(args, mode: str) -> dict:
    """--epochs training epochs through the serial or the async batch source."""
    import torch

    from conveyor.pipeline.batch import synchronize
    from conveyor.trainer.loop.epoch import train_epoch
    from conveyor.trainer.run import build_batch_source
    monitor = Monitor(args.device)
    cfg, graph, device, model, optimizer = setup(args, mode)
    source = build_batch_source(cfg, graph, device)
    epochs, batches, warm, held = [], 0, None, BatchBytes()
    try:
        for epoch in range(1, args.epochs + 1):
            monitor.recording = epoch > 1
            seeds, sampler_seed = epoch_batches(args, graph, epoch)
            start = time.perf_counter()
            stats = train_epoch(model, optimizer, held.count(source.run(seeds, sampler_seed), epoch > 1),
                                len(seeds), False)
            synchronize(device)
            epochs.append({"epoch": epoch, "time_s": time.perf_counter() - start, "loss": stats["loss"]})
            batches = len(seeds)
            if epoch == 1 and hasattr(source, "monitor"):  # AsyncBatches
                warm = dict(source.monitor.totals)  # the pipeline's figures count from here
        pipeline = steady_pipeline_stats(source, warm) if warm is not None else None
    finally:
        source.close()
    result = {"mode": mode, "epochs": epochs, "batches_per_epoch": batches, "held": held.per_batch(),
              "first_epoch_s": epochs[0]["time_s"],
              "epoch_s": sum(e["time_s"] for e in epochs[1:]) / max(len(epochs) - 1, 1),
              "pipeline": pipeline, "threads": torch.get_num_threads()}
    result.update(monitor.close())
    return result


class BatchBytes:
    """The bytes the batches hold, as the trainer gets them: n_id and edges, x and y."""

    def __init__(self):
        self.batches = self.graph = self.features = 0

    def count(self, batches, counting: bool):
        for pb in batches:
            if counting:
                b = pb.batch
                self.batches += 1
                self.graph += sum(t.numel() * t.element_size() for t in [b.n_id, *b.edge_index_per_hop])
                self.features += pb.x.numel() * pb.x.element_size() + pb.y.numel() * pb.y.element_size()
            yield pb

    def per_batch(self) -> dict:
        n = max(self.batches, 1)
        return {"graph_bytes": self.graph / n, "feature_bytes": self.features / n,
                "bytes": (self.graph + self.features) / n}


def steady_pipeline_stats(source, warm: dict) -> dict:
    """AsyncBatches' figures over the epochs after the first (start-up, and the first use of
    every shared buffer, which the kernel has to page in)."""
    t = {k: source.monitor.totals[k] - warm[k] for k in warm}
    n, wall = max(t["batches"], 1), max(t["wall_s"], 1e-9)
    return {"batches": t["batches"], "ipc_s_per_batch": t["ipc_s"] / n,
            "ipc_fraction": t["ipc_s"] / wall, "trainer_wait_fraction": t["trainer_wait_s"] / wall,
            "iteration_s": wall / n, "sample_s_per_batch": t["sample_s"] / n,
            "gather_s_per_batch": t["gather_s"] / n, "train_s_per_batch": t["train_s"] / n,
            "slot_bytes_per_batch": t["slot_bytes"] / n if "slot_bytes" in t else None,
            "first_epoch": {"ipc_s_per_batch": warm["ipc_s"] / max(warm["batches"], 1),
                            "trainer_wait_s": warm["trainer_wait_s"]},
            "limits": dict(source.monitor.pace.limits), "mps_percent": dict(source.mps.percentages)}


def timed(fn, items, threads: int, device):
    """`fn` over `items` after one warm-up call (kernel compilation, allocator), with as many torch
    threads as the stage has in the pipeline: the outputs and the seconds they took."""
    import torch

    from conveyor.pipeline.batch import synchronize
    trainer_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        fn(items[0])
        synchronize(device)
        start = time.perf_counter()
        out = [fn(item) for item in items]
        synchronize(device)
        return out, time.perf_counter() - start
    finally:
        torch.set_num_threads(trainer_threads)


def run_stages(args) -> dict:
    """Each stage alone over one epoch's batches (epoch 2's, after a warm-up on epoch 1's)."""
    import torch

    from conveyor.cache import CacheSpec
    from conveyor.pipeline.batch import BatchCost, PreparedBatch, device_labels, seed_labels, synchronize
    from conveyor.samplers import SamplerSpec
    from conveyor.trainer.loop.epoch import train_epoch
    cfg, graph, device, model, optimizer = setup(args, "stages")
    stage_threads = compose(overrides(args, "async")).pipeline.stage_threads
    sampler = SamplerSpec.of(cfg.sampler, args.seed, device).build(graph, device)
    cache = CacheSpec(cfg.cache, cfg.run.seed).build(graph, device)
    seeds, sampler_seed = epoch_batches(args, graph, 2)
    sampler.manual_seed(sampler_seed)
    sampled, sample_s = timed(lambda s: sampler.sample(s).to(device), seeds, stage_threads, device)
    labels = device_labels(graph.y, device)
    gathered, gather_s = timed(lambda b: (cache.gather(b.n_id), seed_labels(labels, b)), sampled, stage_threads,
                               device)
    prepared = [PreparedBatch(b, x, y, BatchCost()) for b, (x, y) in zip(sampled, gathered)]
    train_epoch(model, optimizer, prepared[:1], 1, False)  # warm-up
    synchronize(device)
    start = time.perf_counter()
    train_epoch(model, optimizer, prepared, len(prepared), False)
    synchronize(device)
    return {"mode": "stages", "batches": len(seeds), "sampler_s": sample_s, "loader_s": gather_s,
            "trainer_s": time.perf_counter() - start, "stage_threads": stage_threads,
            "trainer_threads": torch.get_num_threads()}


# -- orchestration ------------------------------------------------------------------------------

class MPSUnavailable(Exception):
    """The private MPS daemon did not start (its reason in the message)."""


class PrivateMPS:
    """An MPS control daemon of our own (own pipe and log directories), quit on exit. Raises
    MPSUnavailable, with the daemon's own words, when it does not start (a VM may not allow it)."""

    def __enter__(self):
        self.pipe, self.logs = tempfile.mkdtemp(prefix="mps-pipe-"), tempfile.mkdtemp(prefix="mps-log-")
        self.env = {**os.environ, "CUDA_MPS_PIPE_DIRECTORY": self.pipe, "CUDA_MPS_LOG_DIRECTORY": self.logs}
        try:
            proc = subprocess.run(["nvidia-cuda-mps-control", "-d"], env=self.env, timeout=30,
                                  capture_output=True, text=True)
        except (OSError, subprocess.TimeoutExpired) as err:
            self._clean()
            raise MPSUnavailable(f"nvidia-cuda-mps-control -d: {err}")
        deadline = time.time() + 10
        while proc.returncode == 0 and not (Path(self.pipe) / "control").exists() and time.time() < deadline:
            time.sleep(0.1)
        if not (Path(self.pipe) / "control").exists():
            said = (proc.stderr + proc.stdout).strip() + self._log_tail()
            self._clean()
            raise MPSUnavailable(f"nvidia-cuda-mps-control -d exited {proc.returncode} and no control socket "
                                 f"appeared within 10 s: {said or 'it said nothing'}")
        return self

    def _log_tail(self) -> str:
        log = Path(self.logs) / "control.log"
        return (" | control.log: " + log.read_text()[-400:].strip()) if log.exists() else ""

    def _clean(self):
        shutil.rmtree(self.pipe, ignore_errors=True)
        shutil.rmtree(self.logs, ignore_errors=True)

    def __exit__(self, *exc):
        subprocess.run(["nvidia-cuda-mps-control"], input="quit\n", text=True, env=self.env, timeout=60)
        deadline = time.time() + 30
        while (Path(self.pipe) / "control").exists() and time.time() < deadline:
            time.sleep(0.2)
        self._clean()


def worker(args, mode: str, env=None) -> dict | None:
    with tempfile.TemporaryDirectory() as tmp:
        result = Path(tmp) / "result.json"
        argv = [sys.executable, str(Path(__file__).resolve()), "--worker", mode, "--result", str(result),
                "--scale", str(args.scale), "--data-root", args.data_root, "--device", args.device,
                "--epochs", str(args.epochs), "--batch-size", str(args.batch_size),
                "--fanouts", args.fanouts, "--model", args.model, "--seed", str(args.seed)]
        argv += ["--sampler", args.sampler] if args.sampler else []
        proc = subprocess.run(argv, env=env, cwd=REPO)
        if proc.returncode != 0:
            print(f"benchmark worker {mode!r} failed (exit {proc.returncode}); see its output above")
            return None
        return json.loads(result.read_text())


def summarise(args, results: dict) -> dict:
    stages = results["stages"]
    slowest = max(stages["sampler_s"], stages["loader_s"], stages["trainer_s"])
    serial = results["serial"]["epoch_s"]
    summary = {"stage_sum_s": stages["sampler_s"] + stages["loader_s"] + stages["trainer_s"],
               "slowest_stage_s": slowest, "serial_overlap_efficiency": serial / slowest}
    for mode in [m for m in modes_for(args.device)[1:] if m in results]:
        r = results[mode]
        written = r["pipeline"].get("slot_bytes_per_batch")
        summary[mode] = {"epoch_s": r["epoch_s"], "speedup_vs_serial": serial / r["epoch_s"],
                         "overlap_efficiency": r["epoch_s"] / slowest,
                         "ipc_ms_per_batch": 1e3 * r["pipeline"]["ipc_s_per_batch"],
                         "ipc_fraction_of_iteration": r["pipeline"]["ipc_fraction"],
                         "bytes_written_per_batch": written,
                         "bytes_held_per_batch": r["held"]["bytes"],
                         "bytes_written_ratio": None if written is None else written / r["held"]["bytes"],
                         "trainer_wait_fraction": r["pipeline"]["trainer_wait_fraction"],
                         "peak_rss_vs_serial": r["peak_rss_bytes"] / max(results["serial"]["peak_rss_bytes"], 1),
                         "mps_percent": r["pipeline"]["mps_percent"]}
    return summary


def table(args, results: dict, summary: dict) -> str:
    stages = results["stages"]
    lines = [f"pipeline benchmark: synthetic scale {args.scale}, {args.device}, batch {args.batch_size}, "
             f"fanouts [{args.fanouts}], {results['serial']['batches_per_epoch']} batches/epoch, "
             f"{os.cpu_count()} CPU cores",
             f"stages alone (one epoch): sampler {stages['sampler_s']:.2f}s, loader {stages['loader_s']:.2f}s, "
             f"trainer {stages['trainer_s']:.2f}s; sum {summary['stage_sum_s']:.2f}s, slowest "
             f"{summary['slowest_stage_s']:.2f}s (threads: stages {stages['stage_threads']}, trainer "
             f"{stages['trainer_threads']})", ""]
    header = f"{'mode':<10} {'epoch s':>8} {'vs serial':>9} {'overlap':>8} {'IPC ms/b':>9} {'IPC %':>6} " \
             f"{'written':>8} {'wait %':>7} {'peak RSS':>9} {'peak PSS':>9} {'GPU %':>6} {'1st epoch s':>11}"
    lines += [header, "-" * len(header)]
    for mode in [m for m in modes_for(args.device) if m in results]:
        r = results[mode]
        s = summary.get(mode, {})
        gpu = "-" if r.get("gpu_util_percent") is None else f"{r['gpu_util_percent']:.0f}"
        written = "-" if s.get("bytes_written_ratio") is None else f"{s['bytes_written_ratio']:.2f}"
        lines.append(f"{mode:<10} {r['epoch_s']:>8.2f} "
                     f"{s.get('speedup_vs_serial', 1.0):>8.2f}x "
                     f"{s.get('overlap_efficiency', summary['serial_overlap_efficiency']):>8.2f} "
                     f"{s['ipc_ms_per_batch'] if s else 0:>9.2f} "
                     f"{100 * s['ipc_fraction_of_iteration'] if s else 0:>6.2f} "
                     f"{written:>8} {100 * s['trainer_wait_fraction'] if s else 0:>7.1f} "
                     f"{r['peak_rss_bytes'] / 2**30:>8.2f}G {r['peak_pss_bytes'] / 2**30:>8.2f}G {gpu:>6} "
                     f"{r['first_epoch_s']:>11.2f}")
    lines += ["", "overlap = epoch time / slowest stage alone (1.0: perfect overlap); IPC = copying batches "
              "into and out of shared slots; written = bytes written into the slots / bytes the batch "
              "holds (1.0: each byte once; -: not counted by this code); wait = the trainer's time "
              "waiting for a batch. Epochs after the first."]
    return "\n".join(lines)


def main(argv=None):
    args = parse_args(argv)
    if args.worker:
        result = run_stages(args) if args.worker == "stages" else run_mode(args, args.worker)
        Path(args.result).write_text(json.dumps(result))
        return
    if args.epochs < 2:
        raise SystemExit("--epochs must be >= 2 (the first epoch is start-up and warm-up)")
    # A time limit's SIGTERM (benchmarks/gpu/device.py) unwinds like an exception, so PrivateMPS
    # still quits the MPS daemon it started.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    from conveyor.partition.datasets import load_dataset
    load_dataset("synthetic", root=args.data_root, scale=args.scale, seed=args.seed)  # generate once
    out = Path(args.out or REPO / "benchmarks" / "results" / f"pipeline_{args.device}_s{args.scale}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    results, mps = {}, None
    for mode in ["stages", *modes_for(args.device)]:  # the JSON after each mode, should a limit stop the run
        if mode != "async_mps":
            results[mode] = worker(args, mode)
        else:
            mps = run_mps(args, results)
        write_report(args, out, {m: r for m, r in results.items() if r is not None}, mps, complete=False)
    results = {mode: r for mode, r in results.items() if r is not None}
    if not {"stages", "serial"} <= set(results):
        raise SystemExit("the stage or serial measurement failed; nothing to compare against")
    text = write_report(args, out, results, mps, complete=True)
    print("\n" + text)
    print(f"wrote {out} and {out.with_suffix('.md').name}")


def run_mps(args, results: dict) -> dict:
    """async under a private MPS daemon, into results["async_mps"]; MPS's status either way."""
    if shutil.which("nvidia-cuda-mps-control") is None:
        return {"status": "unavailable", "reason": "nvidia-cuda-mps-control is not installed"}
    try:
        with PrivateMPS() as mps:
            results["async_mps"] = worker(args, "async_mps", env=mps.env)
    except MPSUnavailable as err:
        print(f"MPS is unavailable, no MPS run: {err}")
        return {"status": "unavailable", "reason": str(err)}
    return {"status": "ran" if results.get("async_mps") else "failed"}


def write_report(args, out: Path, results: dict, mps: dict | None, complete: bool) -> str:
    """The JSON (and, once complete, the table beside it); returns the table."""
    summary = summarise(args, results) if {"stages", "serial"} <= set(results) else None
    text = table(args, results, summary) if summary else ""
    if complete:
        out.with_suffix(".md").write_text("```\n" + text + "\n```\n")
    machine = {"cpu_count": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()}
    if args.device == "cuda" and complete:  # CUDA in this process only after the last worker (MPS)
        import torch

        from conveyor.pipeline.mps import detect_mps
        machine["gpu"] = torch.cuda.get_device_name()
        machine["system_mps"] = detect_mps().describe()  # an MPS daemon of the machine's own would serve every mode
    out.write_text(json.dumps({"args": {k: v for k, v in vars(args).items() if k not in ("worker", "result")},
                               "machine": machine, "mps": mps, "complete": complete, "summary": summary,
                               "results": results}, indent=1))
    return text


if __name__ == "__main__":
    main()
