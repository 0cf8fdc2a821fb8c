"""The shape of the code base: each top-level package is one stage, data and imports flow one
way (partition -> samplers -> cache -> pipeline -> trainer, conveyor and launch.py on top), and no module
imports itself back through others. Every import counts, those inside functions too: a lazy
import is still a dependency."""
from __future__ import annotations

import ast
import subprocess
import sys

from tests.configs import REPO

STAGES = ("partition", "samplers", "cache", "pipeline", "trainer", "conveyor", "launch")


def module_name(path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict:
    """Every module of the stages: name -> (path, is a package)."""
    found = {"launch": (REPO / "launch.py", False)}
    for stage in STAGES[:-1]:
        for path in (REPO / stage).rglob("*.py"):
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
    return STAGES.index(module.split(".")[0])


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
    assert "partition.graph" in graph["samplers.bsp"] or "partition" in graph["samplers.bsp"]
    assert "pipeline.source" in graph["pipeline"] and "cache.configured" in graph["pipeline.stages"]
    assert "conveyor.cli" in graph["launch"] and "trainer.modes" in graph["conveyor.cli"]
    assert "trainer.run" in graph["trainer.modes"]


def test_a_stage_process_imports_neither_the_trainer_nor_pyg():
    """What a stage process imports: the module its body lives in (spawn imports it by name)."""
    code = ("import sys, pipeline.stages; print(sorted({m.split('.')[0] for m in sys.modules} & "
            "{'trainer', 'torch_geometric', 'tensorboard', 'launch'}))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"
