"""Runs as a user starts them: `launch.py` in a subprocess, `train` in-process, and the refusals they give."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import psutil
import pytest
import torch

from conveyor.core import ConveyorError
from conveyor.trainer.run import train
from tests.helpers.common import REPO, make_config


def launch(*args, timeout=600, env=None):
    return subprocess.run([sys.executable, str(REPO / "launch.py"), "trainer.progress=false",
                           "run.device=cpu", *args], capture_output=True, text=True, timeout=timeout,
                          cwd=REPO, env=env)


def assert_clear_error(result, *words):
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    assert "Traceback" not in result.stderr, result.stderr
    message = result.stderr.strip().splitlines()[-1]
    assert message.startswith("conveyor: error:"), result.stderr
    for word in words:
        assert word in message, (word, message)


def run(tmp_path, name, *overrides):
    cfg = make_config(f"run.out_dir={tmp_path / name}", *overrides)
    result = train(cfg)
    metrics = json.loads((tmp_path / name / "metrics.json").read_text())
    assert result.final == metrics["final"] and result.history == metrics["epochs"]
    return result.final, metrics


def refusal(*overrides) -> str:
    """The message a run with these overrides is refused with (composing or checking)."""
    with pytest.raises(ConveyorError) as error:
        make_config(*overrides)
    return str(error.value)


def write_custom(directory: Path, **arrays) -> Path:
    """Arrays as .npy, tensors as .pt."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, value in arrays.items():
        if isinstance(value, torch.Tensor):
            torch.save(value, directory / f"{name}.pt")
        else:
            np.save(directory / f"{name}.npy", value)
    return directory


def shm_names(pids) -> set[str]:
    """The /dev/shm files these processes have mapped (named semaphores, shared segments)."""
    names = set()
    for pid in pids:
        try:
            maps = Path(f"/proc/{pid}/maps").read_text()
        except OSError:
            continue
        names.update(line.split()[-1] for line in maps.splitlines()
                     if "/dev/shm/" in line and not line.endswith("(deleted)"))
    return names


def assert_gone(pids, timeout=5.0):
    procs = []
    for pid in pids:
        try:
            procs.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(procs, timeout=timeout)
    assert not alive, f"processes left behind: {alive}"


def train_both(tmp_path, *overrides):
    runs = {}
    for mode, extra in (("serial", []), ("async", ["pipeline.pace.interval=3"])):
        out = tmp_path / mode
        # every batch's loss, to compare them one by one; evaluation through the pipeline too
        train(make_config(f"pipeline={mode}", f"run.out_dir={out}", "trainer.log_every=1",
                          "trainer.inference=sampled", *extra, *overrides))
        losses, tags = tensorboard_losses(out)
        runs[mode] = (json.loads((out / "metrics.json").read_text()), losses, tags, out)
    return runs["serial"], runs["async"]


def tensorboard_losses(out_dir) -> list[float]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    events = EventAccumulator(str(out_dir))
    events.Reload()
    return [e.value for e in events.Scalars("batch/loss")], events.Tags()["scalars"]
