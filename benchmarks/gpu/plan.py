"""Which command a GPU chance should run: `next` takes the first of `check`, `speed`, `speed2`,
`pyg` that has no whole result under benchmarks/results/<gpu>/<command>/result.json, and `check`
again whenever the fused kernel's source differs from the one its result was measured on, so that
each chance moves the table forward instead of repeating it.

A result counts once its call reached its end (`finished`) with no step cut by its time limit
(`partial`, or `killed`): a call the device tool stopped early, or a step stopped at its limit,
left what it finished, but the command runs again. Failed steps still count: running the same
code again proves nothing new; a change to the kernel (the usual fix) makes `check` due again."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from benchmarks.gpu.common import REPO, rel

ORDER = ("check", "speed", "speed2", "pyg")
FUSED_SOURCES = "fused*.py"  # the kernel, its host class and its compile report: what `check` proves
# The samplers' folder: inside the package once the stages move there, else the checkout's top level.
SAMPLER_FOLDERS = (REPO / "conveyor" / "samplers", REPO / "samplers")


def fused_source() -> dict:
    """The fused kernel's source files and one sha256 over their names and bytes."""
    folder = next((f for f in SAMPLER_FOLDERS if (f / "fused_kernel.py").is_file()), None)
    if folder is None:
        return {"files": [], "sha256": None}
    files = sorted(folder.glob(FUSED_SOURCES))
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return {"files": [rel(p) for p in files], "sha256": digest.hexdigest()}


def read_result(results: Path, command: str) -> dict | None:
    path = results / command / "result.json"
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def why_due(command: str, record: dict | None, source: dict) -> str | None:
    """Why `command` should run (None: its result stands)."""
    if record is None:
        return "it has no result yet"
    if not record.get("finished"):
        return f"its result (commit {record.get('commit')}) was cut short: {record.get('stopped', 'the call ended')}"
    cut = [name for name, step in record.get("steps", {}).items() if step.get("status") in ("partial", "killed")]
    if cut:
        return f"its result (commit {record.get('commit')}) has steps stopped at their limits: {', '.join(cut)}"
    measured = (record.get("fused_source") or {}).get("sha256")
    if command == "check" and measured != source["sha256"]:
        return (f"the fused kernel's source changed since its result (commit {record.get('commit')}, "
                f"sha256 {str(measured)[:12]}, now {str(source['sha256'])[:12]})")
    return None


def next_command(results: Path, source: dict | None = None) -> tuple[str | None, str]:
    """(the command to run, why), or (None, why none is due)."""
    source = source or fused_source()
    for command in ORDER:
        reason = why_due(command, read_result(results, command), source)
        if reason:
            return command, f"`{command}`: {reason}"
    return None, f"{', '.join(ORDER)} all have results under {rel(results)} for this fused kernel"
