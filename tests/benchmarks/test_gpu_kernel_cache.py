"""The fused kernel's carried Triton compile cache (benchmarks/gpu/kernel_cache.py), without a GPU:

- a variant compiled here for sm_90 the way `--prepare` compiles it (stand-ins of the launch's
  arguments through Triton's own binder), packed, unpacked on another path as the GPU machine's
  `env` step does (its key matched), is what a launch finds: `JITFunction.warmup` with the real
  arguments, on a driver that reports an sm_90 GPU, takes it from the cache (Triton's listener
  says cache_hit) instead of compiling. Here that is the local Triton on both sides; `--prepare`
  compiles with the GPU image's Triton (3.6.0) under Python 3.12 (benchmarks/gpu/README.md);
- a key that differs in any field leaves the cache empty and says which field;
- on CPU the cache is not used at all (the interpreter runs the kernel).
"""
import json
import os
import subprocess
import sys

import pytest

from benchmarks.gpu import kernel_cache
from benchmarks.gpu.common import Context
from conveyor.samplers import fused
from tests.helpers import REPO

LAUNCH_PATH = r"""
import json, os, shutil, sys
from pathlib import Path
import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.runtime import driver
from benchmarks.gpu import kernel_cache
from conveyor.partition.datasets.synthetic import generate
from conveyor.samplers import fused_kernel
from conveyor.samplers.fused_compile import _Binding

here, there = Path(sys.argv[1]), Path(sys.argv[2])
graph = generate(scale=0.002, seed=0)
graph.edge_attrs["w"] = torch.rand(graph.num_edges)
sampler = _Binding(graph, [15, 10, 5], seed=0, weight_attr="w")  # the weighted variant, one batch
args, meta = sampler._launch_args(sampler._capacities([1]), *sampler._upload([torch.zeros(1, dtype=torch.long)], [1]),
                                  1, 0)
entry = {"label": "weighted x1", "args": [kernel_cache.stand_in(a) for a in args], "meta": meta}
record = kernel_cache.compile_all([entry], here)  # as --prepare does, into `here`
archive = kernel_cache.pack(here, here.parent)
manifest_entry = {"file": archive.name, "key": {f: record[f] for f in (*kernel_cache.KEY_FIELDS, "prefix")}}
decision = kernel_cache.decide(manifest_entry, here.parent, kernel_cache.key(90), there)  # the device's env step
shutil.rmtree(here)  # only the unpacked copy is left to be found


class SM90:  # what JITFunction.run asks of the active driver before it compiles or looks up
    def get_current_device(self):
        return 0

    def get_current_stream(self, device):
        return 0

    def get_current_target(self):
        return GPUTarget("cuda", 90, 32)


hits = []
os.environ["TRITON_CACHE_DIR"] = str(there)  # as the suite's children get it
triton.knobs.compilation.listener = lambda **info: hits.append(info["cache_hit"])
driver.set_active(SM90())
kernel = fused_kernel.fused_sample_kernel.warmup(*args, grid=(1,), **meta)  # a launch's own key and lookup
print(json.dumps({"decision": decision, "hits": hits, "hash": kernel.hash, "compiled": record["variants"][0]["hash"],
                  "refused": record["refused"]}))
"""


def test_a_carried_cache_on_another_path_is_what_a_launch_finds(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # compiled, not interpreted
    env["PYTHONPATH"] = str(REPO)
    here, there = tmp_path / "prepared" / "triton-cache", tmp_path / "device" / "triton-cache"
    here.parent.mkdir()
    done = subprocess.run([sys.executable, "-c", LAUNCH_PATH, str(here), str(there)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    decision = found["decision"]
    assert decision["status"] == "carried" and decision["kernels"] == 1 and found["refused"] == []
    assert "key matched" in decision["summary"] and "sm_90" in decision["summary"]
    assert found["hits"] == [True] and found["hash"] == found["compiled"]  # looked up, not compiled
    group = json.loads(next(there.glob(f"*/{kernel_cache.KERNEL_GROUP}")).read_text())
    assert all(path.startswith(str(there)) for path in group["child_paths"].values())  # relocated


KEY = {"triton": "3.6.0", "triton_build": "bd4757a49ddb4e61", "ptxas": "Cuda compilation tools, release 12.8, V12.8.93",
       "capability": 90, "env": []}


@pytest.mark.parametrize("field, value", [("triton", "3.5.1"), ("triton_build", "0" * 16), ("capability", 100),
                                          ("ptxas", "Cuda compilation tools, release 13.0, V13.0.88"),
                                          ("env", [["TRITON_DEFAULT_FP_FUSION", "0"]])])
def test_a_key_that_differs_in_any_field_leaves_the_kernels_to_compile_there(tmp_path, field, value):
    entry = {"file": kernel_cache.ARCHIVE, "key": {**KEY, "prefix": "/elsewhere"}}  # never opened
    decision = kernel_cache.decide(entry, tmp_path, {**KEY, field: value}, tmp_path / "cache")
    assert decision["status"] == "compiled here" and kernel_cache.kernels(tmp_path / "cache") == 0
    assert decision["differs"] == [f"{field}: {KEY[field]} carried vs {value} here"]
    assert "carried cache not used" in decision["summary"]


def test_a_failed_key_probe_or_nothing_carried_compiles_there(tmp_path):
    entry = {"file": kernel_cache.ARCHIVE, "key": {**KEY, "prefix": "/elsewhere"}}
    decision = kernel_cache.decide(entry, tmp_path, {"error": "timed out after 30 s"}, tmp_path / "cache")
    assert decision["status"] == "compiled here" and "the key probe failed: timed out" in decision["differs"][0]
    assert kernel_cache.decide(None, tmp_path, KEY, tmp_path / "cache")["status"] == "compiled here"


def test_on_cpu_the_cache_is_not_used_but_its_probe_runs(tmp_path):
    ctx = Context("cpu", True, "cpu-tiny", tmp_path, tmp_path)
    decision = kernel_cache.use(ctx)
    assert decision["status"] == "not used" and "TRITON_CACHE_DIR" not in ctx.env()
    assert set(decision["device_key"]) == set(kernel_cache.KEY_FIELDS) and decision["device_key"]["capability"] == 90


def test_the_gpu_tests_variants_are_recorded_as_a_gpu_binds_them(tmp_path):
    """record_variants.py, while a fused CPU test runs under the interpreter, records its launches
    with the compiled kernel's constexprs (the GPU test of the same name launches those)."""
    out = tmp_path / "variants.json"
    env = {**os.environ, "TRITON_INTERPRET": "1", "GPU_SUITE_VARIANTS": str(out)}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p",
                           "benchmarks.gpu.record_variants", "-m", "not gpu",
                           "tests/samplers/test_fused_sampler.py", "-k",
                           "test_a_fanout_of_0_draws_nothing_at_that_hop"], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:]
    recorded = json.loads(out.read_text())
    assert sorted(e["meta"]["WEIGHTED"] for e in recorded) == [False, True]  # the test's two kernels, once each
    for entry in recorded:
        assert entry["meta"]["L"] == 3 and entry["meta"]["maxnreg"] == fused.MAX_REGISTERS  # not interpreted
        assert all(a["aligned"] for a in entry["args"] if isinstance(a, dict))  # as a launch binds them
