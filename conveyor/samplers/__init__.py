"""Stage 1: seeds -> L-hop message-flow graph (`SampledBatch`). Imports only `partition`."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from conveyor.core import ConveyorError
from conveyor.core.names import require_own_name
from conveyor.partition import Graph
from conveyor.partition.hetero import is_typed
from conveyor.samplers.batch import SampledBatch
from conveyor.samplers.protocol import Sampler, SamplerRecipe
from conveyor.samplers.settings import SAMPLERS, SamplerSettings

require_own_name(__name__, "conveyor.samplers")


def resolve_sampler_name(name: str, device) -> str:
    """`name`, or for `auto` the sampler for `device`: `bsp`, on CPU and (for now) on CUDA too.
    `fused` becomes the CUDA default once the GPU validation suite (benchmarks/gpu/) has passed
    on a GPU with its results committed: until then it has only run under Triton's CPU
    interpreter and compiled for sm_90, so it is opt-in."""
    del device  # the choice will depend on it again once fused is validated
    return "bsp" if str(name) == "auto" else str(name)


def check_replace(replace: bool, name: str, typed: bool, weight_attr: str | None) -> None:
    """Refuse sampling with replacement (PyG's replace=True) where it is not drawn: bsp and pyg draw
    it, uniformly, on a graph of one node and edge type."""
    if replace and (name not in ("bsp", "pyg") or typed or weight_attr is not None):
        raise ConveyorError(f"sampling with replacement (replace=True) is drawn by sampler bsp or pyg, uniformly, on a "
                            f"graph of one node and edge type; got sampler {name}"
                            f"{' on a typed graph' if typed else ''}{' with weight_attr' if weight_attr else ''}. "
                            f"Leave replace out, or use torch_geometric.loader.NeighborLoader for this loop.")


def check_disjoint(disjoint: bool, name: str, typed: bool, weight_attr: str | None) -> bool:
    """Whether disjoint subgraphs are asked for (PyG's disjoint=True, each seed its own subgraph:
    samplers/disjoint.py, bsp's draws once per node as PyG's; a typed graph's: samplers/temporal.py);
    refused where they are not drawn: but by bsp, uniformly."""
    del typed  # bsp draws typed graphs' too (samplers/temporal.py)
    if disjoint and (name != "bsp" or weight_attr is not None):
        raise ConveyorError(f"disjoint subgraphs (disjoint=True) are drawn by sampler bsp (or auto), uniformly; got "
                            f"sampler {name}{' with weight_attr' if weight_attr else ''}. Leave disjoint out, or use "
                            f"torch_geometric.loader.NeighborLoader for this loop.")
    return disjoint


def check_temporal(time_attr: str | None, name: str, replace: bool, weight_attr: str | None) -> None:
    """Refuse temporal sampling (PyG's time_attr) where it is not drawn, before any work: bsp draws
    it (samplers/temporal.py), uniformly or the latest; fused's one kernel launch keeps no time
    per seed, and pyg's needs pyg-lib."""
    if time_attr is not None and (name != "bsp" or replace or weight_attr is not None):
        raise ConveyorError(f"temporal sampling (time_attr={time_attr!r}) is drawn by sampler bsp (or auto), without "
                            f"replacement and unweighted; got sampler {name}{' with replace=True' if replace else ''}"
                            f"{' with weight_attr' if weight_attr else ''}. Use node_sampler='bsp', or "
                            f"torch_geometric.loader with pyg-lib for this loop.")


def build_sampler(name: str, graph: Graph, fanouts, device="cpu", seed: int = 0,
                  deterministic: bool = SamplerSettings.deterministic, once: bool = False,
                  weight_attr: str | None = None, threads="auto", replace: bool = False, disjoint: bool = False):
    """A sampler whose `sample(seeds)` returns a `SampledBatch` (see docs/design.md).
    `deterministic` (fused only; bsp and pyg always are): the same seed gives bit-identical
    batches, at the cost of a few sorts per batch. `once` (bsp only): each node draws at one hop
    only, as PyG samples, for conveyor.NeighborLoader's batches (the other samplers' batches
    are cut to the same form there). `weight_attr`: the name of an edge attribute of the graph
    (`graph.edge_attrs`) to draw neighbours by, in proportion to it, as PyG's `weight_attr`
    (samplers/weights.py); None draws them uniformly. `threads`: the torch CPU threads the sampler
    samples with (the caller's are restored after each call); auto: the fewest of torch's threads,
    this process's cores and those idle now (core/cores.py: so more threads are never slower). A
    typed graph (partition/hetero.py) is drawn by bsp relation by relation (samplers/typed.py;
    `fanouts` one list or a dict by edge type); others refuse it. `replace`, `disjoint`: PyG's."""
    name = resolve_sampler_name(name, device)
    check_replace(replace, name, is_typed(graph), weight_attr)
    if check_disjoint(disjoint, name, is_typed(graph), weight_attr):
        return disjoint_sampler(graph, fanouts, device, seed, replace, threads)
    if is_typed(graph):  # a heterogeneous graph: each relation drawn with its own fanouts
        if name != "bsp":
            raise ConveyorError(f"sampler={name} draws graphs of one node and edge type; sample this typed graph "
                                f"({graph.name}) with sampler=bsp (or auto).")
        from conveyor.samplers.typed import TypedSampler
        return TypedSampler(graph, fanouts, device=device, seed=seed, once=once, weight_attr=weight_attr,
                            threads=threads)
    if name == "bsp":
        from conveyor.samplers.bsp import BSPSampler
        return BSPSampler(graph, fanouts, device=device, seed=seed, once=once, weight_attr=weight_attr,
                          threads=threads, replace=replace)
    if name == "pyg":
        from conveyor.samplers.pyg import PyGSampler
        return PyGSampler(graph, fanouts, device=device, seed=seed, weight_attr=weight_attr, threads=threads,
                          replace=replace)
    if name == "fused":
        from conveyor.samplers.fused import FusedSampler
        return FusedSampler(graph, fanouts, device=device, seed=seed, deterministic=deterministic,
                            weight_attr=weight_attr, threads=threads)
    raise ConveyorError(f"unknown sampler {name!r}; choose one of {', '.join(SAMPLERS)} "
                        f"(or auto: bsp until fused is validated on a GPU), e.g. sampler=bsp.")


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
    name: str  # bsp | fused | pyg (or auto: resolved on the device it is built on)
    fanouts: list  # or, for a typed graph, a dict by edge type (samplers/typed.py)
    seed: int = 0
    deterministic: bool = SamplerSettings.deterministic
    once: bool = False  # bsp: PyG's draws, for conveyor.NeighborLoader (build_sampler)
    weight_attr: str | None = None  # draw by this edge attribute's weights (build_sampler)
    threads: Any = "auto"  # torch threads while sampling (build_sampler); the pipeline sets its own
    replace: bool = False  # bsp, pyg: PyG's replace=True, drawn with replacement (build_sampler)
    disjoint: bool = False  # bsp: PyG's disjoint=True, each seed its own subgraph (samplers/disjoint.py)

    @classmethod
    def of(cls, settings: SamplerSettings, seed: int, device) -> "SamplerSpec":
        """The sampler `settings` describe on `device` (auto resolved), seeded by `seed` (run.seed)."""
        return cls(resolve_sampler_name(settings.name, device), [int(f) for f in settings.fanouts], int(seed),
                   settings.deterministic)

    def build(self, graph: Graph, device):
        return build_sampler(self.name, graph, self.fanouts, device=device, seed=self.seed,
                             deterministic=self.deterministic, once=self.once, weight_attr=self.weight_attr,
                             threads=self.threads, replace=self.replace, disjoint=self.disjoint)


__all__ = ["SAMPLERS", "SampledBatch", "Sampler", "SamplerRecipe", "SamplerSettings", "SamplerSpec", "build_sampler",
           "check_disjoint", "check_replace", "check_temporal",
           "resolve_sampler_name"]
