"""A script that calls `conveyor.fit` with the process pipeline (`pipeline=async`) needs its
top-level work under `if __name__ == "__main__":`, as any script that starts processes with
`spawn`: each stage process imports the script again (as `__mp_main__`), so an unguarded
`fit(...)` would start a second run inside every stage, which then dies before it can report.

`fit` checks it at once, before any work: in the script's process (the line of `__main__`'s
top-level code that led to the call lies outside every such block: ConveyorError, one
paragraph), and, should that miss a case, in the stage process re-running the script (the same
paragraph on stderr, exit code 2, before it starts a run).
"""
from __future__ import annotations

import ast
import multiprocessing
import sys
from pathlib import Path
from typing import Iterator, Optional

FIX = ("conveyor.fit() runs the pipeline's stages (pipeline=async, the default) as spawned "
       "processes, and each of them imports your script {script} again, so the code at its top "
       "level, this fit() call included (line {line}), would run again in every stage. Put the "
       "script's work under `if __name__ == \"__main__\":` and call fit() from there (as the "
       "README's examples do), or pass overrides=[\"pipeline=serial\"] to keep every stage in "
       "this process.")


def _frames() -> Iterator:
    frame = sys._getframe(1)
    while frame is not None:
        yield frame
        frame = frame.f_back


def _top_level_frame(module_name: str):
    """The frame of `module_name`'s own top-level code on this call's stack, if any."""
    return next((f for f in _frames() if f.f_code.co_name == "<module>"
                 and f.f_globals.get("__name__") == module_name), None)


def unguarded_call() -> Optional[str]:
    """FIX for this process's script when the call came from its top-level code outside an
    `if __name__ == "__main__":` block; None when guarded, or when there is no script to read
    (an interactive session, `python -c`, a notebook: spawn imports nothing of those)."""
    frame = _top_level_frame("__main__")
    if frame is None:
        return None
    script, line = frame.f_code.co_filename, frame.f_lineno
    try:
        tree = ast.parse(Path(script).read_text())
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
        return None
    if any(isinstance(node, ast.If) and _is_main_test(node.test) and node.lineno <= line <= node.end_lineno
           for node in ast.walk(tree)):
        return None
    return FIX.format(script=script, line=line)


def _is_main_test(test: ast.expr) -> bool:
    """`__name__ == "__main__"`, either way round."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)):
        return False
    sides = [test.left, test.comparators[0]]
    return (any(isinstance(s, ast.Name) and s.id == "__name__" for s in sides)
            and any(isinstance(s, ast.Constant) and s.value == "__main__" for s in sides))


def stop_if_reimported() -> None:
    """In a spawned process that is importing the parent's script again (its top-level code called
    fit): say why on stderr and exit with code 2 before starting anything."""
    # While a spawned process imports the script it has its own name but no parent_process() yet.
    if multiprocessing.current_process().name == "MainProcess":
        return
    frame = _top_level_frame("__mp_main__")
    if frame is not None:
        message = FIX.format(script=frame.f_code.co_filename, line=frame.f_lineno)
        print(f"conveyor: error: {message}", file=sys.stderr, flush=True)
        raise SystemExit(2)
