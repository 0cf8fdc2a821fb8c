"""There, on the bare GPU machine: install from the prepared folder (.gpu-wheels/, carried with
the tree) the wheels whose module is missing and that this command needs, into
.cache/gpu-suite/site-packages (`pip --no-index`, one wheel at a time, each under a TERM-then-KILL
limit), which every child finds on its PYTHONPATH; unpack the tests' Planetoid files. A wheel of
a module the command needs that pip refuses fails the step; an optional one (ogb, pymetis and
their dependencies) is a note. Only `pyg` needs the compiled torch_scatter and torch_sparse:
`check` and `speed` neither install nor ask for them."""
from __future__ import annotations

import json
import sys
import tarfile

from benchmarks.gpu.common import DATA_ROOT, SITE, Context, capture, rel, run_logged

# What each command needs, by the module that provides it: its env step fails on any that is missing.
BASE_MODULES = ["torch", "triton", "numpy", "scipy", "torch_geometric", "hydra", "omegaconf", "antlr4",
                "yaml", "tqdm", "psutil", "matplotlib", "tensorboard"]
REQUIRED_MODULES = {
    "check": BASE_MODULES + ["pytest", "pytest_timeout"],  # pytest -m gpu with --timeout-method thread
    "speed": BASE_MODULES,
    "speed2": BASE_MODULES,
    "pyg": BASE_MODULES + ["torch_scatter", "torch_sparse"],  # PyG's NeighborLoader samples with them
}
OPTIONAL_MODULES = ["ogb", "pymetis", "pynvml"]  # data=products, partition=metis, GPU utilisation
COMPILED_MODULES = ("torch_scatter", "torch_sparse")
PLANETOID = ("Cora", "CiteSeer", "PubMed")


def read_manifest(ctx: Context) -> dict | None:
    path = ctx.wheels / "manifest.json"
    return json.loads(path.read_text()) if path.exists() else None


def importable(ctx: Context, modules: list[str]) -> dict[str, bool]:
    """Which modules a child process (with our paths) finds, without importing them."""
    code = ("import importlib.util, json, sys; print(json.dumps({m: importlib.util.find_spec(m) "
            "is not None for m in sys.argv[1:]}))")
    out = capture([sys.executable, "-c", code, *modules], timeout=min(30, ctx.limit()), env=ctx.env())
    return json.loads(out) if out else {m: False for m in modules}


def wanted_wheels(ctx: Context, manifest: dict) -> list[dict]:
    """The manifest's wheels this command may use: the compiled ones only for `pyg`."""
    return [w for w in manifest["wheels"] if ctx.command == "pyg" or w["module"] not in COMPILED_MODULES]


def install(ctx: Context) -> dict:
    """Install the prepared wheels whose module is missing, one at a time; then every module the
    command needs must be importable (the command stops here, naming what is missing, rather than
    failing later). An optional wheel that will not install is noted, not failed."""
    manifest = read_manifest(ctx)
    result = {"wheels": rel(ctx.wheels)}
    if manifest is None:
        result["note"] = f"no {rel(ctx.wheels)}/manifest.json: nothing prepared (--prepare)"
    else:
        wheels = wanted_wheels(ctx, manifest)
        found = importable(ctx, [w["module"] for w in wheels])
        missing = [w for w in wheels if not found.get(w["module"])]
        result.update(present=sorted(m for m, ok in found.items() if ok), installed=[], refused={})
        for wheel in missing:
            refusal = install_one(ctx, wheel)
            if refusal is None:
                result["installed"].append(wheel["module"])
            elif wheel["module"] in REQUIRED_MODULES[ctx.command]:
                return {**result, "status": "failed", "reason": f"pip install {wheel['file']}: {refusal}"}
            else:
                result["refused"][wheel["module"]] = refusal
        if result["refused"]:
            result["note"] = "optional wheels not installed: " + ", ".join(result["refused"])
        unpack_planetoid(ctx, manifest)
    return check_modules(ctx, result)


def install_one(ctx: Context, wheel: dict) -> str | None:
    """pip install one prepared wheel into SITE, offline; None if its module then imports, else why not."""
    outcome = run_logged(ctx, f"install_{wheel['module']}", [
        sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", "--no-compile", "--upgrade",
        "--target", str(SITE), str(ctx.wheels / wheel["file"])], min(60, ctx.limit()), quiet=True)
    if not outcome.ok:
        return f"{outcome.describe()}: {outcome.output.strip()[-400:]}"
    if not importable(ctx, [wheel["module"]]).get(wheel["module"]):
        return "installed, yet not importable"
    return None


def check_modules(ctx: Context, result: dict) -> dict:
    needed = REQUIRED_MODULES[ctx.command]
    have = importable(ctx, needed + OPTIONAL_MODULES)
    lacking = [m for m in needed if not have.get(m)]
    result = {**result, "modules": have}
    if lacking:
        return {**result, "status": "failed", "reason": f"`{ctx.command}` needs {', '.join(lacking)}, missing here "
                f"(prepare {rel(ctx.wheels)} with `python -m benchmarks.gpu.device --prepare` and copy it in "
                f"beside the tree)"}
    return {**result, "status": "passed"}


def unpack_planetoid(ctx: Context, manifest: dict) -> None:
    """The tests' Planetoid files, where tests/conftest.py looks for them."""
    info = manifest.get("planetoid")
    if info and not all((DATA_ROOT / name / "raw").is_dir() for name in PLANETOID):
        DATA_ROOT.mkdir(parents=True, exist_ok=True)
        with tarfile.open(ctx.wheels / info["file"]) as tar:  # the data filter where Python has it (3.11.4+)
            tar.extractall(DATA_ROOT, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
