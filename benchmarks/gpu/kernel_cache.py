"""The fused kernel's Triton compile cache, made here for sm_90 and carried to the GPU machine, so
that `check` and `speed` do not spend their minutes compiling: used there only when its key
matches that machine, else the kernels compile there as before (into a fresh cache).

Here (`--prepare`, no GPU): Triton compiles for a target without one. The variants the suite's own
steps launch (the uniform kernel for super-batches of 1 to 64, the WIDE one, the weighted one for
1, 4 and 8: smoke, stress, sanitize and the benchmarks) are bound as a launch binds them: a
FusedSampler on a products-shaped graph builds each launch's arguments (`spec`, with torch, in
this checkout's Python). They are then compiled with the GPU image's Triton (TARGET_TRITON, a
cp312 wheel run by a Python 3.12 here, `compile`), whose binder types stand-ins of those arguments
(dtype and 16-byte alignment are all it reads) exactly as `JITFunction.run` would, so each entry
lands under the hash a launch on the device looks up. The cache goes into the prepared folder as
triton-cache.tar.gz with its key (key.json).

Triton's key for an entry is its own build (version and a hash of its sources and libtriton), the
kernel's source and specialisation, the options, ptxas's version with the GPU's architecture,
and the cache-invalidating environment variables. The key recorded is those that do not depend
on the launch: `triton` (version), `triton_build`, `ptxas` (ptxas version-arch), `capability`,
`env`. There (`use`, in the `env` step): a probe computes the same on the device; the cache is
unpacked into .cache/gpu-suite/triton-cache (its group files' absolute paths rewritten to where
it lies) only when every field matches; else that folder starts empty and says why. Every child
then runs with TRITON_CACHE_DIR there; each step records how many kernels were compiled on the
device during it (cache entries that appeared), so the summary says which happened.

    python -m benchmarks.gpu.kernel_cache spec --out spec.json      # here: the bound launches
    python -m benchmarks.gpu.kernel_cache compile --spec spec.json --cache DIR   # with Triton
    python -m benchmarks.gpu.kernel_cache key [--arch 90]           # this Triton's key (device's)
"""
from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import re
import shutil
import sys
import tarfile
from pathlib import Path

from benchmarks.gpu.common import REPO, TRITON_CACHE, Context, python_json, rel

TARGET_TRITON = "3.6.0"  # the GPU image's (KINDS.md)
ARCH = 90  # H100 and H200
KEY_FIELDS = ("triton", "triton_build", "ptxas", "capability", "env")
ARCHIVE = "triton-cache.tar.gz"
KERNEL_FILE = REPO / "conveyor" / "samplers" / "fused_kernel.py"
KERNEL_GROUP = "__grp__fused_sample_kernel.json"  # one per compiled variant in a Triton cache


# -- here, with torch: the launches to compile ---------------------------------------------------

def variants():
    """(label, graph, fanouts, batch counts, weight_attr) of what the suite launches: stress's
    configs (the smoke and sanitize graphs bind the same: a products-shaped graph with hubs)."""
    from types import SimpleNamespace

    import torch

    from benchmarks.gpu.stress import make_configs
    configs = make_configs(SimpleNamespace(seed=0, tiny=False, batch_counts=(1, 2, 4, 8, 16, 32, 64)), torch)
    counts = {"weighted": (1, 4, 8)}
    return [(name, graph, fanouts, counts.get(name, batches), weight)
            for name, graph, fanouts, batches, _, weight in configs]


def stand_in(arg) -> dict | int:
    """What Triton's binder reads of a launch argument: a tensor's dtype and 16-byte alignment."""
    if isinstance(arg, int):
        return arg
    return {"dtype": str(arg.dtype).removeprefix("torch."), "aligned": arg.data_ptr() % 16 == 0}


def variant_key(entry: dict) -> str:
    """What Triton compiles a variant by: the constexprs, the tensors' dtypes and alignment, and
    each integer's width (every integer argument is in do_not_specialize: its value is not)."""
    kinds = [("i32" if -2**31 <= a < 2**31 else "i64") if isinstance(a, int) else a for a in entry["args"]]
    return json.dumps([kinds, entry["meta"]], sort_keys=True)


def distinct(entries: list[dict]) -> list[dict]:
    found: dict[str, dict] = {}
    for entry in entries:
        found.setdefault(variant_key(entry), entry)
    return list(found.values())


def spec() -> list[dict]:
    """Each distinct variant's launch, as `FusedSampler.sample_many` binds it (no launch)."""
    import torch

    from conveyor.samplers.fused_compile import _Binding
    entries = []
    for label, graph, fanouts, counts, weight in variants():
        sampler = _Binding(graph, list(fanouts), seed=0, weight_attr=weight)
        for count in counts:
            sizes = [1] * count
            seeds = [torch.zeros(1, dtype=torch.long)] * count
            args, meta = sampler._launch_args(sampler._capacities(sizes), *sampler._upload(seeds, sizes), count, 0)
            entries.append({"label": f"{label} x{count}", "args": [stand_in(a) for a in args], "meta": meta})
    return distinct(entries)


def test_variants(out: Path) -> list[dict]:
    """The variants `pytest -m gpu` launches: the fused sampler's CPU tests (the same tests, with
    device="cpu"), run under the interpreter with record_variants.py recording each launch as a
    GPU binds it. Their outcome does not matter here, only their launches."""
    import subprocess

    from benchmarks.gpu.checks import gpu_test_modules
    env = {**os.environ, "TRITON_INTERPRET": "1", "GPU_SUITE_VARIANTS": str(out), "PYTHONPATH": str(REPO)}
    modules = [m for m in gpu_test_modules() if "build_sampler(\"fused\"" in (REPO / m).read_text()
               or "FusedSampler(" in (REPO / m).read_text()]  # those that launch the kernel themselves
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p",
                    "benchmarks.gpu.record_variants", "-m", "not gpu", *modules],
                   cwd=REPO, env=env, capture_output=True, timeout=3600)
    return json.loads(out.read_text()) if out.exists() else []


# -- with the target's Triton (no torch needed): compile, and the key ---------------------------

class _Tensor:
    """A launch argument as Triton's binder sees a tensor."""

    class _Dtype:
        def __init__(self, name: str):
            self.name = name

        def __str__(self):
            return f"torch.{self.name}"

    def __init__(self, dtype: str, aligned: bool):
        self.dtype, self._ptr = self._Dtype(dtype), 1 << 20 if aligned else (1 << 20) + 8

    def data_ptr(self) -> int:
        return self._ptr


def load_kernel():
    """The fused kernel under its own module name, without the package (which imports torch)."""
    name = "conveyor.samplers.fused_kernel"
    if name not in sys.modules:
        spec_ = importlib.util.spec_from_file_location(name, KERNEL_FILE)
        module = importlib.util.module_from_spec(spec_)
        sys.modules[name] = module
        spec_.loader.exec_module(module)
    return sys.modules[name].fused_sample_kernel


def compile_entry(kernel, entry: dict, arch: int = ARCH):
    """Compile one variant for `arch` as `JITFunction.run` would (its binder, options, _pack_args):
    into TRITON_CACHE_DIR, under the hash a launch computes."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, make_backend
    from triton.runtime.jit import create_function_from_signature
    target = GPUTarget("cuda", arch, 32)
    backend = make_backend(target)
    kwargs = {**entry["meta"], "debug": bool(kernel.debug) or triton.knobs.runtime.debug}
    for knob in ("instrumentation_mode", "fpsan_homomorphic_casts"):  # what this Triton's run() passes
        if hasattr(triton.knobs.compilation, knob):
            kwargs[knob] = getattr(triton.knobs.compilation, knob)
    args = [a if isinstance(a, int) else _Tensor(a["dtype"], a["aligned"]) for a in entry["args"]]
    binder = create_function_from_signature(kernel.signature, kernel.params, backend)
    bound, specialization, options = binder(*args, **kwargs)
    options, signature, constexprs, attrs = kernel._pack_args(backend, kwargs, bound, specialization, options)
    return triton.compile(ASTSource(kernel, signature, constexprs, attrs), target=target, options=options.__dict__)


def key(arch: int | None = None) -> dict:
    """This Triton's part of every entry's key, for `arch` (None: the current GPU's)."""
    import triton
    from triton._C.libtriton import get_cache_invalidating_env_vars
    from triton.backends.compiler import GPUTarget
    from triton.compiler import make_backend
    from triton.runtime.cache import triton_key
    if arch is None:
        from triton.runtime import driver
        arch = driver.active.get_current_target().arch
    backend = make_backend(GPUTarget("cuda", arch, 32))
    return {"triton": triton.__version__, "triton_build": hashlib.sha256(triton_key().encode()).hexdigest()[:16],
            "ptxas": backend.hash(), "capability": arch, "env": sorted(get_cache_invalidating_env_vars().items())}


def compile_all(entries: list[dict], cache: Path, arch: int = ARCH) -> dict:
    """Compile every entry into `cache`, each in a process of its own (Triton 3.6 refused some
    variants compiled after others in one process, and compiled each of them alone); key.json
    beside them, naming any variant Triton refused even so (it would fail on the device too)."""
    import subprocess
    import tempfile
    compiled, refused = [], []
    with tempfile.TemporaryDirectory() as scratch:
        for entry in entries:
            one = Path(scratch) / "entry.json"
            one.write_text(json.dumps(entry))
            proc = subprocess.run([sys.executable, "-m", "benchmarks.gpu.kernel_cache", "compile-one", "--entry",
                                   str(one), "--cache", str(cache), "--arch", str(arch)], cwd=REPO, capture_output=True,
                                  text=True, env={**os.environ, "TRITON_CACHE_DIR": str(cache)}, timeout=900)
            lines = proc.stdout.strip().splitlines()
            if proc.returncode == 0 and lines:
                compiled.append({"label": entry["label"], "hash": json.loads(lines[-1])["hash"], "meta": entry["meta"]})
            else:
                error = [line for line in proc.stderr.splitlines() if line.strip() and line.strip() != "^"]
                refused.append({"label": entry["label"], "meta": entry["meta"], "error": (error or [""])[-1][:500]})
            print(f"{entry['label']}: {'compiled' if proc.returncode == 0 else 'REFUSED: ' + refused[-1]['error']}",
                  flush=True)
    record = {**key(arch), "prefix": str(cache.resolve()), "variants": compiled, "refused": refused}
    (cache / "key.json").write_text(json.dumps(record, indent=1))
    return record


def compile_one(entry: dict, cache: Path, arch: int) -> str:
    """One variant into `cache` (this process's only compile); its hash."""
    os.environ["TRITON_CACHE_DIR"] = str(cache)
    os.environ.pop("TRITON_INTERPRET", None)
    return compile_entry(load_kernel(), entry, arch).hash


# -- there: use it, or say why not -------------------------------------------------------------

def mismatch(carried: dict, device: dict) -> list[str]:
    """The key's fields that differ, as 'field: carried here vs there'."""
    return [f"{f}: {carried.get(f)} carried vs {device.get(f)} here" for f in KEY_FIELDS
            if carried.get(f) != device.get(f)]


def relocate(cache: Path, old_prefix: str) -> int:
    """Triton's group files list their members by absolute path: point them at `cache`."""
    moved = 0
    for group in cache.glob("*/__grp__*.json"):
        data = json.loads(group.read_text())
        paths = {name: str(cache / Path(path).relative_to(old_prefix)) if path.startswith(old_prefix) else path
                 for name, path in data.get("child_paths", {}).items()}
        group.write_text(json.dumps({"child_paths": paths}))
        moved += 1
    return moved


def kernels(cache: Path = TRITON_CACHE) -> int:
    """The fused kernel's variants in a Triton cache."""
    return len(list(cache.glob(f"*/{KERNEL_GROUP}"))) if cache.is_dir() else 0


def carried(wheels: Path) -> dict | None:
    """The prepared folder's manifest entry for its cache archive, if it has one."""
    try:
        return json.loads((wheels / "manifest.json").read_text()).get("triton_cache")
    except (OSError, json.JSONDecodeError):
        return None


def use(ctx: Context) -> dict:
    """The `env` step's decision: the carried cache where its key matches this machine, else the
    kernels compile into an empty one here; a summary saying which."""
    code = ("import json, sys; from benchmarks.gpu.kernel_cache import ARCH, key; "
            "print(json.dumps(key(None if sys.argv[1] == 'cuda' else ARCH)))")  # on CPU: the key for sm_90
    here = python_json(ctx, code, ctx.device, timeout=min(60, ctx.step_left() / 2))
    if not ctx.cuda:  # the probe's command line ran; the interpreter needs no cache
        return {"status": "not used", "device_key": here,
                "summary": "no CUDA device: the kernel runs under Triton's interpreter"}
    return decide(carried(ctx.wheels), ctx.wheels, here, TRITON_CACHE)


def decide(entry: dict | None, wheels: Path, here: dict, cache: Path) -> dict:
    """Unpack the carried cache (manifest `entry`, archive in `wheels`) into `cache` when its key
    matches this machine's (`here`); else leave `cache` to the kernels compiled here."""
    cache.mkdir(parents=True, exist_ok=True)  # kept on this machine: a later call reuses what compiled
    before = kernels(cache)
    result = {"cache": rel(cache), "device_key": here, "carried_key": (entry or {}).get("key"),
              "kernels_before": before}
    if entry is None:
        return {**result, "status": "compiled here", "summary": f"nothing carried ({rel(wheels)} has no "
                f"{ARCHIVE}): the kernels compile here ({before} already in {rel(cache)})"}
    recorded = entry["key"]
    differs = ["the key probe failed: " + here["error"][-300:]] if "error" in here else mismatch(recorded, here)
    if differs:
        return {**result, "status": "compiled here", "differs": differs,
                "summary": f"carried cache not used, its key differs ({'; '.join(differs)}): the kernels compile here"}
    with tarfile.open(wheels / entry["file"]) as tar:
        tar.extractall(cache, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    relocate(cache, recorded["prefix"])
    refused = [r["label"] for r in entry.get("refused", [])]
    return {**result, "status": "carried", "kernels": kernels(cache), "refused": entry.get("refused", []),
            "summary": f"carried cache used ({kernels(cache) - before} variants unpacked; key matched: triton "
                       f"{here['triton']}, ptxas {ptxas_release(here['ptxas'])}, sm_{here['capability']})"
                       + (f"; Triton refused to compile {', '.join(refused)} when it was made" if refused else "")}


def ptxas_release(version: str) -> str:
    """ptxas's `-V` text as its release (12.8.93), for the summary."""
    found = re.search(r"V(\d+\.\d+\.\d+)", version or "")
    return found.group(1) if found else str(version)[:40]


def pack(cache: Path, out: Path) -> Path:
    """The cache folder (without Triton's lock files) as out/ARCHIVE."""
    archive = out / ARCHIVE
    with tarfile.open(archive, "w:gz") as tar:
        for path in sorted(cache.rglob("*")):
            if path.is_file() and path.name != "lock":
                tar.add(path, arcname=str(path.relative_to(cache)))
    return archive


# -- here: the whole preparation (prepare.py) --------------------------------------------------

def target_triton() -> Path | str:
    """TARGET_TRITON's cp312 wheel, unpacked under build.BUILD_DIR (downloaded once); or why not."""
    from benchmarks.gpu import build
    site = build.BUILD_DIR / f"triton-{TARGET_TRITON}" / "site"
    if (site / "triton" / "__init__.py").is_file():
        return site
    platforms = [a for p in ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64")
                 for a in ("--platform", p)]
    site.parent.mkdir(parents=True, exist_ok=True)
    wheel = build.pip(["download", "--no-deps", "--only-binary=:all:", "--python-version", "3.12", "--implementation",
                       "cp", *platforms, f"triton=={TARGET_TRITON}"], site.parent)
    if wheel is None:
        return f"no triton=={TARGET_TRITON} wheel for Python 3.12"
    import zipfile
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(site)
    for tool in (site / "triton" / "backends" / "nvidia" / "bin").glob("*"):
        tool.chmod(0o755)  # zip keeps no modes: ptxas and cuobjdump must run
    return site


def build_archive(out: Path, scratch: Path) -> tuple[dict | None, str | None]:
    """Bind the variants here, compile them with TARGET_TRITON under Python 3.12, pack the cache
    into `out`: (its manifest entry, None) or (None, why not)."""
    import subprocess

    from benchmarks.gpu import build, plan
    site, python = target_triton(), build.find_python312()
    if isinstance(site, str) or python is None:
        return None, site if isinstance(site, str) else "no Python 3.12 to run the GPU image's Triton with"
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    spec_file, cache = scratch / "spec.json", scratch / "triton-cache"
    steps = [[sys.executable, "-m", "benchmarks.gpu.kernel_cache", "spec", "--tests", "--out", str(spec_file)],
             [python, "-m", "benchmarks.gpu.kernel_cache", "compile", "--spec", str(spec_file), "--cache", str(cache)]]
    for cmd, paths in zip(steps, ([str(REPO)], [str(site), str(REPO)])):
        proc = subprocess.run(cmd, cwd=REPO, env={**env, "PYTHONPATH": os.pathsep.join(paths)}, capture_output=True,
                              text=True, timeout=1800)
        if proc.returncode != 0:
            return None, f"{' '.join(cmd[1:4])} failed: {proc.stderr.strip()[-800:]}"
    record = json.loads((cache / "key.json").read_text())
    archive = pack(cache, out)
    from benchmarks.gpu.build import digest
    entry = {"file": archive.name, **digest(archive), "key": {f: record[f] for f in (*KEY_FIELDS, "prefix")},
             "variants": [v["label"] for v in record["variants"]], "refused": record["refused"],
             "fused_source": plan.fused_source()["sha256"], "from": f"compiled here with triton {record['triton']}"}
    return entry, None


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="what", required=True)
    spec_ = sub.add_parser("spec")
    spec_.add_argument("--out", type=Path, required=True)
    spec_.add_argument("--tests", action="store_true", help="also the variants the GPU tests launch")
    comp = sub.add_parser("compile")
    comp.add_argument("--spec", type=Path, required=True)
    comp.add_argument("--cache", type=Path, required=True)
    comp.add_argument("--arch", type=int, default=ARCH)
    one = sub.add_parser("compile-one")
    one.add_argument("--entry", type=Path, required=True)
    one.add_argument("--cache", type=Path, required=True)
    one.add_argument("--arch", type=int, default=ARCH)
    sub.add_parser("key").add_argument("--arch", type=int, default=None)
    args = p.parse_args(argv)
    if args.what == "spec":
        recorded = test_variants(args.out.with_name("test-variants.json")) if args.tests else []
        args.out.write_text(json.dumps(distinct(spec() + recorded)))
    elif args.what == "compile-one":
        print(json.dumps({"hash": compile_one(json.loads(args.entry.read_text()), args.cache, args.arch)}))
    elif args.what == "compile":
        shutil.rmtree(args.cache, ignore_errors=True)
        args.cache.mkdir(parents=True)
        print(json.dumps(compile_all(json.loads(args.spec.read_text()), args.cache, args.arch)))
    else:
        print(json.dumps(key(args.arch)))


if __name__ == "__main__":
    main()
