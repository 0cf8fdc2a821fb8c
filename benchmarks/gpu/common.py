"""What every command shares: the run's context (device, sizes, folders, the budget, the
environment of child processes), running a child under a time limit with its output logged, and
each step's JSON, written the moment the step ends.

The driver itself imports only the standard library and never touches CUDA: everything that
needs torch runs in a child process, so no CUDA context of the driver's sits beside an MPS daemon,
a sanitizer or a benchmark, and a hung kernel can always be killed with its process group.
"""
from __future__ import annotations

import json
import os
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
WORK = CACHE / "gpu-suite"  # what a command installs on its machine
SITE = WORK / "site-packages"  # the prepared wheels, installed
DEFAULT_WHEELS = REPO / ".gpu-wheels"  # --prepare's folder: git-ignored, carried with the tree
GRACE_S = 5  # between a child's SIGTERM and its SIGKILL: within its step's time, like the child's own limit
TRITON_CACHE = WORK / "triton-cache"  # the kernels' compile cache: the carried one (kernel_cache.py), or a fresh one
# A child in a process group of its own, in the driver's session: a time limit ends the whole group
# (a benchmark's workers, a sanitizer's target), and when the device tool ends the call it ends the
# session, so nothing of this call runs on into the next one on a machine still warm.
OWN_GROUP = {"process_group": 0} if sys.version_info >= (3, 11) else {"preexec_fn": os.setpgrp}


class Stopped(BaseException):
    """SIGTERM reached the driver (the call's time ran out): record what is done, then exit.
    A BaseException, so that no step's `except Exception` swallows it."""


@dataclass
class Context:
    device: str  # "cuda" or "cpu"
    tiny: bool  # a small graph and a few batches: the CPU dry run
    label: str  # the device folder's name: h100, cpu-tiny, ...
    results: Path  # benchmarks/results/<label>: check/, speed/, pyg/ and summary.md
    wheels: Path
    command: str = "check"
    budget_s: float = 420.0
    commit: str = "unknown"
    started: float = field(default_factory=time.monotonic)
    step_deadline: float | None = None  # (monotonic) when the step that runs now must be done
    step_limit_s: float = 0.0  # that step's time: its allotment and what earlier steps left
    step_allotment_s: float = 0.0  # its own allotment alone (smoke's hard limit)
    fused_ok: bool = True  # False once the fused kernel failed: later steps leave it alone
    logs: list = field(default_factory=list)  # the logs of the step that runs now
    child: subprocess.Popen | None = None  # the child that runs now (SIGTERM ends it too)

    @property
    def cuda(self) -> bool:
        return self.device == "cuda"

    @property
    def scale(self) -> float:
        """The synthetic graph: products-sized, or a 12K-node one for the dry run."""
        return 0.005 if self.tiny else 1.0

    @property
    def folder(self) -> Path:
        return self.results / self.command

    def left(self) -> float:
        """Seconds left of the command's budget."""
        return self.budget_s - (time.monotonic() - self.started)

    def step_left(self) -> float:
        """Seconds left of the step that runs now (its allotment and what earlier steps left)."""
        deadline = self.step_deadline if self.step_deadline is not None else self.started + self.budget_s
        return deadline - time.monotonic()

    def limit(self, wanted: float | None = None) -> float:
        """A child's time limit: what it asks for, within what its step has left, less the grace
        between SIGTERM and SIGKILL (so the child is gone by the step's end)."""
        room = self.step_left() - GRACE_S
        return max(1.0, room if wanted is None else min(wanted, room))

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
        elif TRITON_CACHE.is_dir():  # the carried compile cache where its key matched, else a fresh one
            env["TRITON_CACHE_DIR"] = str(TRITON_CACHE)
        env.update({k: str(v) for k, v in extra.items()})
        return env


def module(name: str, *args: str) -> list[str]:
    """The command line of one of the suite's or the benchmarks' modules, run from the repo root."""
    return [sys.executable, "-m", name, *args]


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


def run_limited(cmd: list[str], limit_s: float, **kwargs) -> tuple[int | None, str, str]:
    """(exit status, stdout, stderr) of a probe run in a process group of its own; past `limit_s`
    the group gets SIGTERM, then SIGKILL (a probe blocked on a wedged GPU too): exit status None."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace",
                            **OWN_GROUP, **kwargs)
    try:
        out, err = proc.communicate(timeout=max(0.1, limit_s))
        return proc.returncode, out, err
    except subprocess.TimeoutExpired:
        return None, "", f"stopped at its {limit_s:.0f} s limit"
    finally:
        stop_group(proc)
        for stream in (proc.stdout, proc.stderr):
            stream.close()


def capture(cmd: list[str], timeout: float = 30, **kwargs) -> str | None:
    """A command's stdout, or None if it is missing, fails or outlasts `timeout` (TERM, then KILL)."""
    try:
        rc, out, _ = run_limited(cmd, timeout, **kwargs)
    except OSError:
        return None
    return out if rc == 0 else None


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

    @property
    def cut(self) -> bool:
        """Stopped at its time limit (not failed: what it did before counts)."""
        return self.rc is None

    def describe(self) -> str:
        if self.rc is None:
            return f"killed at its {self.limit_s:.0f} s limit (log: {rel(self.log)})"
        return f"exit {self.rc} after {self.seconds:.0f} s (log: {rel(self.log)})"


def run_logged(ctx: Context, name: str, cmd: list[str], limit_s: float | None = None, env: dict | None = None,
               quiet: bool = False, title: str | None = None) -> Outcome:
    """Run `cmd` in the repo, its output to the console (unless `quiet`) and to
    <folder>/logs/<name>.log; past `limit_s` (default and at most: what its step has left) its
    process group gets SIGTERM, then SIGKILL: the stage processes of a pipeline, a benchmark's
    workers."""
    limit_s = ctx.limit(limit_s)
    log = ctx.folder / "logs" / f"{name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    ctx.logs.append(log)
    print(f"$ {title or show(cmd)}   [limit {limit_s:.0f} s, log {rel(log)}]", flush=True)
    start, lines = time.perf_counter(), []
    with open(log, "w") as sink:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env or ctx.env(), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, errors="replace", **OWN_GROUP)
        ctx.child = proc
        reader = threading.Thread(target=_pump, args=(proc, sink, lines, quiet), daemon=True)
        reader.start()
        try:
            rc = proc.wait(timeout=limit_s)
        except subprocess.TimeoutExpired:
            rc = None
        finally:  # at the limit, or on SIGTERM (Stopped): the child's whole group goes
            stop_group(proc)
            ctx.child = None
        reader.join(timeout=10)
    return Outcome(rc, time.perf_counter() - start, log, "".join(lines), limit_s)


def _pump(proc: subprocess.Popen, sink, lines: list, quiet: bool) -> None:
    for line in proc.stdout:
        sink.write(line)
        sink.flush()
        lines.append(line)
        if not quiet:
            sys.stdout.write(line)
            sys.stdout.flush()


def stop_group(proc: subprocess.Popen, grace_s: float = 5) -> None:
    """SIGTERM to the child's group (a benchmark quits the MPS daemon it started), SIGKILL to
    what is left after `grace_s` (a thread blocked in a CUDA sync does not die of SIGTERM); also
    the group's members that outlive a child which has already exited."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        try:
            proc.wait(timeout=grace_s)
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


def read_json(path) -> dict | None:
    """A child's JSON file; None if it wrote none, or was killed while writing it."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError):
        return None


def python_json(ctx: Context, code: str, *args: str, timeout: float = 120) -> dict:
    """Run a Python snippet that prints one JSON object as its last line; {"error": ...} if not.
    Within its step's time, TERM then KILL at the limit (a probe stuck on a wedged GPU)."""
    limit = ctx.limit(timeout)
    rc, out, err = run_limited([sys.executable, "-c", code, *args], limit, cwd=REPO, env=ctx.env())
    if rc is None:
        return {"error": f"timed out after {limit:.0f} s"}
    found = last_json(out) if rc == 0 else None
    return found if found is not None else {"error": (err or out).strip()[-2000:]}


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
    path = ctx.folder / f"{step}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    result = {"step": step, "command": ctx.command, "device": ctx.label, "commit": ctx.commit,
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


def failed(result: dict, reason: str) -> dict:
    return {**result, "status": "failed", "reason": reason}


def partial(result: dict, done: str) -> dict:
    """A step cut by its time limit with nothing failed: what it finished counts, and `next`
    runs its command again."""
    return {**result, "status": "partial", "reason": f"partial: {done}, 0 failed, stopped at its limit"}
