"""Tests of benchmarks/: each benchmark's dry run, and the GPU suite's plan and cache without a GPU.

Shared fixtures for every folder (data_root, cora, synthetic_small, conveyor_log) are in tests/conftest.py."""
