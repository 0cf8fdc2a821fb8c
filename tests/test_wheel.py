"""The wheel as a user installs it: built from the repository's files, installed into a fresh
virtual environment, and run from a folder outside the checkout: the `conveyor` command trains on
cora and `conveyor partition` partitions it, both from the configs the wheel carries.

The fresh environment gets only the wheel (`--no-deps`); the dependencies it would pull from
PyPI (GBs of torch) come from this interpreter's site-packages, listed in a `.pth` file. A plain
path line there does not run the `.pth` files of that folder, so the editable install of the
checkout stays off, and the test checks that conveyor's packages load from the fresh environment.
"""
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
import torch

from conveyor.partition import load_dataset, load_parts
from tests.helpers import REPO, users_project

pytestmark = pytest.mark.slow
PACKAGES = ("conveyor", "conveyor.trainer.run", "conveyor.partition", "conveyor.pipeline.stages", "conveyor.conf")


def source_files() -> list:
    """What a commit would hold: the tracked files and the new ones git does not ignore."""
    if not (REPO / ".git").exists():
        pytest.skip("needs a git checkout to tell the source files from build outputs")
    out = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                         capture_output=True, text=True, check=True, timeout=60).stdout
    return [name for name in out.split("\0") if name and (REPO / name).is_file()]


def build_wheel(tmp_path: Path) -> Path:
    """`pip wheel` on a copy of the source files, so the build leaves nothing in the checkout."""
    source = tmp_path / "source"
    for name in source_files():
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, source / name)
    run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
         "-w", str(tmp_path / "dist"), str(source)])
    wheels = list((tmp_path / "dist").glob("conveyor-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


def fresh_venv(tmp_path: Path, wheel: Path) -> Path:
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    python = venv / "bin" / "python"
    run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", "--no-index",
         str(wheel)])
    site = Path(run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip())
    ours = dict.fromkeys(sysconfig.get_paths()[kind] for kind in ("purelib", "platlib"))
    (site / "dependencies.pth").write_text("".join(f"{path}\n" for path in ours))
    return venv


def run(argv: list, cwd=None, timeout=600) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # nothing of the checkout's
    result = subprocess.run([str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True,
                            timeout=timeout)
    assert result.returncode == 0, (argv, result.returncode, result.stdout[-2000:], result.stderr[-3000:])
    return result


def test_the_wheel_installs_and_runs_without_the_checkout(tmp_path, data_root):
    wheel = build_wheel(tmp_path)
    venv = fresh_venv(tmp_path, wheel)
    with zipfile.ZipFile(wheel) as archive:
        top = {name.split("/")[0] for name in archive.namelist()}
    assert top == {"conveyor", f"conveyor-{wheel.name.split('-')[1]}.dist-info"}, top
    elsewhere = users_project(tmp_path / "elsewhere")  # its own trainer.py, cache.py, ..., conf/: never read
    python, site = venv / "bin" / "python", venv / "lib"

    where = run([python, "-c", f"import {', '.join(PACKAGES)}; print({', '.join(p + '.__file__' for p in PACKAGES)})"],
                cwd=elsewhere).stdout.split()
    assert all(Path(path).is_relative_to(site) for path in where), where
    assert not (site / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages" / "conf").exists()

    out = tmp_path / "run"
    run([venv / "bin" / "conveyor", "data=cora", f"data.root={data_root}", "trainer.epochs=1",
         "trainer.progress=false", "run.device=cpu", f"run.out_dir={out}"], cwd=elsewhere)
    metrics = json.loads((out / "metrics.json").read_text())
    version = wheel.name.split("-")[1]
    assert metrics["conveyor"] == {"version": version, "commit": None, "modified": None}  # not the checkout
    assert metrics["config"]["data"]["name"] == "cora" and metrics["config"]["pipeline"]["name"] == "serial"
    assert [epoch["epoch"] for epoch in metrics["epochs"]] == [1]
    assert 0.0 <= metrics["final"]["test_acc"] <= 1.0 and metrics["final"]["loss"] > 0
    assert (out / "checkpoints" / "last.pt").is_file() and (out / ".hydra" / "config.yaml").is_file()

    parts = tmp_path / "parts"
    printed = run([venv / "bin" / "conveyor", "partition", "data=cora", f"data.root={data_root}", "num_parts=2",
                   f"partition.dir={parts}"], cwd=elsewhere).stdout
    assert f"wrote 2 parts to {parts}" in printed
    saved = load_parts(parts)
    train = torch.cat([part.node_ids[part.graph.train_idx] for part in saved])
    assert [part.rank for part in saved] == [0, 1]
    assert torch.equal(train.sort().values, load_dataset("cora", root=data_root).train_idx.sort().values)

    shown = run([venv / "bin" / "conveyor", "data=cora", "--help"], cwd=elsewhere).stdout
    assert "* cora" in shown and "data.normalize_features=true" in shown
