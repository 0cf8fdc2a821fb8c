"""Tests of conveyor/compare/: `mode=compare`, conveyor's run beside PyG's reference loop.

Shared fixtures for every folder (data_root, cora, synthetic_small, conveyor_log) are in tests/conftest.py."""
