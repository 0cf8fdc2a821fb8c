"""The top stage: owns a run (the model, the epoch loop, evaluation, logging, checkpoints, DDP
ranks, the comparison with PyG). Imports partition, samplers, cache and pipeline; nothing imports
it but launch.py.

Entry points: `trainer.modes.run(settings)` (what the conveyor command calls) and
`trainer.run.train(settings)`, given the `Settings` (trainer/settings.py) the entry point built.
"""
from conveyor.core.names import require_own_name

require_own_name(__name__, "conveyor.trainer")
