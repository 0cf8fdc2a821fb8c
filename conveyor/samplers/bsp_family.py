"""`sampler=bsp`'s builder (its registry entry's target, samplers/settings.py): one graph type by
`BSPSampler` (samplers/bsp.py), a typed graph relation by relation (samplers/typed.py), disjoint
subgraphs seed by seed (samplers/disjoint.py; a typed graph's by samplers/temporal.py, with no time):
one name, three draws of the same kind. Temporal sampling (PyG's time_attr) is bsp's too, built by
the loader from its own spec (samplers/temporal.py `TemporalSpec`), after this entry's check."""
from __future__ import annotations

from conveyor.partition import Graph
from conveyor.partition.hetero import is_typed
from conveyor.samplers.bsp import BSPSampler
from conveyor.samplers.disjoint import DisjointSampler
from conveyor.samplers.temporal import TemporalSampler
from conveyor.samplers.typed import TypedSampler


def build_bsp(graph: Graph, fanouts, disjoint: bool = False, **keywords):
    """The bsp sampler for `graph`, `keywords` as each takes them."""
    if disjoint:
        keywords.pop("once", None)  # each node of a disjoint subgraph draws once already, as PyG's
        if is_typed(graph):
            keywords.pop("replace", None)  # refused on a typed graph by the entry's check
            return TemporalSampler(graph, fanouts, **keywords)
        return DisjointSampler(graph, fanouts, **keywords)
    if is_typed(graph):
        return TypedSampler(graph, fanouts, **keywords)
    return BSPSampler(graph, fanouts, **keywords)
