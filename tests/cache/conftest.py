"""Tests of conveyor/cache/: the degree-ordered static cache, its host tier over mapped files, and its sizing.

Shared fixtures for every folder (data_root, cora, synthetic_small, conveyor_log) are in tests/conftest.py."""
