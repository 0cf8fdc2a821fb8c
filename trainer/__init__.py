"""Stage 3: owns a run (processes, queues, models, logging). Imports partition, samplers, cache.

Entry points: `trainer.run.run(cfg)` (what launch.py calls) and `trainer.run.train(cfg)`. Nothing
is imported here, so the pipeline's stage processes, which import `trainer.pipeline`, start
without loading the models (PyG) they never use.
"""
