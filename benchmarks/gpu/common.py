"""What every phase shares: the run's context (device, sizes, folders, the phase's deadline, the
environment of child processes), running a child under a time limit with its output logged, and
each step's JSON, written the moment the step ends.

The driver itself imports only the standard library and never touches CUDA: everything that
needs torch runs in a child process, so no CUDA context of the driver's sits beside an MPS daemon,
a sanitizer or a benchmark, and a hung kernel can always be killed with its process group.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / ".cache"
DATA_ROOT = CACHE / "data"  # the tests' data root too (tests/conftest.py): one copy of each graph
WORK = CACHE / "gpu-suite"  # what a phase installs on its machine
SITE = WORK / "site-packages"  # the prepared wheels, installed
DEFAULT_WHEELS = REPO / ".gpu-wheels"  # --prepare's folder: git-ignored, carried with the tree
RESERVE_S = 25  # kept back from every step for the next steps' records and the packing


@dataclass
class Context:
    device: str  # "cuda" or "cpu"
    tiny: bool  # a small graph and a few batches: the CPU dry run
    label: str  # the device folder's name: h100, cpu-tiny, ...
    results: Path  # benchmarks/results/<label>: phase1/, phase2/, phase3/ and summary.md
    wheels: Path
    phase: int = 0
    budget_s: float = 530.0  # the phase's time: the device tool's 10 minutes less start-up and transfers
    commit: str = "unknown"
    started: float = field(default_factory=time.monotonic)
    fused_ok: bool = True  # False once the smoke launch failed: later steps leave the kernel alone

    @property
    def cuda(self) -> bool:
        return self.device == "cuda"

    @property
    def scale(self) -> float:
        """The synthetic graph: products-sized, or a 12K-node one for the dry run."""
        return 0.005 if self.tiny else 1.0

    @property
    def phase_dir(self) -> Path:
        return self.results / f"phase{self.phase}"

    def left(self) -> float:
        """Seconds left of the phase's budget."""
        return self.budget_s - (time.monotonic() - self.started)

    def limit(self, wanted: float) -> float:
        """A child's time limit: what it asks for, within what the phase has left."""
        return max(1.0, min(wanted, self.left() - RESERVE_S))

    def env(self, **extra) -> dict:
        """The environment of a child: our offline installs first on the path, the repo's data
        root, and (on CPU) Triton's interpreter so the fused kernel can run at all."""
        env = dict(os.environ)
        paths = [str(p) for p in (REPO, SITE) if p.is_dir()]
        env["PYTHONPATH"] = os.pathsep.join(paths + [env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        env.setdefault("CONVEYOR_DATA_ROOT", str(DATA_ROOT))
        env["PYTHONUNBUFFERED"] = "1"  # a child killed at its limit has printed what it did
        if not self.cuda:
            env.setdefault("TRITON_INTERPRET", "1")
        env.update({k: str(v) for k, v in extra.items()})
        return env


def device_label(device: str, tiny: bool) -> str:
    """`h100` for an NVIDIA H100 ..., `cpu` on CPU; `-tiny` for the dry-run sizes."""
    label = "cpu"
    if device == "cuda":
        name = gpu_name() or "cuda"
        words = [w for w in name.lower().replace("nvidia", "").split() if w]
        label = words[0] if words else "cuda"
    return label + ("-tiny" if tiny else "")


def gpu_name() -> str | None:
    out = capture(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"])
    return out.splitlines()[0].strip() if out else None


def capture(cmd: list[str], timeout: float = 30, **kwargs) -> str | None:
    """A command's stdout, or None if it is missing or fails."""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kwargs)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout if proc.returncode == 0 else None


@dataclass
class Outcome:
    rc: int | None  # None: killed at the time limit
    seconds: float
    log: Path
    output: str
    limit_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.rc == 0

    def describe(self) -> str:
        if self.rc is None:
            return f"killed at its {self.limit_s:.0f} s limit (log: {rel(self.log)})"
        return f"exit {self.rc} after {self.seconds:.0f} s (log: {rel(self.log)})"


def run_logged(ctx: Context, name: str, cmd: list[str], limit_s: float, env: dict | None = None,
               quiet: bool = False, title: str | None = None) -> Outcome:
    """Run `cmd` in the repo, its output to the console (unless `quiet`) and to
    <phase>/logs/<name>.log; past `limit_s` (within the phase's budget) its whole process group
    gets SIGTERM, then SIGKILL: the stage processes of a pipeline, a benchmark's workers."""
    limit_s = ctx.limit(limit_s)
    log = ctx.phase_dir / "logs" / f"{name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    print(f"$ {title or show(cmd)}   [limit {limit_s:.0f} s, log {rel(log)}]", flush=True)
    start = time.perf_counter()
    lines: list[str] = []
    with open(log, "w") as sink:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env or ctx.env(), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, errors="replace",
                                start_new_session=True)

        def pump():
            for line in proc.stdout:
                sink.write(line)
                sink.flush()
                lines.append(line)
                if not quiet:
                    sys.stdout.write(line)
                    sys.stdout.flush()

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        try:
            rc = proc.wait(timeout=limit_s)
        except subprocess.TimeoutExpired:
            rc = None
            stop_group(proc)
        reader.join(timeout=10)
    return Outcome(rc, time.perf_counter() - start, log, "".join(lines), limit_s)


def stop_group(proc: subprocess.Popen, grace_s: float = 10) -> None:
    """SIGTERM first, so that a benchmark can quit the MPS daemon it started; SIGKILL what is
    left after `grace_s` (a thread blocked in a CUDA sync does not die of SIGTERM)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace_s)
            return
        except subprocess.TimeoutExpired:
            continue


def last_json(output: str) -> dict | None:
    """The last line of a child's output that is a JSON object (targets print one per stage)."""
    for line in reversed(output.splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                continue
    return None


def python_json(ctx: Context, code: str, timeout: float = 120) -> dict:
    """Run a Python snippet that prints one JSON object as its last line; {"error": ...} if not."""
    try:
        proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=ctx.env(),
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    found = last_json(proc.stdout) if proc.returncode == 0 else None
    return found if found is not None else {"error": (proc.stderr or proc.stdout).strip()[-2000:]}


def find_commit(wheels: Path = DEFAULT_WHEELS) -> str:
    """The checkout's commit (+ "-dirty"), or, in a copy of the tree without .git, the one
    --prepare recorded in `wheels` (marked so)."""
    head = capture(["git", "rev-parse", "--short=12", "HEAD"], cwd=REPO)
    if head:
        dirty = capture(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO)
        return head.strip() + ("-dirty" if dirty else "")
    manifest = wheels / "manifest.json"
    if manifest.exists():
        return json.loads(manifest.read_text()).get("commit", "unknown") + " (as recorded by --prepare)"
    return "unknown"


def write_result(ctx: Context, step: str, result: dict) -> Path:
    path = ctx.phase_dir / f"{step}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    result = {"step": step, "phase": ctx.phase, "device": ctx.label, "commit": ctx.commit,
              "time": time.strftime("%Y-%m-%d %H:%M:%S %Z"), **result}
    path.write_text(json.dumps(result, indent=1, default=str))
    return path


def rel(path: Path) -> str:
    """A path as the results show it: relative to the repo where it can be."""
    try:
        return str(Path(path).resolve().relative_to(REPO))
    except ValueError:
        return str(path)


def show(cmd: list[str]) -> str:
    """A command as the results show it: `python` for this interpreter, paths relative to the repo."""
    def one(arg: str) -> str:
        if arg == sys.executable:
            return "python"
        key, eq, value = arg.partition("=") if "=" in arg and not arg.startswith("/") else ("", "", arg)
        return key + eq + (rel(value) if value.startswith("/") else value)
    return " ".join(one(a) for a in cmd)


def which(name: str) -> str | None:
    return shutil.which(name)


def failed(result: dict, reason: str) -> dict:
    return {**result, "status": "failed", "reason": reason}
