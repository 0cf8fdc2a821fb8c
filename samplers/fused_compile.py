"""Compile the fused sampler's kernel ahead of time for a GPU architecture, with no GPU, and report
what the compiler made of it: registers, spills, shared memory, and the memory-ordering atomics.

Triton bundles ptxas and cuobjdump, so `triton.compile` gives the real cubin for sm_90 on any
machine. The constexprs come from `samplers.fused.launch_config`, the function a launch uses, so
this compiles exactly the variant a GPU run would. Run it with TRITON_INTERPRET unset (under the
interpreter the kernel is not a compilable function):

    python -m conveyor.samplers.fused_compile                        # sm_90, [15, 10, 5], one batch
    python -m conveyor.samplers.fused_compile --batches 1,8 --json   # also a super-batch of 8, as JSON
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from . import fused_kernel
from .fused import INTERPRETED, floyd_width, launch_config

POINTERS = {"fanouts": "*i32", "state": "*i32"}  # every other pointer is to int64
SIZES = ("N", "B", "Q_CAP", "R_CAP", "E_STRIDE", "N_CAP", "seed", "stream")
# The protocol's atomics (see fused_kernel's docstring): each must be in the PTX.
REQUIRED_PTX = {
    "acquire exchange (take a task)": r"atom\.global\.gpu\.acquire\.exch\.b64",
    "release exchange (publish a task)": r"atom\.global\.gpu\.release\.exch\.b64",
    # An atomic add of 0 whose value is used: triton lowers it to an acquire load.
    "acquire read (waits, termination)": r"(ld|atom)\.global\.gpu\.acquire(\.add\.u64|\.b64)",
    "release add (chunk done, completed)": r"(atom|red)\.global\.gpu\.release\.add\.u64",
}


def compile_kernel(fanouts=(15, 10, 5), max_degree: int = 1 << 20, num_batches: int = 1, arch: int = 90,
                   indices_dtype: str = "i64"):
    """The compiled kernel (triton's CompiledKernel) and the constexprs it was compiled with."""
    if INTERPRETED:
        raise RuntimeError("unset TRITON_INTERPRET to compile the kernel (the interpreter runs it instead)")
    picks = [min(f, max_degree) for f in fanouts]
    meta = launch_config(floyd_width(fanouts, max_degree), picks, num_batches, interpreted=False)
    num_warps = meta.pop("num_warps")
    kernel = fused_kernel.fused_sample_kernel
    signature = {}
    for name in kernel.arg_names:
        if name in meta:
            signature[name] = "constexpr"
        elif name in SIZES:
            signature[name] = "i64"
        else:
            signature[name] = POINTERS.get(name, f"*{indices_dtype}" if name == "indices" else "*i64")
    source = ASTSource(fn=kernel, signature=signature, constexprs=meta)
    compiled = triton.compile(source, target=GPUTarget("cuda", arch, 32), options={"num_warps": num_warps})
    return compiled, {**meta, "num_warps": num_warps}


def _cuobjdump(cubin: bytes, flag: str) -> str:
    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(cubin)
        return subprocess.run([str(tool), flag, str(path)], capture_output=True, text=True, check=True).stdout


def report(compiled, meta: dict) -> dict:
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


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--fanouts", default="15,10,5")
    p.add_argument("--batches", default="1", help="batches per launch (super-batches), comma-separated")
    p.add_argument("--arch", type=int, default=90)
    p.add_argument("--json", action="store_true", help="print a JSON list, one report per batch count")
    args = p.parse_args(argv)
    fanouts = [int(f) for f in args.fanouts.split(",")]
    reports = [report(*compile_kernel(fanouts, num_batches=int(b), arch=args.arch))
               for b in args.batches.split(",")]
    if args.json:
        print(json.dumps(reports))
        return
    for figures in reports:
        for key, value in figures.items():
            print(f"{key:18} {value}")
    if any(r["missing_ptx"] or r["local_bytes"] or r["stack_bytes"] for r in reports):
        sys.exit(1)


if __name__ == "__main__":
    main()
