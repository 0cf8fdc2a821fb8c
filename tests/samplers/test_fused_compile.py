"""The fused kernel as a GPU compiles it, checked with no GPU.

- `-k sm90`: the kernel compiled for sm_90 (Triton bundles ptxas and cuobjdump) exactly as a run
  binds it: a FusedSampler builds a launch's arguments for super-batches of 1, 4 and 8 batches
  (and one WIDE variant, a fanout above every degree), and of the WEIGHTED variant (weight_attr)
  for 1 and 4 batches and WIDE, and Triton's binder types them (sizes as i32). No spills, within
  the register cap, and the release/acquire atomics of its protocol (fused_kernel's docstring) in
  the PTX. It runs in a subprocess because the test session has
  TRITON_INTERPRET=1, under which nothing compiles.
- Compile counts: the variants a GPU launch would compile (Triton's own specialisation: the
  constexprs, argument dtypes, pointer alignment, and integers not excluded by
  do_not_specialize), collected over real `sample` calls with the launch itself left out.
"""
import json
import os
import subprocess
import sys

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import make_backend  # noqa: E402
from triton.runtime.jit import JITFunction, create_function_from_signature  # noqa: E402

from conveyor.samplers import fused, fused_kernel  # noqa: E402
from conveyor.samplers.fused import FusedSampler  # noqa: E402
from tests.helpers import power_law_graph  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def compile_reports(*args):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "-m", "conveyor.samplers.fused_compile", "--json", *args],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    lines = done.stdout.strip().splitlines()
    assert lines and lines[-1].startswith("["), done.stderr[-3000:]
    return json.loads(lines[-1]), done.returncode


def test_sm90_compile_of_what_a_run_binds_has_no_spills_and_the_protocols_atomics():
    default, rc = compile_reports("--batches", "1,4,8")  # one batch; super-batches of 4 (pipeline), 8 (benchmark)
    wide, wide_rc = compile_reports("--fanouts", "15,100000", "--batches", "1")  # WIDE: take-all rows past a tile
    weighted, weighted_rc = compile_reports("--weighted", "--batches", "1,4")
    weighted_wide, weighted_wide_rc = compile_reports("--weighted", "--fanouts", "15,100000", "--batches", "1")
    reports = default + wide + weighted + weighted_wide
    assert [(r["meta"]["WIDE"], r["meta"]["WEIGHTED"]) for r in reports] == \
        [(False, False)] * 3 + [(True, False)] + [(False, True)] * 2 + [(True, True)]
    for r in reports:
        print(f"sm_90, triton {r['triton']}, {r['meta']}, sizes {set(r['size_types'].values())}: "
              f"{r['registers']} registers, {r['shared_bytes']} B shared, {r['programs_per_sm']} programs per SM, "
              f"{r['sass_membar']} MEMBARs")
        assert set(r["size_types"].values()) == {"i32"}, r["size_types"]  # as a launch binds them
        assert r["local_bytes"] == 0 and r["stack_bytes"] == 0, f"the kernel spills: {r}"
        assert r["missing_ptx"] == [], f"ordering atomics missing from the PTX: {r['missing_ptx']}"
        assert r["registers"] <= fused.MAX_REGISTERS and r["programs_per_sm"] >= 3, r  # 3+ programs of 4 warps
        assert r["shared_bytes"] <= 48 * 1024, r
    assert rc == wide_rc == weighted_rc == weighted_wide_rc == 0  # fused_compile's own verdict agrees


class SpecialisationRecorder:
    """Stands in for the kernel: records the key under which Triton would cache each launch's
    compiled variant (the binder a GPU launch runs, for an sm_90 target), and launches nothing."""

    def __init__(self, kernel):
        jit = kernel if isinstance(kernel, JITFunction) else JITFunction(kernel.fn, **kernel.kwargs)
        self.binder = create_function_from_signature(jit.signature, jit.params,
                                                     make_backend(GPUTarget("cuda", 90, 32)))
        self.keys = set()

    def __getitem__(self, grid):
        def launch(*args, **meta):
            _, specialization, options = self.binder(*args, **meta)
            self.keys.add(str(specialization) + str(options))
        return launch


def test_batch_sizes_compile_one_variant_and_super_batches_few(monkeypatch):
    graph = power_law_graph(2000, 20000)
    sampler = FusedSampler(graph, [15, 10, 5], seed=0, deterministic=False, num_programs=2)
    recorder = SpecialisationRecorder(fused_kernel.fused_sample_kernel)
    monkeypatch.setattr(fused.fused_kernel, "fused_sample_kernel", recorder)
    monkeypatch.setattr(fused, "INTERPRETED", False)  # the constexprs a GPU launch picks
    for size in range(1, 1025):  # every batch size from 1 to 1024, one batch per launch
        sampler.sample(torch.arange(size))
    assert len(recorder.keys) == 1, "a batch size compiled its own kernel variant"
    for count in range(2, 65):  # super-batches of 2..64 batches, of uneven sizes
        sampler.sample_many([torch.arange(1 + (7 * b) % 300) for b in range(count)])
    # The batch count is rounded up to a power of two: 1, 2, 3-4, 5-8, ..., 33-64 batches.
    assert len(recorder.keys) == 7, f"{len(recorder.keys)} variants for super-batches of 1..64"
