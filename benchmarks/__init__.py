"""conveyor's benchmarks: each module is a command run from the repository root
(`python -m benchmarks.<name>`); `benchmarks.gpu` is the GPU validation suite."""
