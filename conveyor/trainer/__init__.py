"""The trainer stage: owns a run (the model, the epoch loop, evaluation, logging, checkpoints, DDP
ranks). Imports core, partition, samplers, cache, pipeline and loader; imported by compare/ (the
comparison with PyG, mode=compare) and the entry modules of conveyor/ (docs/design.md §1).

Entry point: `conveyor.trainer.run.train(settings, ctx=None)`, given the sections of the `Settings` the
entry point built (`TrainingSettings`, trainer/settings.py) and who this process trains as
(trainer/context.py); `conveyor.modes.run` and `conveyor.fit` call it, or
`trainer/distributed/ranks.py` in each DDP rank. Its rooms: `models/` (the built-in ones:
trainer/model_registry.py), `loop/`, `outputs/`, `distributed/`.
"""
from conveyor.core.names import require_own_name

require_own_name(__name__, "conveyor.trainer")
