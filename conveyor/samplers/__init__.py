"""Stage 1: seeds -> L-hop message-flow graph (`SampledBatch`). Imports only `partition`.

The samplers are an open set with one registry (samplers/registry.py): `build_sampler` and
`SamplerSpec` build any registered one by name, or your own by `target` (sampler._target_)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from conveyor.core.names import require_own_name
from conveyor.partition import Graph
from conveyor.partition.hetero import is_typed
from conveyor.samplers.batch import SampledBatch
from conveyor.samplers.protocol import Sampler, SamplerRecipe
from conveyor.samplers.registry import REGISTRY, SamplerEntry, register_sampler, sampler_entry
from conveyor.samplers.registry import resolve_name as resolve_sampler_name
from conveyor.samplers.settings import SamplerSettings, own_options

require_own_name(__name__, "conveyor.samplers")


def build_sampler(name: str, graph: Graph, fanouts, device="cpu", seed: int = 0, draws: Optional[str] = None,
                  weight_attr: str | None = None, threads="auto", replace: bool = False, disjoint: bool = False,
                  target: Optional[str] = None, **options):
    """A sampler whose `sample(seeds)` returns a `SampledBatch` (see docs/design.md): the
    registered sampler `name` (auto: bsp), or the class `target` names (sampler._target_). What
    it is asked to draw is checked against its registry entry first (samplers/registry.py), and
    only what is asked is passed on. `draws` (sampler.draws): per_hop, every node reached so far
    draws again at each hop (the message-flow graphs of docs/design.md §2.2); per_node, each
    node once, as PyG samples, hop h's edges being every edge drawn in hops 1..h. `weight_attr`:
    the name of an edge attribute of the graph (`graph.edge_attrs`) to draw neighbours by, in
    proportion to it, as PyG's `weight_attr` (samplers/weights.py); None draws them uniformly.
    `threads`: the torch CPU threads the sampler samples with (the caller's are restored after
    each call); auto: the fewest of torch's threads, this process's cores and those idle now
    (core/cores.py: so more threads are never slower). A typed graph (partition/hetero.py) is
    drawn relation by relation (samplers/typed.py; `fanouts` one list or a dict by edge type).
    `replace`, `disjoint`: PyG's. `options`: the sampler's own (fused: `deterministic`)."""
    entry = sampler_entry(name, target, device)
    draws = draws or entry.draws[0]  # None: the sampler's plain form (bsp's per_hop, pyg's per_node)
    entry.check(is_typed(graph), weight_attr, replace, disjoint, draws)
    asked = {"weight_attr": weight_attr, "replace": replace, "disjoint": disjoint}
    keywords = {key: value for key, value in asked.items() if value not in (None, False)}
    return entry.build(graph, fanouts, device=device, seed=seed, threads=threads, **entry.draw_keywords(draws),
                       **keywords, **options)


def disjoint_sampler(graph: Graph, fanouts, device, seed: int, replace: bool, threads):
    """bsp's disjoint subgraphs (PyG's disjoint=True): samplers/disjoint.py's, or a typed graph's
    (samplers/temporal.py's draws, with no time)."""
    if is_typed(graph):
        from conveyor.samplers.temporal import TemporalSampler
        return TemporalSampler(graph, fanouts, device=device, seed=seed, threads=threads)
    from conveyor.samplers.disjoint import DisjointSampler
    return DisjointSampler(graph, fanouts, device=device, seed=seed, replace=replace, threads=threads)


@dataclass(frozen=True)
class SamplerSpec:
    """A sampler as a recipe: what `build_sampler` takes but the graph and the device. Small and
    picklable, so the pipeline's sampler stage builds the sampler itself, over its own view of the
    shared graph (nothing of the graph is pickled)."""
    name: str  # a registered sampler (auto: resolved on the device it is built on), or a label of `target`'s
    fanouts: list  # or, for a typed graph, a dict by edge type (samplers/typed.py)
    seed: int = 0
    options: dict = field(default_factory=dict)  # the sampler's own settings (fused: deterministic)
    draws: Optional[str] = None  # sampler.draws: per_hop | per_node, PyG's (None: the sampler's plain form)
    weight_attr: str | None = None  # draw by this edge attribute's weights (build_sampler)
    threads: Any = "auto"  # torch threads while sampling (build_sampler); the pipeline sets its own
    replace: bool = False  # PyG's replace=True, drawn with replacement (build_sampler)
    disjoint: bool = False  # PyG's disjoint=True, each seed its own subgraph (samplers/disjoint.py)
    target: Optional[str] = None  # sampler._target_: your own registered sampler class

    @classmethod
    def of(cls, settings: SamplerSettings, seed: int, device, **recipe) -> "SamplerSpec":
        """The sampler `settings` describe on `device` (auto resolved), seeded by `seed` (run.seed);
        `recipe`: what a loader adds (PyG's weight_attr, replace, disjoint; a typed graph's fanouts)."""
        name = settings.name if settings._target_ else resolve_sampler_name(settings.name, device)
        fanouts = recipe.pop("fanouts", [int(f) for f in settings.fanouts])
        return cls(name, fanouts, int(seed), own_options(settings), draws=settings.draws, target=settings._target_,
                   **recipe)

    def entry(self) -> SamplerEntry:
        return sampler_entry(self.name, self.target)

    def build(self, graph: Graph, device):
        return build_sampler(self.name, graph, self.fanouts, device=device, seed=self.seed, draws=self.draws,
                             weight_attr=self.weight_attr, threads=self.threads, replace=self.replace,
                             disjoint=self.disjoint, target=self.target, **self.options)


__all__ = ["REGISTRY", "SampledBatch", "Sampler", "SamplerEntry", "SamplerRecipe", "SamplerSettings", "SamplerSpec",
           "build_sampler", "register_sampler", "resolve_sampler_name", "sampler_entry"]
