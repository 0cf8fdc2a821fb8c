"""Which conveyor wrote a run's files: its installed version and, when it runs from a git
checkout, the commit (and whether tracked files differ from it), for metrics.json and checkpoints."""
from __future__ import annotations

import functools
import importlib.metadata
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]  # conveyor/trainer/outputs/provenance.py -> the checkout


@functools.lru_cache(maxsize=1)
def provenance() -> dict:
    try:
        version = importlib.metadata.version("conveyor")
    except importlib.metadata.PackageNotFoundError:  # run from a source tree never installed
        version = None
    head = _git("rev-parse", "HEAD")
    changes = _git("status", "--porcelain", "--untracked-files=no") if head else None
    return {"version": version, "commit": head, "modified": None if head is None else bool(changes)}


def _git(*args: str) -> str | None:
    """git's output in this checkout, or None where there is no checkout (an installed wheel) or no git."""
    if not (REPO / ".git").exists():
        return None
    try:
        out = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None
