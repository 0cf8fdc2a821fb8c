"""Ranks that check one fresh run.out_dir at the same time never refuse each other: each probe
makes `checkpoints/` and removes it again, and a check that tested exists() then is_dir() in two
steps could see it made by one and removed by the other ("exists and is not a directory"; 5 in
80,000 concurrent checks in issue #39). The checks are hammered here from several processes at
once, for a bounded time, and must never refuse; a real file in the way still is."""
import multiprocessing
import os
import time
from pathlib import Path

import pytest

from conveyor.core import ConveyorError
from conveyor.core.symlink_safety import own_folder
from conveyor.trainer.config import check_out_dir

HAMMER_S = 1.5
WORKERS = 4


def _check_out_dir_until(out_dir: str, until: float) -> tuple:
    refusals, checks = [], 0
    while time.time() < until:
        checks += 1
        try:
            check_out_dir(Path(out_dir))
        except ConveyorError as error:
            refusals.append(str(error))
    return checks, refusals


def _own_folder_until(folder: str, until: float) -> tuple:
    refusals, checks = [], 0
    while time.time() < until:
        checks += 1
        try:
            own_folder(Path(folder))
        except ConveyorError as error:
            refusals.append(str(error))
        try:
            os.rmdir(folder)  # as a probe does: the folder comes and goes under the others
        except OSError:
            pass
    return checks, refusals


def _hammer(target, path: Path) -> tuple:
    until = time.time() + HAMMER_S
    with multiprocessing.get_context("fork").Pool(WORKERS) as pool:
        results = pool.starmap(target, [(str(path), until)] * WORKERS)
    return sum(c for c, _ in results), [r for _, rs in results for r in rs]


def test_concurrent_probes_of_one_fresh_out_dir_never_refuse(tmp_path):
    out_dir = tmp_path / "run"
    out_dir.mkdir()  # as the lock or Hydra made it: each probe now makes and removes checkpoints/
    checks, refusals = _hammer(_check_out_dir_until, out_dir)
    assert checks > 1000 and refusals == [], (checks, refusals[:3])


def test_concurrent_own_folder_never_refuses_a_folder_that_comes_and_goes(tmp_path):
    checks, refusals = _hammer(_own_folder_until, tmp_path / "run" / "checkpoints")
    assert checks > 1000 and refusals == [], (checks, refusals[:3])


def test_a_file_in_the_way_is_still_refused(tmp_path):
    (tmp_path / "checkpoints").write_text("not a folder")
    with pytest.raises(ConveyorError, match="checkpoints exists and is not a directory"):
        check_out_dir(tmp_path)
    with pytest.raises(ConveyorError, match="is not a folder"):
        own_folder(tmp_path / "checkpoints")
    with pytest.raises(ConveyorError, match="is not a folder"):
        own_folder(tmp_path / "checkpoints" / "deeper")
