"""The top stage: owns a run (the model, the epoch loop, evaluation, logging, checkpoints, DDP
ranks, the comparison with PyG). Imports partition, samplers, cache and pipeline; nothing imports
it but launch.py.

Entry point: `conveyor.trainer.run.train(settings)`, given the sections of the `Settings` the entry
point built (`TrainingSettings`, trainer/settings.py); `conveyor.modes.run` calls it, or
`trainer/distributed/ranks.py` in each DDP rank. Its rooms: `models/`, `loop/`, `outputs/`,
`distributed/`.
"""
from conveyor.core.names import require_own_name

require_own_name(__name__, "conveyor.trainer")
