"""Tests of conveyor/samplers/: bsp, the fused Triton kernel (under TRITON_INTERPRET=1 on CPU, and its
threaded-programs harness, threaded_interpreter.py), PyG's samplers handed through, and the contracts every
sampler keeps (samplers/checks.py). Graph builders and draw statistics: tests/helpers/.

Shared fixtures for every folder (data_root, cora, synthetic_small, conveyor_log) are in tests/conftest.py."""
