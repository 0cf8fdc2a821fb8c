"""Tests of conveyor/core/: what every stage stands on (errors, regular files only, symlink safety, file maps).

Shared fixtures for every folder (data_root, cora, synthetic_small, conveyor_log) are in tests/conftest.py."""
