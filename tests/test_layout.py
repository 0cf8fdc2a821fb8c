"""The shape of the code base: each top-level folder is one stage, imported as `conveyor.<stage>`;
data and imports flow one way (partition -> samplers -> cache -> pipeline -> loader -> trainer, the `conveyor`
package's own modules and launch.py on top), and no module imports itself back through others.
Every import counts, those inside functions too: a lazy import is still a dependency."""
from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

from tests.configs import REPO

STAGES = ("partition", "samplers", "cache", "pipeline", "loader", "trainer", "conveyor", "launch")
FOLDERS = STAGES[:-2]  # the stage folders; conveyor/ itself holds the entry points


def module_name(path) -> str:
    """The name a module imports as: <root>/trainer/run.py is conveyor.trainer.run."""
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    parts = parts[:-1] if parts[-1] == "__init__" else parts
    return ".".join(parts if parts[0] in ("conveyor", "launch") else ["conveyor", *parts])


def modules() -> dict:
    """Every module of the stages: name -> (path, is a package)."""
    found = {"launch": (REPO / "launch.py", False)}
    for folder in (*FOLDERS, "conveyor"):
        for path in (REPO / folder).rglob("*.py"):
            found[module_name(path)] = (path, path.name == "__init__.py")
    return found


def imports_of(name: str, path, is_package: bool, known: dict) -> set:
    """The modules of ours that `name` imports: `from a import b` counts as `a.b` where that is a
    module, else as `a`."""
    package = name if is_package else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                out.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base)
    return {m for m in out if m in known and m != name}


def import_graph() -> dict:
    known = modules()
    return {name: imports_of(name, path, is_package, known) for name, (path, is_package) in known.items()}


def stage_of(module: str) -> int:
    """conveyor.<stage>... is that stage; conveyor's own modules (cli, fit, ...) sit above them all."""
    parts = module.split(".")
    if parts[0] == "launch":
        return STAGES.index("launch")
    return STAGES.index(parts[1] if len(parts) > 1 and parts[1] in FOLDERS else "conveyor")


def test_imports_run_one_way_from_lower_stages_to_higher():
    upward = sorted(f"{a} imports {b}" for a, deps in import_graph().items() for b in deps
                    if stage_of(b) > stage_of(a))
    assert not upward, "\n".join(upward)


def test_there_is_no_import_cycle():
    graph, state, cycles = import_graph(), {}, []

    def visit(node, path):
        state[node] = "open"
        for dep in sorted(graph[node]):
            if state.get(dep) == "open":
                cycles.append(" -> ".join(path[path.index(dep):] + [dep]))
            elif dep not in state:
                visit(dep, path + [dep])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert not cycles, "\n".join(cycles)


def test_the_graph_sees_the_imports_it_checks():
    """The walk must find what is there, or the two tests above could not fail."""
    graph = import_graph()
    assert {"conveyor.partition.graph", "conveyor.partition"} & graph["conveyor.samplers.bsp"]
    assert "conveyor.pipeline.source" in graph["conveyor.pipeline"]
    assert "conveyor.pipeline.batch" in graph["conveyor.pipeline.stages"]
    assert "conveyor.partition.fields" in graph["conveyor.trainer.settings"] | graph["conveyor.partition.settings"]
    assert "conveyor.cli" in graph["launch"] and "conveyor.trainer.modes" in graph["conveyor.cli"]
    assert "conveyor.trainer.run" in graph["conveyor.trainer.modes"]


def test_a_stage_process_imports_neither_the_trainer_nor_pyg():
    """What a stage process imports: the module its body lives in (spawn imports it by name)."""
    code = ("import sys, conveyor.pipeline.stages; print(sorted({m.split('.')[0] for m in sys.modules} & "
            "{'torch_geometric', 'tensorboard', 'launch'} | "
            "{m for m in sys.modules if m.startswith('conveyor.trainer')}))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"


SHADOWED = ("trainer", "cache", "pipeline", "samplers", "partition")


def users_project(folder):
    """A user's project folder: modules named like conveyor's stages and a conf/ of its own, each
    failing loudly if conveyor ever read it."""
    folder.mkdir(exist_ok=True)
    for name in SHADOWED:
        (folder / f"{name}.py").write_text(f"raise ImportError(\"the user's own {name}.py was imported\")\n")
    (folder / "conf").mkdir(exist_ok=True)
    (folder / "conf" / "config.yaml").write_text("defaults: [not_conveyors]\n")
    return folder


def test_a_users_modules_named_like_the_stages_change_nothing(tmp_path, data_root):
    """From the checkout: run beside a trainer.py, cache.py, ... and conf/, conveyor imports its own."""
    project = users_project(tmp_path / "project")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    code = ("import conveyor.trainer.run, conveyor.pipeline.stages, conveyor.cache, conveyor.samplers, "
            "conveyor.partition, conveyor.conf; print(conveyor.trainer.run.__file__, conveyor.conf.__file__)")
    shown = subprocess.run([sys.executable, "-c", code], cwd=project, env=env, capture_output=True, text=True,
                           timeout=120)
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert [Path(p).relative_to(REPO).parts[0] for p in shown.stdout.split()] == ["trainer", "conf"]

    out = tmp_path / "run"
    ran = subprocess.run([sys.executable, "-m", "conveyor", "data=cora", f"data.root={data_root}",
                          "pipeline=async", "trainer.epochs=1", "trainer.progress=false", "run.device=cpu",
                          f"run.out_dir={out}"], cwd=project, env=env, capture_output=True, text=True, timeout=600)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert (out / "metrics.json").is_file()


LOW_STAGES = ("partition", "samplers", "cache", "pipeline", "loader")  # below the trainer: never the whole config


def low_stage_files():
    return [path for folder in LOW_STAGES for path in sorted((REPO / folder).rglob("*.py"))]


def test_no_stage_below_the_trainer_takes_the_whole_config():
    """Each function of partition, samplers, cache and pipeline receives its own stage's settings
    (or plain values), never the config: no parameter named cfg or config, no config type."""
    found = []
    for path in low_stage_files():
        text = path.read_text()
        found += [f"{path.relative_to(REPO)} mentions {word}" for word in ("DictConfig", "OmegaConf", "omegaconf")
                  if word in text]
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                args = node.args
                names = [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]
                found += [f"{path.relative_to(REPO)}:{node.lineno} takes {name}" for name in names
                          if name in ("cfg", "config") or name.startswith("cfg_")]
            elif isinstance(node, ast.Attribute) and node.attr in ("cfg", "config"):
                found += [f"{path.relative_to(REPO)}:{node.lineno} holds .{node.attr}"]
    assert found == [], "\n".join(found)


def test_the_yaml_names_no_module_of_ours():
    """conf/ holds option values; a tie to a module (a Hydra callback, a _target_ of ours) would be
    an upward dependency no import shows. A model class of the user's or PyG's may be named."""
    ours = ("conveyor", *FOLDERS, "conf", "launch")
    named = []
    for path in sorted((REPO / "conf").rglob("*.yaml")):
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            value = line.split("#")[0].partition(":")[2].strip()
            if value.split(".")[0] in ours and "." in value:
                named.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    assert named == [], "\n".join(named)
    assert "_target_: torch_geometric.nn.GAT" in (REPO / "conf" / "model" / "gat.yaml").read_text()  # a value it reads


def test_benchmarks_import_no_tests():
    found = []
    for path in sorted((REPO / "benchmarks").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            found += [f"{path.relative_to(REPO)} imports {n}" for n in names if n.split(".")[0] == "tests"]
    assert found == [], "\n".join(found)


LONG_FUNCTION, LONG_CLASS = 40, 200  # lines, docstrings included
# The fused kernel's host class and its Triton kernel (samplers/fused*.py) are longer; they belong
# to the GPU suite's work (benchmarks/gpu), which validates them on a GPU before they are reshaped.
KNOWN_LONG = {"samplers/fused.py:FusedSampler", "samplers/fused_kernel.py:fused_sample_kernel"}


def test_functions_and_classes_stay_short():
    """Simple and readable: no function of the package over ~40 lines, no class over ~200."""
    found = []
    for folder in (*FOLDERS, "conveyor"):
        for path in sorted((REPO / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    lines = node.end_lineno - node.lineno + 1
                    limit = LONG_CLASS if isinstance(node, ast.ClassDef) else LONG_FUNCTION
                    name = f"{path.relative_to(REPO)}:{node.name}"
                    if lines > limit and name not in KNOWN_LONG:
                        found.append(f"{name} has {lines} lines (at most {limit})")
    assert found == [], "\n".join(found)
