"""Tests of the entry points (conveyor/*.py and launch.py): the command line, `conveyor.fit`, `load` and
`predict`, settings and their checks, the installed wheel, and hostile input at every door.

Shared fixtures for every folder (data_root, cora, synthetic_small, conveyor_log) are in tests/conftest.py."""
