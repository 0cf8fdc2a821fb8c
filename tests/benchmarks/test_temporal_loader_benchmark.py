"""benchmarks/temporal_loader.py run small: every row (temporal node and link loaders with sorted
rows and with the previous release's draws, bsp without time, PyG's temporal loader or why it did
not run), interleaved rounds with medians and ranges, the load beside each row; the previous
draws and the sorted rows sample the same amount (the same valid sets, drawn afresh)."""
import json
import subprocess
import sys

import torch_geometric.typing as pyg_typing

from tests.helpers import REPO


def test_the_temporal_loader_benchmark_runs_every_row(tmp_path, synthetic_small, data_root):
    out = tmp_path / "temporal.json"
    cmd = [sys.executable, "-m", "benchmarks.temporal_loader", "--scale", "0.002", "--data-root", str(data_root),
           "--fanouts", "5,5", "--batch-size", "64", "--batches", "2", "--rounds", "1", "--threads", "1",
           "--out", str(out)]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(out.read_text())
    results = report["results"]
    assert list(results) == ["node-bsp", "node-temporal", "node-temporal-previous", "link-bsp", "link-temporal",
                             "link-temporal-previous", "pyg-temporal"]
    for name, rounds in results.items():
        assert len(rounds) == 1 and all("load_before" in r for r in rounds)
        if name == "pyg-temporal" and not pyg_typing.WITH_PYG_LIB:
            assert all("pyg-lib" in r["skipped"] for r in rounds)
            continue
        assert all(r["epoch2"]["batches"] == 2 and r["epoch2"]["batches_per_s"] > 0 for r in rounds)
    for kind in ("node", "link"):
        speedup = report["speedups"][kind]
        assert speedup["min"] <= speedup["median"] <= speedup["max"] and len(speedup["values"]) == 1
        now, before = (results[f"{kind}-temporal{s}"][0]["epoch2"]["nodes_per_batch"] for s in ("", "-previous"))
        assert abs(now / before - 1) < 0.1  # the same valid sets: as many nodes, give or take the draws
    table = out.with_suffix(".md").read_text()
    assert "pyg-lib" in table and "| node-temporal-previous |" in table and "--rounds 1" in table
