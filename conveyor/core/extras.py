"""The optional parts of conveyor and the extra that installs each: triton (the `fused` sampler,
`conveyor[fused]`; a CUDA build of torch brings it already), ogb (the OGB datasets,
`conveyor[ogb]`) and matplotlib (mode=compare's figure, `conveyor[compare]`). Without them
everything else imports and runs: each is imported only where it is used, and asked for here
first, so its absence reads as one paragraph naming the extra rather than a ModuleNotFoundError
from deep inside a stage process."""
from __future__ import annotations

import importlib.util

from conveyor.core.errors import ConveyorError

# module -> (the extra that installs it, the requirement it stands for in pyproject.toml)
EXTRAS = {"triton": ("fused", "triton>=3.0,<4"), "ogb": ("ogb", "ogb>=1.3.6,<2"),
          "matplotlib": ("compare", "matplotlib")}


def has_module(module: str) -> bool:
    """Whether `module` is installed, found without importing it (importing triton or ogb takes seconds)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package that fails, or a module without a spec
        return False


def require_extra(module: str, what: str) -> None:
    """Refuse `what` (e.g. "sampler=fused") without `module`, naming the extra that installs it."""
    if has_module(module):
        return
    extra, requirement = EXTRAS[module]
    brings = " (a CUDA build of torch brings triton already)" if module == "triton" else ""
    raise ConveyorError(f"{what} needs the `{module}` package, which conveyor installs only on request: "
                        f"pip install 'conveyor[{extra}]' (or pip install '{requirement}'){brings}, then "
                        f"run again.")
