"""Tests of conveyor/loader/: conveyor.NeighborLoader and LinkNeighborLoader, and PyG's own test files run
against them with only the import changed (tests/data/pyg/, through tests/helpers/pyg_spec.py).

Shared fixtures for every folder (data_root, cora, synthetic_small, conveyor_log) are in tests/conftest.py."""
from __future__ import annotations

import pytest

from tests.helpers import pyg_get_dataset


@pytest.fixture(scope="session")
def get_dataset():
    """PyG's own conftest fixture of that name, which its loader tests ask for."""
    return pyg_get_dataset()
