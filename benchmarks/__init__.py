"""conveyor's benchmarks: each measures a stage against its baseline, a command run as a module from
the repository's root (`python -m benchmarks.<name>`), writing a table and JSON under
`benchmarks/results/`; `benchmarks.gpu` is the GPU validation suite."""
