"""Layer-wise against sampled evaluation (trainer.inference): test accuracy and evaluation time.

    python -m benchmarks.evaluation [OVERRIDE ...] [--data NAME[:OVERRIDE,...] ...] [--out PATH]
    e.g. python -m benchmarks.evaluation run.device=cpu --data cora pubmed synthetic:data.scale=0.02

Per dataset, the same run twice, once per `trainer.inference`: evaluation draws from its own random
stream, so both train the same model (checked: the same loss every epoch) and differ only in how
it is evaluated. Sampled evaluation (the training fanouts) is the baseline; the ratio is layer-wise
over sampled mean evaluation time per evaluation. Accuracies: the last evaluation's and the one at
the best validation accuracy (the figure PyG's and OGB's examples report).
"""
from __future__ import annotations

import argparse
import json
import platform
import tempfile
from pathlib import Path

import torch

from conveyor.config import load_settings
from conveyor.trainer.run import train

REPO = Path(__file__).resolve().parent.parent
MODES = ("sampled", "layerwise")  # baseline first


def measure(data: str, overrides: list[str], tmp: Path) -> dict:
    name, _, extra = data.partition(":")
    runs = {}
    for mode in MODES:
        cfg = load_settings([f"data={name}", *[o for o in extra.split(",") if o], "trainer.progress=false",
                              *overrides, f"trainer.inference={mode}", f"run.out_dir={tmp / name / mode}"])
        result = train(cfg)
        evaluated = [e for e in result.history if "eval_time_s" in e]
        runs[mode] = {"test_acc": result.final["test_acc"],
                      "test_acc_at_best_val": result.final["test_acc_at_best_val"],
                      "eval_time_s": sum(e["eval_time_s"] for e in evaluated) / len(evaluated),
                      "evaluations": len(evaluated), "losses": [e["loss"] for e in result.history]}
    same_training = runs["sampled"].pop("losses") == runs["layerwise"].pop("losses")
    return {"data": data, **{f"{mode}_{k}": v for mode in MODES for k, v in runs[mode].items()},
            "time_ratio": runs["layerwise"]["eval_time_s"] / runs["sampled"]["eval_time_s"],
            "same_training": same_training}


def table(rows) -> str:
    lines = ["| data | test acc sampled | test acc layerwise | at best val sampled | at best val layerwise "
             "| eval s sampled (baseline) | eval s layerwise | ratio |", "|---" * 8 + "|"]
    for r in rows:
        lines.append(f"| {r['data']} | {r['sampled_test_acc']:.4f} | {r['layerwise_test_acc']:.4f} | "
                     f"{r['sampled_test_acc_at_best_val']:.4f} | {r['layerwise_test_acc_at_best_val']:.4f} | "
                     f"{r['sampled_eval_time_s']:.3f} | {r['layerwise_eval_time_s']:.3f} | "
                     f"{r['time_ratio']:.2f}x |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", nargs="+", default=["cora", "pubmed", "synthetic"])
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "evaluation_cpu.json")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        rows = [measure(data, args.overrides, Path(tmp)) for data in args.data]
    report = {"machine": platform.platform(), "torch": torch.__version__, "threads": torch.get_num_threads(),
              "overrides": args.overrides, "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1))
    args.out.with_suffix(".md").write_text(caption(report) + table(rows) + "\n")
    print(table(rows))


def caption(report: dict) -> str:
    return (f"Layer-wise against sampled evaluation, the same trained model (SAGE, each dataset's "
            f"YAML), {report['machine']}, {report['threads']} threads, overrides "
            f"{' '.join(report['overrides'])}. Eval s: mean seconds per evaluation (val and test).\n\n")


if __name__ == "__main__":
    main()
