"""The wheel as a user installs it: built from the repository's files, installed into a fresh
virtual environment, and run from a folder outside the checkout. It holds every file of conf/,
composes every (dataset, model) pair of defaults exactly as the checkout does, trains the pair whose
settings live deepest (cora with GCN: conf/data/planetoid/), and has the `partition` and `prepare`
commands.

One wheel and one environment serve the whole module. The fresh environment gets only the wheel
(`--no-deps`); the dependencies it would pull from PyPI (GBs of torch) come from this interpreter's
site-packages, listed in a `.pth` file. A plain path line there does not run the `.pth` files of
that folder, so the editable install of the checkout stays off, and the test checks that
conveyor's packages load from the fresh environment.
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
from omegaconf import OmegaConf

from conveyor.compose import compose_config
from conveyor.config import load_settings
from conveyor.partition import load_dataset, load_parts
from tests.helpers import REPO, users_project

pytestmark = pytest.mark.slow
PACKAGES = ("conveyor", "conveyor.trainer.run", "conveyor.partition", "conveyor.pipeline.stages", "conveyor.conf")
DATASETS = sorted(path.stem for path in (REPO / "conf" / "data").glob("*.yaml"))
MODELS = sorted(path.stem for path in (REPO / "conf" / "model").glob("*.yaml"))
# Each pair's composed config as JSON, interpolations unresolved (run.out_dir's ${run_id:} is per process).
COMPOSE_PAIRS = """
import json, sys
from omegaconf import OmegaConf
from conveyor.compose import compose_config
pairs = [pair.split(",") for pair in sys.argv[1:]]
print(json.dumps({f"{d},{m}": OmegaConf.to_container(compose_config([f"data={d}", f"model={m}"]), resolve=False)
                  for d, m in pairs}))
"""


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


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(the wheel, its fresh environment, a user's folder outside the checkout): built once."""
    tmp = tmp_path_factory.mktemp("wheel")
    wheel = build_wheel(tmp)
    return wheel, fresh_venv(tmp, wheel), users_project(tmp / "elsewhere")  # its own trainer.py, conf/: never read


def test_the_wheel_holds_the_package_and_every_file_under_conf(installed):
    wheel, _, _ = installed
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    assert {name.split("/")[0] for name in names} == {"conveyor", f"conveyor-{wheel.name.split('-')[1]}.dist-info"}
    conf = sorted(str(path.relative_to(REPO)) for path in (REPO / "conf").rglob("*")
                  if path.is_file() and "__pycache__" not in path.parts)
    assert len(conf) > 30 and "conf/data/planetoid/cora_gcn.yaml" in conf
    assert sorted(name.removeprefix("conveyor/") for name in names if name.startswith("conveyor/conf/")) == conf


def test_the_package_loads_from_the_fresh_environment(installed):
    _, venv, elsewhere = installed
    where = run([venv / "bin" / "python", "-c",
                 f"import {', '.join(PACKAGES)}; print({', '.join(p + '.__file__' for p in PACKAGES)})"],
                cwd=elsewhere).stdout.split()
    assert all(Path(path).is_relative_to(venv / "lib") for path in where), where
    assert not list((venv / "lib").glob("python*/site-packages/conf"))


def test_every_dataset_model_pair_composes_from_the_wheel_as_from_the_checkout(installed):
    _, venv, elsewhere = installed
    pairs = [f"{data},{model}" for data in DATASETS for model in MODELS]
    assert len(DATASETS) >= 9 and MODELS == ["gat", "gcn", "mlp", "rgcn", "sage"]
    from_wheel = json.loads(run([venv / "bin" / "python", "-c", COMPOSE_PAIRS, *pairs], cwd=elsewhere).stdout)
    here = {pair: OmegaConf.to_container(compose_config([f"data={pair.split(',')[0]}", f"model={pair.split(',')[1]}"]),
                                         resolve=False) for pair in pairs}
    assert from_wheel == here
    assert (here["cora,gcn"]["model"]["hidden"], here["cora,gcn"]["trainer"]["epochs"]) == (16, 200)  # Kipf & Welling's
    assert here["cora,gat"]["model"]["out_heads"] == 1  # the specialised files are in the comparison


def test_the_command_trains_gcn_on_cora_with_the_checkouts_settings(installed, data_root, tmp_path):
    wheel, venv, elsewhere = installed
    overrides = ["model=gcn", "data=cora", f"data.root={data_root}", "trainer.epochs=1", "trainer.progress=false",
                 "run.device=cpu", f"run.out_dir={tmp_path / 'run'}"]
    run([venv / "bin" / "conveyor", *overrides], cwd=elsewhere)
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    version = wheel.name.split("-")[1]
    assert metrics["conveyor"] == {"version": version, "commit": None, "modified": None}  # not the checkout
    assert metrics["config"] == load_settings(overrides, check_machine=False).to_dict()
    assert metrics["config"]["sampler"]["fanouts"] == [-1, -1] and metrics["config"]["model"]["gcn_degrees"] == "graph"
    assert [epoch["epoch"] for epoch in metrics["epochs"]] == [1]
    assert 0.0 <= metrics["final"]["test_acc"] <= 1.0 and metrics["final"]["loss"] > 0
    assert (tmp_path / "run" / "checkpoints" / "last.pt").is_file()
    assert (tmp_path / "run" / ".hydra" / "config.yaml").is_file()


def test_the_partition_prepare_and_help_commands_run_from_the_wheel(installed, data_root, tmp_path):
    _, venv, elsewhere = installed
    conveyor = venv / "bin" / "conveyor"
    parts = tmp_path / "parts"
    printed = run([conveyor, "partition", "data=cora", f"data.root={data_root}", "num_parts=2",
                   f"partition.dir={parts}"], cwd=elsewhere).stdout
    assert f"wrote 2 parts to {parts}" in printed
    saved = load_parts(parts)
    train = torch.cat([part.node_ids[part.graph.train_idx] for part in saved])
    assert [part.rank for part in saved] == [0, 1]
    assert torch.equal(train.sort().values, load_dataset("cora", root=data_root).train_idx.sort().values)

    prepared = run([conveyor, "prepare", "planetoid", "--root", data_root], cwd=elsewhere).stdout
    assert prepared.count("raw files already in") == 3  # the command is there; the suite's files are whole

    shown = run([conveyor, "data=cora", "--help"], cwd=elsewhere).stdout
    assert "* cora" in shown and "data.normalize_features=true" in shown
    assert "Offline: conveyor prepare planetoid --root <root>" in shown and "scripts/" not in shown
