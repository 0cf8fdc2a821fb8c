"""Tests of conveyor/partition/: the graph layout, datasets and their builds (in memory and mapped
on disk), partitioning.

Shared fixtures for every folder (data_root, cora, synthetic_small, conveyor_log) are in tests/conftest.py."""
