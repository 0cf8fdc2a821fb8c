"""Stage 3: owns a run (processes, queues, models, logging). Imports partition, samplers, cache."""
from .run import run, train

__all__ = ["run", "train"]
