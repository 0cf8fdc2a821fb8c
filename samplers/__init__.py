"""Stage 1: seeds -> L-hop message-flow graph (`SampledBatch`). Imports only `partition`."""
from __future__ import annotations

import torch

from partition import ConveyorError, Graph

from .batch import SampledBatch

SAMPLERS = ("fused", "bsp", "pyg")


def default_sampler_name(device) -> str:
    """`fused` on CUDA; `bsp` on CPU, where Triton only has its (slow) interpreter."""
    return "fused" if torch.device(device).type == "cuda" else "bsp"


def build_sampler(name: str, graph: Graph, fanouts, device="cpu", seed: int = 0):
    """A sampler whose `sample(seeds)` returns a `SampledBatch` (see DESIGN.md)."""
    if name == "auto":
        name = default_sampler_name(device)
    if name == "bsp":
        from .bsp import BSPSampler
        return BSPSampler(graph, fanouts, device=device, seed=seed)
    if name == "pyg":
        from .pyg import PyGSampler
        return PyGSampler(graph, fanouts, device=device, seed=seed)
    if name == "fused":
        from .fused import FusedSampler
        return FusedSampler(graph, fanouts, device=device, seed=seed)
    raise ConveyorError(f"unknown sampler {name!r}; choose one of {', '.join(SAMPLERS)} "
                        f"(or auto: fused on CUDA, bsp on CPU), e.g. sampler=bsp.")


__all__ = ["SAMPLERS", "SampledBatch", "build_sampler", "default_sampler_name"]
