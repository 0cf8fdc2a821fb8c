"""What a `run()` phase changes in a batch source: which sampler draws, and whether features are
gathered. `train` and `eval` draw with the run's sampler and gather every node's features.

The layer-wise evaluation (trainer/loop/layerwise.py) hands the pipeline its batches too, so that the
stage processes draw and gather them while the trainer computes, as they do for training: each
layer's targets in batches, each batch with every in-neighbour of its targets, one hop (a bsp
sampler with fanout -1, built where the run's sampler is, at its first use: no random draws).
Layer 1 reads the features of the batch's nodes (`layerwise`); a later layer reads the previous
layer's output, which only the trainer has, so its batches come without features
(`layerwise-hidden`: x has no rows).
"""
from __future__ import annotations

from conveyor.pipeline.batch import built
from conveyor.samplers import build_sampler

PHASES = ("train", "eval", "layerwise", "layerwise-hidden")
EVERY_NEIGHBOUR = [-1]  # one hop, every in-neighbour of each seed


def check_phase(phase: str) -> str:
    if phase not in PHASES:
        raise ValueError(f"run(phase={phase!r}): a phase is one of {', '.join(PHASES)}")
    return phase


def gathers_features(phase: str) -> bool:
    return phase != "layerwise-hidden"


def series(phase: str) -> str:
    """The TensorBoard series a phase's batches count in: `pipeline/` or `pipeline_eval/`."""
    return "train" if phase == "train" else "eval"


class PhaseSamplers:
    """The run's sampler, and the layer-wise phases' every-neighbour sampler on the same device."""

    def __init__(self, sampler, graph, device):
        self.run_sampler = built(sampler, graph, device)
        self.graph, self.device, self.every = graph, device, None

    def for_phase(self, phase: str):
        if not phase.startswith("layerwise"):
            return self.run_sampler
        if self.every is None:
            self.every = build_sampler("bsp", self.graph, EVERY_NEIGHBOUR, device=self.device)
        return self.every
