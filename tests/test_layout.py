"""The shape of the code base: one package, `conveyor`, whose stage folders are real folders
(`conveyor/partition/` is `conveyor.partition`, found by its path alone), with the checkout's root
showing each stage as a link into it; data and imports flow one way (core -> partition -> samplers
-> cache -> pipeline -> loader -> trainer -> compare, the `conveyor` package's own modules and
launch.py on top), and no module imports itself back through others. Every import counts, those
inside functions too: a lazy import is still a dependency."""
from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO, users_project

STAGES = ("core", "partition", "samplers", "cache", "pipeline", "loader", "trainer", "compare", "conveyor", "launch")
FOLDERS = STAGES[:-2]  # the stage folders under conveyor/; conveyor/ itself holds the entry points
PACKAGE = REPO / "conveyor"


def module_name(path) -> str:
    """The name a module imports as, from its path alone: conveyor/trainer/run.py is conveyor.trainer.run."""
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict:
    """Every module of the package and launch.py: name -> (path, is a package)."""
    found = {"launch": (REPO / "launch.py", False)}
    for path in PACKAGE.rglob("*.py"):
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


def stage_edges() -> set:
    """(importer, imported) for every import that crosses from one stage to another."""
    return {(STAGES[stage_of(a)], STAGES[stage_of(b)]) for a, deps in import_graph().items() for b in deps
            if stage_of(a) != stage_of(b)}


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
    assert "conveyor.core.fields" in graph["conveyor.trainer.settings"] | graph["conveyor.partition.settings"]
    assert "conveyor.cli" in graph["launch"] and "conveyor.modes" in graph["conveyor.cli"]
    assert "conveyor.trainer.run" in graph["conveyor.modes"]


def test_a_stage_process_imports_neither_the_trainer_nor_pyg():
    """What a stage process imports: the module its body lives in (spawn imports it by name)."""
    code = ("import sys, conveyor.pipeline.stages; print(sorted({m.split('.')[0] for m in sys.modules} & "
            "{'torch_geometric', 'tensorboard', 'launch'} | "
            "{m for m in sys.modules if m.startswith('conveyor.trainer')}))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"


def test_a_users_modules_named_like_the_stages_change_nothing(tmp_path, data_root):
    """From the checkout: run beside a trainer.py, cache.py, ... and conf/, conveyor imports its own."""
    project = users_project(tmp_path / "project")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    code = ("import conveyor.trainer.run, conveyor.pipeline.stages, conveyor.cache, conveyor.samplers, "
            "conveyor.partition, conveyor.conf; print(conveyor.trainer.run.__file__, conveyor.conf.__file__)")
    shown = subprocess.run([sys.executable, "-c", code], cwd=project, env=env, capture_output=True, text=True,
                           timeout=120)
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert [Path(p).relative_to(REPO).parts[:2] for p in shown.stdout.split()] == [("conveyor", "trainer"),
                                                                                 ("conveyor", "conf")]

    out = tmp_path / "run"
    ran = subprocess.run([sys.executable, "-m", "conveyor", "data=cora", f"data.root={data_root}",
                          "pipeline=async", "trainer.epochs=1", "trainer.progress=false", "run.device=cpu",
                          f"run.out_dir={out}"], cwd=project, env=env, capture_output=True, text=True, timeout=600)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert (out / "metrics.json").is_file()


LOW_STAGES = ("core", "partition", "samplers", "cache", "pipeline", "loader")  # below the trainer: never the config


def low_stage_files():
    return [path for folder in LOW_STAGES for path in sorted((PACKAGE / folder).rglob("*.py"))]


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
    for path in sorted((PACKAGE / "conf").rglob("*.yaml")):
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            value = line.split("#")[0].partition(":")[2].strip()
            if value.split(".")[0] in ours and "." in value:
                named.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    assert named == [], "\n".join(named)
    assert "_target_: torch_geometric.nn.GAT" in (PACKAGE / "conf" / "model" / "gat.yaml").read_text()  # a value


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
KNOWN_LONG = {"conveyor/samplers/fused.py:FusedSampler", "conveyor/samplers/fused_kernel.py:fused_sample_kernel"}


def test_functions_and_classes_stay_short():
    """Simple and readable: no function of the package over ~40 lines, no class over ~200."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                lines = node.end_lineno - node.lineno + 1
                limit = LONG_CLASS if isinstance(node, ast.ClassDef) else LONG_FUNCTION
                name = f"{path.relative_to(REPO)}:{node.name}"
                if lines > limit and name not in KNOWN_LONG:
                    found.append(f"{name} has {lines} lines (at most {limit})")
    assert found == [], "\n".join(found)


def test_every_import_of_ours_leads_to_a_file_of_that_name():
    """One name per module: `conveyor.a.b` is conveyor/a/b.py or conveyor/a/b/__init__.py, for a
    reader, an editor and a static tool alike; no import hook or `__path__` entry maps names elsewhere."""
    broken, tricks = [], []
    sources = [*PACKAGE.rglob("*.py"), *(REPO / "tests").rglob("*.py"), *(REPO / "benchmarks").rglob("*.py"),
               *(REPO / "scripts").rglob("*.py"), REPO / "launch.py"]
    for path in sources:
        text = path.read_text()
        tricks += [f"{path.relative_to(REPO)} changes __path__" for _ in re.finditer(r"__path__\s*(\.|\+=|=)", text)]
        for node in ast.walk(ast.parse(text)):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level else [])
            for name in names:
                if name.split(".")[0] == "conveyor" and not _module_path(name):
                    broken.append(f"{path.relative_to(REPO)}:{node.lineno} imports {name}")
    assert broken == [] and tricks == [], "\n".join(broken + tricks)


def _module_path(name: str):
    base = REPO.joinpath(*name.split("."))
    return next((p for p in (base.with_suffix(".py"), base / "__init__.py") if p.is_file()), None)


def test_the_root_shows_each_stage_as_a_link_into_the_package():
    """The design card's layout stays visible from the root; every file lives once, under conveyor/."""
    for stage in (*FOLDERS, "conf"):
        link = REPO / stage
        assert link.is_symlink() and link.resolve() == (PACKAGE / stage).resolve(), stage
        assert os.readlink(link) == f"conveyor/{stage}"


def test_a_stage_imported_by_its_bare_name_is_refused():
    """`import trainer` from the root (where the link is) would load a second copy of every module."""
    out = subprocess.run([sys.executable, "-c", "import trainer"], cwd=REPO, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 1
    assert "ImportError: 'trainer' is conveyor's stage 'conveyor.trainer' imported under a bare name" in out.stderr
    assert "import conveyor.trainer instead" in out.stderr


@pytest.mark.parametrize("line", ["import trainer", "from partition.graph import Graph", "import cache.options"])
def test_lint_refuses_a_bare_stage_import(tmp_path, line):
    ruff = Path(sys.executable).with_name("ruff")
    if not ruff.exists():
        pytest.skip("ruff is installed with the [test] extra")
    (tmp_path / "bare.py").write_text(f"{line}\n")
    out = subprocess.run([str(ruff), "check", "--no-cache", "--config", str(REPO / "pyproject.toml"),
                          "--select", "TID251", str(tmp_path / "bare.py")], capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and "TID251" in out.stdout, out.stdout + out.stderr
    clean = tmp_path / "clean.py"
    clean.write_text(line.replace("import ", "import conveyor.", 1) if line.startswith("import ")
                     else line.replace("from ", "from conveyor.", 1))
    out = subprocess.run([str(ruff), "check", "--no-cache", "--config", str(REPO / "pyproject.toml"),
                          "--select", "TID251", str(clean)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout


def design_map() -> set:
    """The stage map in docs/design.md section 1: the table after `<!-- stage map -->`, one row a
    stage (`conveyor/core/`, ..., `launch.py`), its last cell the stages it imports (`a`, `b`)."""
    text = (REPO / "docs" / "design.md").read_text().split("<!-- stage map -->")[1].lstrip()
    rows = [line for line in text.splitlines()[2:] if line.startswith("|")][: len(STAGES)]
    edges = set()
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        stage = cells[0].strip("`/").split("/")[-1].removesuffix(".py")
        edges |= {(stage, dep) for dep in re.findall(r"`(\w+)`", cells[-1])}
    assert {stage for stage, _ in edges} | {"core"} == set(STAGES), rows
    return edges


def test_the_design_documents_the_stage_map_the_imports_draw():
    """docs/design.md section 1's map is the import graph's: each stage and the stages it imports."""
    assert design_map() == stage_edges()


def test_benchmarks_are_modules_of_a_package_without_path_tricks():
    found = [f"{p.relative_to(REPO)} changes sys.path" for p in [*(REPO / "benchmarks").rglob("*.py"),
                                                                   *(REPO / "scripts").rglob("*.py")]
             if re.search(r"sys\.path\.(insert|append)", p.read_text())]
    assert found == []
    assert (REPO / "benchmarks" / "__init__.py").is_file()


def test_test_modules_share_helpers_through_one_module():
    """A test module imports no other test module: what they share lives in tests/helpers/."""
    found = []
    for path in our_test_code():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tests."):
                if not node.module.startswith("tests.helpers") and node.module != "tests.samplers.threaded_interpreter":
                    found.append(f"{path.relative_to(REPO)} imports {node.module}")
    assert found == [], "\n".join(found)


TEST_FOLDERS = (*FOLDERS, "entry", "benchmarks")  # a folder per stage; entry: conveyor/*.py and launch.py


def our_test_code() -> list:
    """Our test code: everything under tests/ but PyG's verbatim files in tests/data/."""
    return [p for p in sorted((REPO / "tests").rglob("*.py")) if "data" not in p.relative_to(REPO / "tests").parts]


def test_tests_mirror_the_package():
    """Whoever edits conveyor/<stage>/ finds its tests in tests/<stage>/ (`pytest tests/samplers`), each
    folder with its own conftest.py; no test module lies loose at the top but this one."""
    tests = REPO / "tests"
    folders = sorted(p.name for p in tests.iterdir() if p.is_dir() and p.name not in ("data", "helpers", "__pycache__"))
    assert folders == sorted(TEST_FOLDERS)
    for folder in TEST_FOLDERS:
        assert (tests / folder / "conftest.py").is_file(), folder
        assert list((tests / folder).glob("test_*.py")), f"tests/{folder} holds no test module"
    assert [p.name for p in tests.glob("test_*.py")] == ["test_layout.py"]


def test_test_modules_have_names_of_their_own():
    """Folders without __init__.py import their modules by basename: two of one name would collide."""
    names = [p.name for p in our_test_code() if p.name.startswith("test_") or p.name == "threaded_interpreter.py"]
    assert sorted(names) == sorted(set(names))
