"""What every step shares: the run's context (device, sizes, folders, the environment for child
processes), running a child under a time limit with its output logged, and the step's JSON.

The driver itself imports only the standard library and never touches CUDA: everything that
needs torch runs in a child process, so no CUDA context of the driver's sits beside an MPS daemon,
a sanitizer or a benchmark.
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
WORK = CACHE / "gpu-suite"  # offline installs and builds: kept between runs on one machine
SITE = WORK / "site-packages"  # the prepared wheels, installed
PYG_EXT = WORK / "pyg-ext"  # torch_scatter and torch_sparse, built here for the PyG reference
DEFAULT_WHEELS = REPO / ".gpu-wheels"  # --prepare's default: git-ignored, carried with the tree


@dataclass
class Context:
    device: str  # "cuda" or "cpu"
    tiny: bool  # a small graph and a few batches: the CPU dry run
    label: str  # the results folder's name: h100, cpu-tiny, ...
    results: Path
    wheels: Path
    started: float = field(default_factory=time.time)

    @property
    def cuda(self) -> bool:
        return self.device == "cuda"

    @property
    def scale(self) -> float:
        """The synthetic graph: products-sized, or a 12K-node one for the dry run."""
        return 0.005 if self.tiny else 1.0

    def env(self, **extra) -> dict:
        """The environment of a child: our offline installs first on the path, the repo's data
        root, and (on CPU) Triton's interpreter so the fused kernel can run at all."""
        env = dict(os.environ)
        paths = [str(p) for p in (REPO, SITE, PYG_EXT) if p.is_dir()]
        env["PYTHONPATH"] = os.pathsep.join(paths + [env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        env.setdefault("CONVEYOR_DATA_ROOT", str(DATA_ROOT))
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

    @property
    def ok(self) -> bool:
        return self.rc == 0

    def describe(self) -> str:
        if self.rc is None:
            return f"timed out after {self.seconds:.0f} s (log: {self.log})"
        return f"exit {self.rc} after {self.seconds:.0f} s (log: {self.log})"


def run_logged(ctx: Context, name: str, cmd: list[str], limit_s: float, env: dict | None = None,
               quiet: bool = False, title: str | None = None) -> Outcome:
    """Run `cmd` in the repo, its output to the console (unless `quiet`) and to
    results/logs/<name>.log; past `limit_s` its whole process group gets SIGTERM, then SIGKILL:
    the stage processes of a pipeline, a benchmark's workers, a build's compilers."""
    log = ctx.results / "logs" / f"{name}.log"
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
        reader.join(timeout=30)
    return Outcome(rc, time.perf_counter() - start, log, "".join(lines))


def stop_group(proc: subprocess.Popen, grace_s: float = 20) -> None:
    """SIGTERM first, so that a benchmark can quit the MPS daemon it started and ninja can
    delete half-written objects; SIGKILL what is left after `grace_s`."""
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


def python_json(ctx: Context, code: str, timeout: float = 120) -> dict:
    """Run a Python snippet that prints one JSON object as its last line; {"error": ...} if not."""
    try:
        proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=ctx.env(),
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    if proc.returncode != 0 or not proc.stdout.strip():
        return {"error": (proc.stderr or proc.stdout).strip()[-2000:]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def commit(wheels: Path = DEFAULT_WHEELS) -> str:
    """The checkout's commit (+ "-dirty"), or, in a copy of the tree without .git, the one
    --prepare recorded in `wheels`."""
    head = capture(["git", "rev-parse", "--short=12", "HEAD"], cwd=REPO)
    if head:
        dirty = capture(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO)
        return head.strip() + ("-dirty" if dirty else "")
    manifest = wheels / "manifest.json"
    if manifest.exists():
        return json.loads(manifest.read_text()).get("commit", "unknown") + " (as recorded by --prepare)"
    return "unknown"


def write_result(ctx: Context, step: str, result: dict) -> Path:
    path = ctx.results / f"{step}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    result = {"step": step, "device": ctx.label, "commit": commit(ctx.wheels),
              "time": time.strftime("%Y-%m-%d %H:%M:%S %Z"), **result}
    path.write_text(json.dumps(result, indent=1, default=str))
    return path


def read_result(ctx: Context, step: str) -> dict | None:
    path = ctx.results / f"{step}.json"
    return json.loads(path.read_text()) if path.exists() else None


def rel(path: Path) -> str:
    """A path as the commands in the summary show it: relative to the repo where it can be."""
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
