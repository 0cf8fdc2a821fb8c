"""The sampler's settings (`sampler.*`), declared once: default, meaning and accepted values of each
key (core/fields.py). The keys every sampler takes are `SamplerSettings`; a sampler with options of
its own declares them in a subclass, named by its registry entry (samplers/registry.py: fused's
`FusedSettings`), as a dataset's own options subclass `DataSettings`."""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import ClassVar, Optional

from conveyor.core import ConveyorError
from conveyor.core.fields import REQUIRED, Rule, Section, boolean, choice, parsed, setting, text
from conveyor.samplers.registry import AUTO, DRAWS, REGISTRY, register_sampler, resolve_name
from conveyor.samplers.validation import check_fanouts


def registered_name(value) -> bool:
    """Whether `value` names a sampler (auto, or one registered: samplers/registry.py)."""
    return type(value) is str and (value == AUTO or value in REGISTRY)


def sampler_names() -> str:
    return ", ".join([AUTO, *REGISTRY])


class SamplerName(Rule):
    """A registered sampler's name, listed when refused (the registry is read when asked, so a
    sampler registered after this module loaded is one too)."""

    def __init__(self):
        super().__init__("", registered_name)

    def problem(self, key: str, value):
        if registered_name(value):
            return None
        return (f"{key} must be one of {sampler_names()}, got {value!r}; your own sampler is "
                f"sampler._target_=module.Class (docs/contributing.md).")


@dataclass(frozen=True, kw_only=True)
class SamplerSettings(Section):
    SECTION: ClassVar[str] = "sampler"
    OPTIONS: ClassVar[dict] = {  # the config group's options (conf/sampler/*.yaml), for --help; the
        # others' descriptions are their registry entries' (samplers/registry.py)
        "auto": "bsp, on CPU and CUDA, until fused has passed the GPU validation suite (benchmarks/gpu/)"}

    name: str = setting(REQUIRED, "who draws the neighbours (the option chosen in group sampler); any name for "
                                  "a sampler._target_", text())
    fanouts: list = setting(
        [15, 10, 5], "neighbours drawn per node, one per hop; hop 1 (the seeds' own neighbours) first, as "
        "PyG's num_neighbors (DGL's NeighborSampler takes the reverse, [5, 10, 15]); -1: every neighbour",
        parsed(check_fanouts))
    draws: str = setting(
        "per_node", "how the nodes draw their neighbours: per_node, each node once, at the hop after the one that "
        "first reached it, reused by every later layer (PyG's NeighborLoader: the same subgraph through "
        "conveyor.NeighborLoader, fit() and the command line) | per_hop, every node reached so far again at each "
        "hop, independently (message-flow graphs; fused draws only so, its default)", choice(DRAWS))
    _target_: Optional[str] = setting(None, "your own sampler's class (module.Class, registered with "
                                            "register_sampler: docs/contributing.md); null: the sampler name",
                                      text(nullable=True, hint="a class, e.g. my.module.MySampler"))

    def check(self) -> None:
        if self._target_ is None:
            problem = SamplerName().problem("sampler.name", self.name)
            if problem:
                raise ConveyorError(problem)


@dataclass(frozen=True, kw_only=True)
class FusedSettings(SamplerSettings):
    """`sampler=fused`'s own option, and its draws: per hop only (the kernel's)."""
    draws: str = setting("per_hop", "fused draws every reached node at every hop: per_hop only", choice(DRAWS))
    deterministic: bool = setting(True, "fused: canonical order within each hop, so a seed repeats its "
                                        "batches bit for bit", boolean())


def sampler_settings(values: dict) -> type:
    """The settings class of the sampler `values` name: its registry entry's own (samplers/registry.py),
    or every sampler's for a `_target_` or a name no entry has (refused by name as it is built)."""
    entry = REGISTRY.get(resolve_name(values.get("name"))) if not values.get("_target_") else None
    return (entry.options if entry is not None else None) or SamplerSettings


def own_options(settings: SamplerSettings) -> dict:
    """A sampler's own options (its settings beyond the shared ones), as keywords."""
    shared = {f.name for f in fields(SamplerSettings)}
    return {f.name: getattr(settings, f.name) for f in fields(settings) if f.name not in shared}


# conveyor's own samplers: each its module (the target, imported when one is built) and its
# conf/sampler YAML; what it can draw is asked of this entry alone (samplers/registry.py).
register_sampler("bsp", "conveyor.samplers.bsp_family.build_bsp", typed=True, weights=True, replace=True,
                 disjoint=True, temporal=True, draws=DRAWS,
                 help="one hop at a time with torch ops (CPU or CUDA): the reference")
register_sampler("fused", "conveyor.samplers.fused.FusedSampler", weights=True, extra="triton", options=FusedSettings,
                 help="all hops in one persistent Triton kernel (CUDA, opt-in until validated on a GPU; CPU only "
                      "under TRITON_INTERPRET=1)")
register_sampler("pyg", "conveyor.samplers.pyg.PyGSampler", weights=True, replace=True, draws=("per_node",),
                 help="PyG's neighbour sampler (needs pyg-lib or torch_sparse: pip install conveyor[pyg])")
SamplerSettings.OPTIONS.update({name: entry.help for name, entry in REGISTRY.items()})  # for --help
