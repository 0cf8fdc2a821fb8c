"""The sampler's settings (`sampler.*`), declared once: default, meaning and accepted values of each
key (core/fields.py)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from conveyor.core.fields import REQUIRED, Section, boolean, choice, parsed, setting
from conveyor.samplers.validation import check_fanouts

SAMPLERS = ("fused", "bsp", "pyg")


@dataclass(frozen=True, kw_only=True)
class SamplerSettings(Section):
    SECTION: ClassVar[str] = "sampler"
    OPTIONS: ClassVar[dict] = {  # the config group's options (conf/sampler/*.yaml), for --help
        "auto": "bsp, on CPU and CUDA, until fused has passed the GPU validation suite (benchmarks/gpu/)",
        "bsp": "one hop at a time with torch ops (CPU or CUDA): the reference",
        "fused": "all hops in one persistent Triton kernel (CUDA, opt-in until validated on a GPU; CPU only "
                 "under TRITON_INTERPRET=1)",
        "pyg": "PyG's neighbour sampler (needs pyg-lib or torch_sparse: pip install conveyor[pyg])"}

    name: str = setting(REQUIRED, "who draws the neighbours (the option chosen in group sampler)",
                        choice(SAMPLERS + ("auto",)))
    fanouts: list = setting(
        [15, 10, 5], "neighbours drawn per node, one per hop; hop 1 (the seeds' own neighbours) first, as "
        "PyG's num_neighbors (DGL's NeighborSampler takes the reverse, [5, 10, 15]); -1: every neighbour",
        parsed(check_fanouts))
    deterministic: bool = setting(True, "fused: canonical order within each hop, so a seed repeats its "
                                        "batches bit for bit", boolean())
