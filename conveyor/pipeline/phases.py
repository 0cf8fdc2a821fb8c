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

import dataclasses

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
    """The run's sampler, and the layer-wise phases' every-neighbour sampler on the same device;
    both sample with the pipeline's `threads` (None: their own choice)."""

    def __init__(self, sampler, graph, device, threads: int | None = None):
        self.run_sampler = with_threads(built(with_threads(sampler, threads), graph, device), threads)
        self.graph, self.device, self.every, self.threads = graph, device, None, threads

    def for_phase(self, phase: str):
        if not phase.startswith("layerwise"):
            return self.run_sampler
        if self.every is None:
            self.every = build_sampler("bsp", self.graph, EVERY_NEIGHBOUR, device=self.device,
                                       threads=self.threads or "auto")
        return self.every


def with_threads(sampler, threads: int | None):
    """`sampler` set to sample with `threads` torch threads, the pipeline's choice, where it makes
    its own (a `threads` field of a recipe such as SamplerSpec, or a sampler's int `threads`, as
    conveyor's samplers have): the same recipe with that field, or the sampler itself, changed."""
    if threads is None:
        return sampler
    if dataclasses.is_dataclass(sampler) and hasattr(sampler, "build") and "threads" in {
            f.name for f in dataclasses.fields(sampler)}:
        return dataclasses.replace(sampler, threads=threads)
    if type(getattr(sampler, "threads", None)) is int:
        sampler.threads = threads
    return sampler
