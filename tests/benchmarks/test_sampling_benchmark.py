"""benchmarks/sampling.py's comparison of bsp with its previous release (and DGL's sampler, or
a row saying why it was skipped), run small and without triton: the rows say how they ran (the
thread count forced, never "auto"), both bsp releases draw the same batches, and the gather floor
reads the edges bsp draws."""
import importlib.util
import json
import subprocess
import sys

from tests.helpers import REPO


def test_bsp_against_previous_release_and_dgl(tmp_path, synthetic_small, data_root):
    out = tmp_path / "sampling.json"
    # triton made unimportable: only a run asking for the fused sampler imports it.
    cmd = [sys.executable, "-c", "import sys; sys.modules['triton'] = None; from benchmarks.sampling import main; "
           "main(sys.argv[1:])", "--samplers", "bsp,bsp-previous,gather,dgl", "--threads", "1,2",
           "--scale", "0.002", "--data-root", str(data_root), "--fanouts", "5,5", "--batch-sizes", "64,256",
           "--batches", "2", "--rounds", "3", "--draws", "per_hop", "--out", str(out)]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(out.read_text())
    assert report["complete"] and report["meta"]["threads"] == [1, 2]
    assert report["meta"]["pyg_path"] is None  # no pyg row: PyG (and through it torch._dynamo) not imported
    rows = report["rows"]
    assert [(r["threads"], r["batch_size"], r["sampler"]) for r in rows] == [
        (t, b, s) for b in (64, 256) for t in (1, 2) for s in ("bsp", "bsp-previous", "gather", "dgl")]
    for bsp, previous, gather, dgl in zip(rows[::4], rows[1::4], rows[2::4], rows[3::4]):
        assert bsp["available"] and previous["available"] and "load_1min" in bsp
        # The median of 3 interleaved rounds, inside its range.
        assert bsp["rounds"] == previous["rounds"] == 3
        assert bsp["ms_range"][0] <= bsp["ms_per_batch"] <= bsp["ms_range"][1]
        # The same seeds and algorithm, other draws (counter-based streams against torch's): subgraphs of
        # the same size give or take the randomness, so the ratio compares like with like.
        assert abs(previous["nodes_per_batch"] / bsp["nodes_per_batch"] - 1) < 0.02
        assert abs(previous["edges_vs_bsp"] - 1) < 0.02
        assert previous["speedup_vs_bsp"] == bsp["ms_per_batch"] / previous["ms_per_batch"]
        assert previous["bsp_edges_per_s_over_this"] == bsp["edges_per_s"] / previous["edges_per_s"]
        # The floor reads the edges bsp drew for the same seeds (its first draws; bsp's timed rounds draw
        # afresh, as many give or take the randomness), at the thread count forced.
        assert gather["available"] and abs(gather["edges_vs_bsp"] - 1) < 0.02 and gather["threads"] == bsp["threads"]
        # And round by round: bsp's time over the floor's in the same round, median inside its range.
        ratios = sorted(b / g for b, g in zip(bsp["round_ms"], gather["round_ms"]))
        assert gather["bsp_time_over_this_per_round"] == [ratios[1], ratios[0], ratios[2]]
        if importlib.util.find_spec("dgl") is None:  # DGL's rows run in --dgl-python, by default this one
            assert not dgl["available"] and "No module named 'dgl'" in dgl["reason"]
        else:
            assert dgl["available"] and dgl["edges_per_batch"] > 0
    table = out.with_suffix(".md").read_text()
    assert "| 2 |" in table and "bsp-previous" in table and report["meta"]["command"] in table
    assert "- 2 thread(s), batch 256, [5, 5]: bsp's time over gather's in the same round, median " in table
    # A 2-thread bsp row says how many of its batches split (here no hop is large enough to).
    two = [r for r in rows if r["sampler"] == "bsp" and r["threads"] == 2]
    assert all(r["split_counts"]["split"] == 0 == r["split_counts"]["batches"] for r in two)
    # and its time over 1 thread's in the same round (the thread counts' rounds interleave)
    for r in two:
        alone = next(b for b in rows if b["sampler"] == "bsp" and b["threads"] == 1
                     and b["batch_size"] == r["batch_size"])
        ratios = sorted(t / b for t, b in zip(r["round_ms"], alone["round_ms"]))
        assert r["time_over_one_thread_per_round"] == [ratios[1], ratios[0], ratios[2]]
        assert (f"- bsp at 2 threads, batch {r['batch_size']}, {r['fanouts']}: its time over 1 thread's in the same "
                f"round, median {ratios[1]:.2f}x ({ratios[0]:.2f}-{ratios[2]:.2f}x)") in table
    assert not any("time_over_one_thread_per_round" in r for r in rows if r["sampler"] != "bsp" or r["threads"] == 1)
    assert "bsp (split 0 of 0 batches with a hop from 131,072 edges, workers ran 0% of chunks)" in table
    assert ("`dgl` skipped: DGL's interpreter ended" in table) == (importlib.util.find_spec("dgl") is None)


def test_the_benchmark_imports_neither_triton_nor_the_fused_sampler_unless_asked(synthetic_small, data_root, tmp_path):
    """`--samplers bsp,gather` (no fused) runs with nothing of triton or the fused sampler imported,
    whatever is installed; asking for fused is what imports it."""
    code = ("import sys; from benchmarks.sampling import main; main(sys.argv[1:]); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'triton' or 'samplers.fused' in m))")
    cmd = [sys.executable, "-c", code, "--samplers", "bsp,gather", "--threads", "1", "--scale", "0.002",
           "--data-root", str(data_root), "--fanouts", "5,5", "--batch-sizes", "64", "--batches", "1",
           "--rounds", "1", "--out", str(tmp_path / "s.json")]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "[]"
    bsp, gather = json.loads((tmp_path / "s.json").read_text())["rows"]
    # per_node (the default): the floor reads each hop's own draws once, as many as bsp's batches hold.
    assert bsp["draws"] == gather["draws"] == "per_node" and abs(gather["edges_vs_bsp"] - 1) < 0.02
