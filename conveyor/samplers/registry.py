"""The samplers: an open set with one registry. Each entry says what its sampler can draw, and every
check of that (a typed graph, weights, replacement, disjoint subgraphs, PyG's per-node draws, the
extra it needs) is asked of the entry here, by the command line, `fit()` and `NeighborLoader` alike.

A sampler is a class (or function) called as `cls(graph, fanouts, device=, seed=, threads=, ...)`
with the keywords its entry declares it can take, whose `sample(seeds)` returns a `SampledBatch`
(samplers/protocol.py). It joins the set with `register_sampler`, as GraphBolt's
`@functional_datapipe` registers a datapipe and torchtitan's registry a model:

    @register_sampler("mine", weights=True)          # in your module
    class MySampler: ...                              # sampler._target_=your.module.MySampler

conveyor's own are registered by name beside their settings (samplers/settings.py), their modules
imported only when one is built (pyg's imports PyG, fused's Triton). A sampler's own options are its
own settings class (`options`: a `SamplerSettings` subclass, e.g. fused's `deterministic`), passed
to it as keywords.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

from conveyor.core import ConveyorError
from conveyor.core.extras import require_extra
from conveyor.core.targets import load_target, registered, registrar

AUTO = "auto"  # bsp, on CPU and (for now) on CUDA too: samplers/registry.py resolve_name
DRAWS = ("per_hop", "per_node")  # sampler.draws: conveyor's message-flow graphs | PyG's NeighborLoader's


@dataclass(frozen=True)
class SamplerEntry:
    """One sampler and what it can draw: `typed` graphs (partition/hetero.py), by edge `weights`
    (weight_attr), with `replace`ment, `disjoint` subgraphs, by time (`temporal`, PyG's time_attr:
    each seed's own subgraph, nothing later than its time), and how its nodes draw (`draws`, of
    DRAWS: per_hop, every node reached at every later hop; per_node, each node once, as PyG's
    NeighborLoader); `extra`: the module it needs that conveyor installs on request (core/extras.py)."""
    name: str
    target: str  # module.attribute: the class or function that builds it
    help: str = ""
    options: Optional[type] = None  # its own settings (a SamplerSettings subclass); None: the shared keys only
    typed: bool = False
    weights: bool = False
    replace: bool = False
    disjoint: bool = False
    draws: tuple = ("per_hop",)  # one of them: it takes no keyword; both: per_node is asked with once=True
    extra: Optional[str] = None
    temporal: bool = False  # PyG's time_attr: nothing later than the seed's time (samplers/temporal.py)

    def check(self, typed: bool = False, weight_attr: Optional[str] = None, replace: bool = False,
              disjoint: bool = False, draws: str = "per_hop", where: str = "", temporal: bool = False) -> None:
        """Refuse, before any work, what this sampler cannot draw: the one check of a sampler's
        options, whichever door (command line, fit(), NeighborLoader) asked."""
        asked = {"a typed graph": ("typed", typed), "weight_attr": ("weights", weight_attr is not None),
                 "replace=True (sampling with replacement)": ("replace", replace),
                 "disjoint=True (each seed its own subgraph)": ("disjoint", disjoint),
                 "temporal sampling (time_attr)": ("temporal", temporal)}
        wanted = [key for key, on in asked.values() if on]
        missing = [what for what, (key, on) in asked.items() if on and not getattr(self, key)]
        if draws not in self.draws:
            missing.append(f"sampler.draws={draws} (it draws {' or '.join(self.draws)})")
        if missing:
            able = [e.name for e in REGISTRY.values() if all(getattr(e, k) for k in wanted) and draws in e.draws]
            raise ConveyorError(f"sampler {self.name}{where} does not draw {' and '.join(missing)}; choose a "
                                f"sampler that does ({', '.join(able) or 'none of conveyor own'}), or leave that "
                                f"out (torch_geometric.loader.NeighborLoader draws every PyG option).")
        check_together(typed, weight_attr is not None, replace, disjoint, draws, temporal,
                       f"sampler {self.name}{where}")
        if self.extra is not None:  # named as the door that asked names it
            door = f"node_sampler='{self.name}'" if "node_sampler" in where else f"sampler={self.name}"
            require_extra(self.extra, door)

    def draw_keywords(self, draws: str) -> dict:
        """How `draws` is asked of the sampler: `once=True` for per_node, where it draws both ways."""
        return {"once": True} if draws == "per_node" and len(self.draws) > 1 else {}

    def build(self, graph, fanouts, **keywords):
        """The sampler over `graph`: only the keywords it takes are passed (those asked for were
        checked against the entry first)."""
        return load_target(self.target, self.name)(graph, fanouts, **keywords)


def check_together(typed: bool, weights: bool, replace: bool, disjoint: bool, draws: str, temporal: bool,
                   who: str) -> None:
    """Refuse options that no sampler draws together (each alone may be drawn)."""
    clashes = []
    if replace and (typed or weights or temporal):
        clashes.append("replace=True on a typed graph, with weight_attr or by time (it is drawn uniformly, on a "
                       "graph of one node and edge type)")
    if (disjoint or temporal) and weights:
        clashes.append("disjoint=True or time_attr with weight_attr (each seed's own subgraph is drawn uniformly)")
    if disjoint and draws != "per_node":
        clashes.append("disjoint=True with sampler.draws=per_hop (each seed's own subgraph is drawn per node)")
    if clashes:
        raise ConveyorError(f"{who} is asked for {' and '.join(clashes)}: no sampler draws these together; leave "
                            f"one of them out (torch_geometric.loader.NeighborLoader draws every PyG option).")


REGISTRY: dict = {}


def register_sampler(name: str, target: Optional[str] = None, **entry) -> Callable:
    """Register sampler `name` (`entry`: SamplerEntry's fields). With `target` ("module.attr") it
    registers now; without, it is a decorator of the class or function that builds the sampler."""
    return registrar(REGISTRY, name, target, lambda n, t: SamplerEntry(n, t, **entry), "sampler_entry")


def resolve_name(name: str, device=None) -> str:
    """`name`, or for `auto` the sampler for `device`: `bsp`, on CPU and (for now) on CUDA too.
    `fused` becomes the CUDA default once the GPU validation suite (benchmarks/gpu/) has passed on a
    GPU with its results committed: until then it has only run under Triton's CPU interpreter and
    compiled for sm_90, so it is opt-in."""
    del device  # the choice will depend on it again once fused is validated
    return "bsp" if str(name) == AUTO else str(name)


def sampler_entry(name: str, target: Optional[str] = None, device=None) -> SamplerEntry:
    """The entry of sampler `name` (auto resolved), or of the class `target` (sampler._target_)
    names, which its module registered when imported."""
    if target is not None:
        return registered(REGISTRY, target, "target", "sampler_entry", "sampler", "conveyor.samplers.register_sampler")
    name = resolve_name(name, device)
    if name not in REGISTRY:
        raise ConveyorError(f"unknown sampler {name!r}; choose one of {', '.join([AUTO, *REGISTRY])}, e.g. "
                            f"sampler=bsp, or your own with sampler._target_=module.Class.")
    return REGISTRY[name]
