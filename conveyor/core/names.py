"""Each module has one name, `conveyor.<stage>...`.

A checkout shows every stage folder at its root as a link into `conveyor/` (docs/design.md
section 1), so with the root on `sys.path` a bare `import trainer` would find the same files and
load a second copy of every module under other names: two `ConveyorError` classes, two registries,
settings that compare unequal. Each stage's `__init__` refuses such an import at once; ruff's
banned-api rule (pyproject.toml) refuses it in the code base before it runs."""


def require_own_name(name: str, own: str) -> None:
    """Raise ImportError when a stage package is imported as `name` rather than its own name."""
    if name != own:
        raise ImportError(f"{name!r} is conveyor's stage {own!r} imported under a bare name (the checkout's "
                          f"root link {name}/ leads into conveyor/); import {own} instead, so that every "
                          f"module is loaded once, by one name.")
