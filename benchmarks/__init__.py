"""The benchmarks: each measures a stage against its baseline, run as a module of this package from
the repository's root (`python -m benchmarks.sampling ...`), writing a table and JSON under
`benchmarks/results/`."""
