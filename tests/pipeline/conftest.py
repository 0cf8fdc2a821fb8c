"""Tests of conveyor/pipeline/: the batch source (serial and async stage processes), its shared memory and room
checks, the pace controller, stage start-up and shutdown, and a user's own sampler or feature source in it.

Shared fixtures for every folder (data_root, cora, synthetic_small, conveyor_log) are in tests/conftest.py."""
