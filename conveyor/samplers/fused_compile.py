"""Compile the fused sampler's kernel ahead of time for a GPU architecture, with no GPU, and report
what the compiler made of it: registers, spills, shared memory, and the memory-ordering atomics.

Triton bundles ptxas and cuobjdump, so `triton.compile` gives the real cubin for sm_90 on any
machine. What is compiled is the variant a run binds: a `FusedSampler` sizes its buffers for a
super-batch of `--batches` batches of `--batch-size` seeds on a products-shaped graph and builds
its launch's arguments (`FusedSampler._launch_args`, as `sample_many` does); Triton's own binder
then types and specialises them for an sm_90 target (a size that fits 32 bits binds as i32,
16-byte aligned pointers as such), and `triton.compile` gets what `JITFunction.run` would hand it.
Run it with TRITON_INTERPRET unset (under the interpreter the kernel is not a compilable function):

    python -m conveyor.samplers.fused_compile                          # sm_90, [15, 10, 5], one batch
    python -m conveyor.samplers.fused_compile --batches 1,4,8 --json   # super-batches too, as JSON
    python -m conveyor.samplers.fused_compile --weighted               # the variant for weight_attr

Exit status 1 when a variant spills or lacks one of the protocol's ordering atomics.
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource, make_backend
from triton.runtime.jit import create_function_from_signature

from conveyor.samplers import fused_kernel
from conveyor.samplers.fused import INTERPRETED, FusedSampler

# The protocol's atomics (see fused_kernel's docstring): each must be in the PTX.
REQUIRED_PTX = {
    "acquire exchange (take a task)": r"atom\.global\.gpu\.acquire\.exch\.b64",
    "release exchange (publish a task)": r"atom\.global\.gpu\.release\.exch\.b64",
    # An atomic add of 0 whose value is used: triton lowers it to an acquire load.
    "acquire read (waits, termination)": r"(ld|atom)\.global\.gpu\.acquire(\.add\.u64|\.b64)",
    "release add (chunk done, completed)": r"(atom|red)\.global\.gpu\.release\.add\.u64",
}


class _Binding(FusedSampler):
    """A FusedSampler on CPU tensors that only builds launch arguments: to Triton's binder they
    stand in for the GPU's (it reads dtypes, 16-byte alignment and integer ranges, not where the
    memory is)."""

    def _check_device(self):
        pass


def bound_launch(fanouts=(15, 10, 5), num_batches: int = 1, batch_size: int = 1024, seed: int = 0,
                 scale: float = 0.002, weighted: bool = False):
    """The arguments and constexprs of a launch of `num_batches` batches, as `sample_many` builds
    them; `weighted`: of the kernel that draws by weight (random edge weights)."""
    from conveyor.partition.datasets.synthetic import generate
    graph = generate(scale=scale, seed=0)  # products-shaped: hubs, so the Floyd tile is as at scale 1
    if weighted:
        graph.edge_attrs["weight"] = torch.rand(graph.num_edges, generator=torch.Generator().manual_seed(0))
    sampler = _Binding(graph, list(fanouts), seed=seed, weight_attr="weight" if weighted else None)
    sizes = [min(batch_size, graph.num_nodes)] * num_batches
    seeds = [torch.randperm(graph.num_nodes)[:size] for size in sizes]
    return sampler._launch_args(sampler._capacities(sizes), *sampler._upload(seeds, sizes), num_batches, 0)


def compile_kernel(fanouts=(15, 10, 5), num_batches: int = 1, arch: int = 90, batch_size: int = 1024,
                   seed: int = 0, weighted: bool = False):
    """The compiled kernel (triton's CompiledKernel), its constexprs and the bound signature."""
    if INTERPRETED:
        raise RuntimeError("unset TRITON_INTERPRET to compile the kernel (the interpreter runs it instead)")
    args, meta = bound_launch(fanouts, num_batches, batch_size, seed, weighted=weighted)
    kernel = fused_kernel.fused_sample_kernel
    target = GPUTarget("cuda", arch, 32)
    backend = make_backend(target)
    kwargs = {**meta, "debug": bool(kernel.debug) or triton.knobs.runtime.debug}  # as JITFunction.run
    if hasattr(triton.knobs.compilation, "instrumentation_mode"):
        kwargs["instrumentation_mode"] = triton.knobs.compilation.instrumentation_mode
    binder = create_function_from_signature(kernel.signature, kernel.params, backend)
    bound, specialization, options = binder(*args, **kwargs)
    options, signature, constexprs, attrs = kernel._pack_args(backend, kwargs, bound, specialization, options)
    compiled = triton.compile(ASTSource(kernel, signature, constexprs, attrs), target=target,
                              options=options.__dict__)
    sizes = {name: kind for name, kind in signature.items() if not kind.startswith("*") and kind != "constexpr"}
    return compiled, meta, sizes


def _cuobjdump(cubin: bytes, flag: str) -> str:
    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(cubin)
        return subprocess.run([str(tool), flag, str(path)], capture_output=True, text=True, check=True).stdout


def report(compiled, meta: dict, sizes: dict) -> dict:
    """Registers, spills (local memory), shared memory, occupancy and the ordering atomics."""
    usage = _cuobjdump(compiled.asm["cubin"], "--dump-resource-usage")
    fields = dict(re.findall(r"(REG|STACK|SHARED|LOCAL):(\d+)", usage))
    sass = _cuobjdump(compiled.asm["cubin"], "--dump-sass")
    ptx = compiled.asm["ptx"]
    registers = int(fields["REG"])
    threads = 32 * meta["num_warps"]
    programs_per_sm = min(65536 // (registers * threads), 2048 // threads)
    return {
        "triton": triton.__version__,
        "meta": meta,
        "size_types": sizes,  # how the launch's integer arguments were bound (i32 where they fit)
        "registers": registers,
        "local_bytes": int(fields["LOCAL"]),  # spills go to local memory
        "stack_bytes": int(fields["STACK"]),
        "shared_bytes": int(fields["SHARED"]),
        "programs_per_sm": programs_per_sm,
        "occupancy": programs_per_sm * threads / 2048,
        "ptx_acquire": len(re.findall(r"\.acquire\.", ptx)),
        "ptx_release": len(re.findall(r"\.release\.", ptx)),
        "sass_membar": len(re.findall(r"\bMEMBAR\b", sass)),
        "sass_instructions": len(re.findall(r"/\*[0-9a-f]{4,}\*/", sass)),
        "missing_ptx": [name for name, pattern in REQUIRED_PTX.items() if not re.search(pattern, ptx)],
    }


def bad(r: dict) -> bool:
    return bool(r["missing_ptx"] or r["local_bytes"] or r["stack_bytes"])


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--fanouts", default="15,10,5")
    p.add_argument("--batches", default="1", help="batches per launch (super-batches), comma-separated")
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--seed", type=int, default=0, help="the sampler's seed (one above 2**31 binds as i64)")
    p.add_argument("--arch", type=int, default=90)
    p.add_argument("--weighted", action="store_true", help="the variant that draws by weight (weight_attr)")
    p.add_argument("--json", action="store_true", help="print a JSON list, one report per batch count")
    args = p.parse_args(argv)
    fanouts = [int(f) for f in args.fanouts.split(",")]
    reports = [report(*compile_kernel(fanouts, int(b), args.arch, args.batch_size, args.seed, args.weighted))
               for b in args.batches.split(",")]
    if args.json:
        print(json.dumps(reports))
    else:
        for figures in reports:
            for key, value in figures.items():
                print(f"{key:18} {value}")
    if any(bad(r) for r in reports):
        sys.exit(1)


if __name__ == "__main__":
    main()
