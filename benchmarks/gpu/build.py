"""Here, for `--prepare` when no shared prepared folder fits: torch_scatter and torch_sparse as
cp312 wheels BUILT HERE, CPU-only (PyG's NeighborLoader samples on the CPU), against torch 2.11.0,
the GPU image's torch (its PyPI build is the same CUDA 13.0 build). Only the optional `pyg`
command uses them. The build runs in a Python 3.12 virtualenv of its own under
~/.cache/conveyor/gpu-prepare/ (torch 2.11 with its CUDA libraries: ~4.6 GB, downloaded once),
and its wheels are kept there, so a second --prepare, from any checkout, only copies them. They
are checked before they are packed: they load into that torch and sample a small graph, and they
need no newer glibc/libstdc++ than Ubuntu 22.04 has."""
from __future__ import annotations

import glob
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

from benchmarks.gpu.common import capture

TARGET_TORCH = "2.11.0"  # the GPU image's torch (KINDS.md: 2.11.0+cu130)
BUILT = [("torch_scatter", "2.1.2"), ("torch_sparse", "0.6.18")]  # torch_sparse imports torch_scatter
# The build's Python 3.12 venv and its wheels, kept between runs and shared by every checkout.
BUILD_DIR = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "conveyor" / "gpu-prepare"
# The newest symbol versions a built extension may need: Ubuntu 22.04's glibc and libstdc++
# (GCC 12), older than any image with Python 3.12 and torch 2.11.
MAX_SYMBOLS = {"GLIBC": (2, 35), "GLIBCXX": (3, 4, 30)}


def compiled_wheels(out: Path) -> tuple[list[dict], str | None]:
    """The two wheels, built (or kept from an earlier build) and checked, copied into `out` with
    their manifest entries; ([], problem) when they cannot be had."""
    wheels, problem = build_pyg_wheels()
    entries = []
    for file in wheels:
        copy = Path(shutil.copy(file, out))
        entries.append({"file": file.name, "module": file.name.split("-")[0], "built_against": f"torch=={TARGET_TORCH}",
                        **digest(copy), "from": f"built in {BUILD_DIR}"})
    return entries, problem


def pip(args: list[str], out: Path, quiet: bool = False, python: str = sys.executable) -> Path | None:
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


def digest(file: Path) -> dict:
    return {"bytes": file.stat().st_size, "sha256": hashlib.sha256(file.read_bytes()).hexdigest()}


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
        sdist = pip(["download", "--no-deps", "--no-binary=:all:", requirement], Path(scratch), python=python)
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


