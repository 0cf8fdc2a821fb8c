"""Tests of conveyor/trainer/: the training loop, models and layers, evaluation, checkpoints and resume, the
run folder, distributed ranks.

Shared fixtures for every folder (data_root, cora, synthetic_small, conveyor_log) are in tests/conftest.py."""
