"""The top stage: owns a run (the model, the epoch loop, evaluation, logging, checkpoints, DDP
ranks, the comparison with PyG). Imports partition, samplers, cache and pipeline; nothing imports
it but launch.py.

Entry points: `trainer.modes.run(cfg)` (what launch.py calls) and `trainer.run.train(cfg)`.
"""
