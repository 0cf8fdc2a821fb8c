"""The user's script and the stage processes, which start with `spawn`.

`spawn` runs the parent's main script again in each child (as `__mp_main__`), so that what the
child is sent can name the script's own classes. conveyor's stage processes need that only when the
pipeline is handed an object of a class defined in the script (a sampler or feature source of the
user's own): otherwise they start without it (`hiding_main`), so a script runs as written, with no
`if __name__ == "__main__":` guard, from a file, `python -c`, stdin or a notebook, and no stage
imports what the script imports. Where the script must be run again, code at its top level that
starts the pipeline would start it again in every stage process, which multiprocessing refuses
deep inside the child, leaving the parent with "sampler stage exited with code 1". So before
spawning anything, `check_main_guard` finds the line of the script that started this pipeline and
refuses it, in one paragraph, when no guard encloses it; and `stop_if_reimported`, called first
thing by an entry point such as `conveyor.fit`, stops a stage process that is importing such a
script again (should the parent's check miss a case) with the same paragraph on stderr and exit
code 2, before it starts a second run.
"""
from __future__ import annotations

import ast
import contextlib
import multiprocessing
import os
import sys
from functools import lru_cache
from typing import Optional

from conveyor.core import ConveyorError


def rerun_script() -> Optional[str]:
    """The file `spawn` runs again in a child, or None (an interactive session, `python -c`, a
    package's `__main__` run with -m: multiprocessing re-runs none of these)."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name:
        return None if spec.name == "__main__" or spec.name.endswith(".__main__") else getattr(main, "__file__", None)
    path = getattr(main, "__file__", None)
    return None if path is None or os.path.basename(path).startswith("ipython") else path


def top_level_line(main_globals: dict) -> Optional[int]:
    """The line of the script's top-level code that is running now (the outermost frame of the
    script's module body), or None when the script's body is not on the stack."""
    frame, line = sys._getframe(1), None
    while frame is not None:
        if frame.f_globals is main_globals and frame.f_code.co_name == "<module>":
            line = frame.f_lineno
        frame = frame.f_back
    return line


@lru_cache(maxsize=8)
def guarded_lines(path: str, mtime: float) -> tuple:
    """The (first, last) lines of each `if __name__ == "__main__":` block of the script."""
    del mtime  # part of the cache key only
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    return tuple((node.lineno, node.end_lineno) for node in ast.walk(tree)
                 if isinstance(node, ast.If) and _is_main_test(node.test))


def _is_main_test(test) -> bool:
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)):
        return False
    sides = [test.left, test.comparators[0]]
    return (any(isinstance(s, ast.Name) and s.id == "__name__" for s in sides)
            and any(isinstance(s, ast.Constant) and s.value == "__main__" for s in sides))


def needs_main(*parts) -> bool:
    """Whether a part handed to the stage processes (a sampler, a feature source, their specs, one
    level down) is of a class the main script defines, which a child can only unpickle by running it."""
    def from_main(obj) -> bool:
        return type(obj).__module__ == "__main__"
    return any(from_main(p) or any(from_main(v) for v in getattr(p, "__dict__", {}).values()) for p in parts)


@contextlib.contextmanager
def hiding_main():
    """While a process is spawned: the main module without its file and spec, so the child does not
    run the script again (multiprocessing runs what those name)."""
    main = sys.modules.get("__main__")
    saved = {key: main.__dict__[key] for key in ("__file__", "__spec__") if main is not None and key in main.__dict__}
    main.__dict__.pop("__file__", None)
    if "__spec__" in saved:
        main.__spec__ = None  # as in an interactive session (multiprocessing reads it, so it must exist)
    try:
        yield
    finally:
        main.__dict__.update(saved)


def check_main_guard(what: str = "the async pipeline", parts=None) -> None:
    """Refuse to start `what` from a script's unguarded top-level code where the stage processes
    must run the script again (`parts` need it; None: the caller does not know yet) (module doc)."""
    if parts is not None and not needs_main(*parts):
        return
    path = rerun_script()
    if path is not None and not os.path.isfile(path):
        raise ConveyorError(f"{what} was handed an object of a class defined in a script read from {path}; its "
                            f"stage processes cannot read that script again. Save the script to a file, define "
                            f"the class in a module of its own, or use pipeline='serial'.")
    if path is None:
        return
    line = top_level_line(vars(sys.modules["__main__"]))
    try:
        blocks = guarded_lines(os.path.abspath(path), os.path.getmtime(path))
    except (OSError, SyntaxError, ValueError):
        return  # not a Python source we can read: leave it to multiprocessing
    if line is None or any(first <= line <= last for first, last in blocks):
        return
    raise ConveyorError(unguarded(what, path, line))


def unguarded(what: str, path: str, line: int) -> str:
    return (f"{what} starts its stage processes with 'spawn', which runs your script {path} again in "
            f"each of them; line {line} starts it from the script's top level, so every stage process "
            f"would start it again. Put the script's work under a guard, e.g. `def main(): ...` and at "
            f"the end `if __name__ == \"__main__\": main()`, or use the serial pipeline "
            f"(pipeline='serial', or pipeline=serial in overrides), which starts no processes.")


def stop_if_reimported(what: str) -> None:
    """In a spawned process importing the parent's script again (its top-level code called `what`):
    say why on stderr and exit with code 2 before starting anything."""
    # While a spawned process imports the script it has its own name but no parent_process() yet.
    if multiprocessing.current_process().name == "MainProcess":
        return
    frame = sys._getframe(1)
    while frame is not None and not (frame.f_code.co_name == "<module>"
                                     and frame.f_globals.get("__name__") == "__mp_main__"):
        frame = frame.f_back
    if frame is not None:
        print(f"conveyor: error: {unguarded(what, frame.f_code.co_filename, frame.f_lineno)}",
              file=sys.stderr, flush=True)
        raise SystemExit(2)
