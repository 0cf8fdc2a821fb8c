"""triton and ogb are extras (`conveyor[fused]`, `conveyor[ogb]`): without them every module but
the fused sampler's own imports, a run trains, and asking for the fused sampler or an OGB
dataset ends in one paragraph naming the extra. "Without" is an interpreter whose import system
finds neither package (a meta-path finder put first), in a fresh process: this environment has
both installed, for the tests that use them."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.helpers import REPO

pytestmark = pytest.mark.slow
EXTRA_MODULES = ("triton", "ogb")
NEEDS_TRITON = {"conveyor.samplers.fused", "conveyor.samplers.fused_kernel", "conveyor.samplers.fused_compile"}
HIDE = f"""
import importlib.abc, sys
class Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {EXTRA_MODULES!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
sys.meta_path.insert(0, Absent())
"""


def without_extras(code: str, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", HIDE + code, *args], capture_output=True, text=True,
                          cwd=REPO, timeout=timeout)


def package_modules() -> list:
    names = []
    for path in sorted((REPO / "conveyor").rglob("*.py")):
        parts = list(path.relative_to(REPO).with_suffix("").parts)
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def test_every_module_but_the_fused_samplers_imports_without_triton_and_ogb():
    modules = [name for name in package_modules() if name not in NEEDS_TRITON]
    code = ("import importlib, json, sys\n"
            "for name in sys.argv[1:]: importlib.import_module(name)\n"
            "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('triton', 'ogb'))))")
    out = without_extras(code, *modules)
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout) == []
    assert len(modules) > 100  # the whole package: the stages, the entry points, conf/
    hidden = without_extras("import conveyor.samplers.fused")  # the finder does hide them
    assert hidden.returncode == 1 and "No module named 'triton'" in hidden.stderr


CLI = "import runpy, sys; sys.argv[0] = 'conveyor'; runpy.run_module('conveyor', run_name='__main__')"


def test_a_run_trains_without_the_extras_and_the_extras_are_named_where_asked_for(tmp_path, data_root):
    common = [f"data.root={data_root}", "trainer.progress=false", "run.device=cpu"]
    out = without_extras(CLI, "data=cora", "trainer.epochs=1", *common, f"run.out_dir={tmp_path / 'run'}")
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["final"]["loss"] > 0

    fused = without_extras(CLI, "data=cora", "sampler=fused", *common, f"run.out_dir={tmp_path / 'fused'}")
    assert fused.returncode == 2 and fused.stderr.count("\n") == 1, fused.stderr
    assert fused.stderr.startswith("conveyor: error: sampler=fused needs the "
                                   "`triton` package, which conveyor installs only on request: pip install "
                                   "'conveyor[fused]'")
    assert not (tmp_path / "fused").exists()  # before any work

    ogb = without_extras(CLI, "data=products", f"data.root={tmp_path / 'data'}", "trainer.progress=false",
                         "run.device=cpu", f"run.out_dir={tmp_path / 'ogb'}")
    assert ogb.returncode == 2 and ogb.stderr.count("\n") == 1, ogb.stderr
    assert ogb.stderr.startswith("conveyor: error: the OGB dataset ogbn-products needs the `ogb` package, "
                                 "which conveyor installs only on request: pip install 'conveyor[ogb]'")


def test_the_loader_names_the_extra_for_the_fused_sampler_before_any_process_starts():
    code = ("from conveyor import NeighborLoader\nfrom conveyor.core import ConveyorError\n"
            "from tests.helpers import feature_graph\n"
            "try:\n    NeighborLoader(feature_graph(), [2], node_sampler='fused')\n"
            "except ConveyorError as error:\n    print(error)\n")
    out = without_extras(code)
    assert out.returncode == 0 and out.stdout.startswith("node_sampler='fused' needs the `triton` package"), out
    assert "pip install 'conveyor[fused]'" in out.stdout
