"""Test accuracy with the trainer's dropout (trainer/models/dropout.py, model.fast_dropout=true) against
F.dropout's (model.fast_dropout=false), over several seeds: the two draw different masks, so one
seed's accuracies differ as two seeds' do, and only means over seeds say whether accuracy moved.

    python -m benchmarks.dropout_accuracy --data-root data --seeds 8

Each case is a run of the tests' accuracy checks (tests/trainer/test_training.py: sage on cora, gcn on
pubmed, sage on synthetic at scale 0.01; and model=gat on cora), at seeds 0..N-1, both ways, the
same seed giving the same batches and initial weights both ways. Reported per case: the mean and
standard deviation of the test accuracy each way, and the mean of the per-seed differences with
its standard error. Writes JSON and Markdown (default benchmarks/results/dropout_accuracy_cpu.*).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

import torch

from benchmarks.dropout import write_report
from conveyor.config import load_settings
from conveyor.trainer.run import train

CASES = {"sage on cora": ["data=cora", "model=sage"],
         "gat on cora": ["data=cora", "model=gat"],
         "gcn on pubmed": ["data=pubmed", "model=gcn"],
         "sage on synthetic 0.01": ["data=synthetic", "data.scale=0.01", "model=sage", "trainer.epochs=5",
                                    "trainer.batch_size=256", "trainer.eval_every=5"]}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-root", default="data")
    p.add_argument("--seeds", type=int, default=8)
    p.add_argument("--cases", default=",".join(CASES), help="comma-separated, of: " + ", ".join(CASES))
    p.add_argument("--out", default=None, help="JSON path")
    return p.parse_args(argv)


def accuracy(overrides, data_root, seed: int, fast: bool) -> float:
    with tempfile.TemporaryDirectory() as out:
        settings = load_settings(["trainer.progress=false", "run.device=cpu", f"data.root={data_root}",
                                  f"run.seed={seed}", f"model.fast_dropout={str(fast).lower()}",
                                  f"run.out_dir={out}/run", *overrides])
        return train(settings).final["test_acc"]


def summary(fast: list, slow: list) -> dict:
    diffs = [f - s for f, s in zip(fast, slow)]
    return {"fast": fast, "f_dropout": slow, "fast_mean": statistics.mean(fast), "fast_sd": statistics.stdev(fast),
            "f_dropout_mean": statistics.mean(slow), "f_dropout_sd": statistics.stdev(slow),
            "diff_mean": statistics.mean(diffs), "diff_se": statistics.stdev(diffs) / len(diffs) ** 0.5}


def markdown(meta, rows) -> str:
    lines = ["# Test accuracy: the trainer's dropout against F.dropout", "", f"`{meta['command']}`", "",
             f"Seeds 0..{meta['seeds'] - 1} each way; CPU, {meta['cpu_count']} cores, torch {meta['torch']} at "
             f"{meta['threads']} threads; 1-minute load {meta['load_1min_at_start']:.1f} at the start, "
             f"{meta['load_1min_at_end']:.1f} at the end. Accuracy in points (percent).", "",
             "| case | fast: mean ± sd | F.dropout: mean ± sd | fast - F.dropout (mean ± se) |",
             "|---|---|---|---|"]
    for name, r in rows.items():
        lines.append(f"| {name} | {100 * r['fast_mean']:.2f} ± {100 * r['fast_sd']:.2f} | "
                     f"{100 * r['f_dropout_mean']:.2f} ± {100 * r['f_dropout_sd']:.2f} | "
                     f"{100 * r['diff_mean']:+.2f} ± {100 * r['diff_se']:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    args = parse_args(argv)
    results = Path(__file__).resolve().parent / "results"
    out = Path(args.out) if args.out else results / "dropout_accuracy_cpu.json"
    meta = {"cpu_count": os.cpu_count(), "torch": torch.__version__, "threads": torch.get_num_threads(),
            "seeds": args.seeds, "load_1min_at_start": os.getloadavg()[0],
            "command": " ".join(["python", "benchmarks/dropout_accuracy.py"]
                                + (argv if argv is not None else sys.argv[1:]))}
    rows = {}
    for name in args.cases.split(","):
        runs = {fast: [accuracy(CASES[name], args.data_root, seed, fast) for seed in range(args.seeds)]
                for fast in (True, False)}
        rows[name] = summary(runs[True], runs[False])
        print(f"{name}: fast {rows[name]['fast_mean']:.4f}, F.dropout {rows[name]['f_dropout_mean']:.4f}, "
              f"difference {rows[name]['diff_mean']:+.4f} ± {rows[name]['diff_se']:.4f}", flush=True)
    write_report(out, meta, {"cases": rows}, lambda: markdown(meta, rows))


if __name__ == "__main__":
    main()
