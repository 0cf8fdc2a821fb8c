"""The GPU validation suite: `python -m benchmarks.gpu.device check|speed|pyg|next` on a bare GPU
machine, `--prepare` here first (benchmarks/gpu/README.md)."""
