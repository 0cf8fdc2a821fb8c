"""What the default run's trainer process imports, and the OpenMP policy its torch starts with.

A run imports nothing it does not use: not the fused sampler or triton, matplotlib (mode=compare's
figure) or ogb (the OGB datasets). triton is there only where torch imports it itself (torch._dynamo
imports it when it is installed, and PyG imports torch._dynamo; a CPU install of conveyor lacks it).
And torch loads its OpenMP runtime with OMP_WAIT_POLICY=PASSIVE (conveyor/__init__.py says why),
unless the user set a policy. The run: the default command (`conveyor`: synthetic data, SAGE, the
async pipeline its graph gets) on a small synthetic graph for one epoch, in a fresh interpreter that
records, for each watched module, the file whose import statement loaded it first."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.helpers import REPO

pytestmark = pytest.mark.slow
WATCH = ("torch", "triton", "matplotlib", "ogb", "conveyor.samplers.fused")
PROBE = f"""
import atexit, importlib.abc, json, os, runpy, sys
first = {{}}  # watched module -> [importing file, OMP_WAIT_POLICY then]

class Watch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        watched = next((w for w in {WATCH!r} if name == w or name.startswith(w + ".")), None)
        if watched and watched not in first:
            frame = sys._getframe(1)
            while frame.f_code.co_filename.startswith("<frozen"):
                frame = frame.f_back
            first[watched] = [frame.f_code.co_filename, os.environ.get("OMP_WAIT_POLICY")]
        return None  # found by the usual finders

sys.meta_path.insert(0, Watch())
atexit.register(lambda: print("WATCHED " + json.dumps({{"first": first, "loaded": sorted(
    m for m in sys.modules if any(m == w or m.startswith(w + ".") for w in {WATCH!r}))}})))
sys.argv[0] = "conveyor"
runpy.run_module("conveyor", run_name="__main__")
"""


@pytest.fixture(scope="module")
def default_run(tmp_path_factory):
    """The watched modules' first importers and the modules loaded at the run's end."""
    tmp = tmp_path_factory.mktemp("default_run")
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    out = subprocess.run([sys.executable, "-c", PROBE, "data.scale=0.005", f"data.root={tmp / 'data'}",
                          "pipeline=async", "trainer.epochs=1", "trainer.progress=false",
                          f"run.out_dir={tmp / 'run'}"], capture_output=True, text=True, cwd=REPO, env=env,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert (tmp / "run" / "metrics.json").is_file()
    line = next(line for line in out.stdout.splitlines() if line.startswith("WATCHED "))
    return json.loads(line[len("WATCHED "):])


def test_a_default_run_imports_no_extra_it_does_not_use(default_run):
    loaded = {name.split(".")[0] for name in default_run["loaded"]}
    assert "matplotlib" not in loaded and "ogb" not in loaded
    assert not [m for m in default_run["loaded"] if m.startswith("conveyor.samplers.fused")]
    if "triton" in default_run["first"]:  # installed here (conveyor[fused]): only torch's own import
        importer = default_run["first"]["triton"][0]
        assert os.sep + os.path.join("torch", "") in importer and "conveyor" not in importer, importer


def test_torch_starts_with_passive_openmp_threads(default_run):
    importer, policy = default_run["first"]["torch"]
    assert policy == "PASSIVE"
    assert os.path.join("conveyor", "") in importer  # conveyor imported it, after setting the policy


def test_a_policy_the_user_set_stays():
    code = "import os, conveyor, torch; print(os.environ['OMP_WAIT_POLICY'])"
    env = {**os.environ, "OMP_WAIT_POLICY": "ACTIVE"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "ACTIVE"
