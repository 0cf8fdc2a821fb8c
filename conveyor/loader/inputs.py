"""The NeighborLoader's arguments made into what the pipeline takes: the seed nodes, the sampler
and feature source (or their specs), the pipeline's settings and the keywords of PyG's it honours.
Each bad argument is one ConveyorError naming the fix, raised before anything starts."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Tuple

import torch
from torch import Tensor

from conveyor.cache import CacheSettings, CacheSpec
from conveyor.core import ConveyorError
from conveyor.core.extras import require_extra
from conveyor.loader.repeated_seeds import directional_repeats
from conveyor.partition import Graph
from conveyor.partition.attributes import AttributeSpec
from conveyor.partition.hetero import is_typed
from conveyor.partition.typed_attributes import TypedAttributeSpec
from conveyor.pipeline import PipelineSettings
from conveyor.samplers import SamplerSpec, check_disjoint, check_replace, check_temporal, resolve_sampler_name
from conveyor.samplers.settings import SAMPLERS
from conveyor.samplers.subgraph import SUBGRAPH_TYPES, SubgraphSpec
from conveyor.samplers.temporal import TEMPORAL_STRATEGIES, TemporalSpec, time_of
from conveyor.samplers.typed import relation_fanouts
from conveyor.samplers.validation import check_fanouts, check_seeds

DEFAULT_DEPTH = 4


@dataclass(frozen=True)
class Options:
    """PyG's keywords as conveyor honours them (keywords.py's TAKEN)."""
    pipeline: str
    depth: int
    subgraph_type: str = "directional"
    weight_attr: Optional[str] = None
    transform: Optional[Callable] = None
    replace: bool = False  # PyG's: neighbours drawn with replacement
    disjoint: bool = False  # PyG's: each seed its own subgraph (samplers/disjoint.py); always, when temporal
    time_attr: Optional[str] = None  # PyG's temporal sampling (samplers/temporal.py)
    temporal_strategy: str = "uniform"


def options_of(taken: dict, pipeline: Optional[str], depth: Optional[int]) -> Options:
    """conveyor's pipeline and depth (given, or from PyG's num_workers and prefetch_factor; auto when
    neither pipeline nor num_workers is given), and the
    rest of PyG's keywords it honours, checked."""
    workers = taken.get("num_workers", 1)
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 0:
        raise ConveyorError(f"num_workers must be an integer >= 0, got {workers!r}.")
    prefetch = taken.get("prefetch_factor")
    if prefetch is not None and (isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 1):
        raise ConveyorError(f"prefetch_factor must be an integer >= 1 or None, got {prefetch!r}.")
    kind = getattr(taken.get("subgraph_type", "directional"), "value", taken.get("subgraph_type", "directional"))
    kind = "induced" if taken.get("directed", True) is False else kind
    if kind not in SUBGRAPH_TYPES:
        raise ConveyorError(f"subgraph_type must be one of {', '.join(SUBGRAPH_TYPES)}, got {kind!r}.")
    transform = taken.get("transform")
    if transform is not None and not callable(transform):
        raise ConveyorError(f"transform must be callable (a batch in, a batch out), got {transform!r}.")
    weight_attr = taken.get("weight_attr")
    if weight_attr is not None and not isinstance(weight_attr, str):
        raise ConveyorError(f"weight_attr must name an edge attribute of the data, got {weight_attr!r}.")
    by_workers = None if "num_workers" not in taken else "serial" if workers == 0 else "async"
    depth = depth if depth is not None else prefetch or DEFAULT_DEPTH  # depth=0 is refused, not replaced
    time_attr, strategy = temporal_options(taken)
    return Options(pipeline or by_workers or "auto", depth, kind, weight_attr, transform,
                   bool(taken.get("replace", False)), bool(taken.get("disjoint", False)) or time_attr is not None,
                   time_attr, strategy)


def temporal_options(taken: dict) -> Tuple[Optional[str], str]:
    """PyG's time_attr and temporal_strategy, checked (temporal sampling: samplers/temporal.py)."""
    time_attr, strategy = taken.get("time_attr"), getattr(taken.get("temporal_strategy", "uniform"), "value",
                                                          taken.get("temporal_strategy", "uniform"))
    if time_attr is not None and not isinstance(time_attr, str):
        raise ConveyorError(f"time_attr must name a node- or edge-level attribute of the data, got {time_attr!r}.")
    if strategy not in TEMPORAL_STRATEGIES:
        raise ConveyorError(f"temporal_strategy must be one of {', '.join(TEMPORAL_STRATEGIES)}, got {strategy!r}.")
    if taken.get("input_time") is not None and time_attr is None:
        raise ConveyorError("Received conflicting 'input_time' and 'time_attr' arguments: 'input_time' is set while "
                            "'time_attr' is not set. Name the attribute of the graph's times as time_attr=, or leave "
                            "input_time out.")
    return time_attr, strategy


def input_node_ids(input_nodes, graph: Graph, subgraph_type: str = "directional") -> Tuple[Tensor, bool, Optional[str]]:
    """PyG's input_nodes as node ids (None: every node; a boolean mask; ids), whether they came as a
    mask (PyG's input_id is then the node ids, else positions), and the seeds' node type (a typed
    graph's input_nodes name it: loader/hetero.py, each node once; else None)."""
    if is_typed(graph):
        from conveyor.loader.hetero import typed_input_nodes
        return typed_input_nodes(input_nodes, graph, subgraph_type)
    return (*untyped_input_node_ids(input_nodes, graph, subgraph_type), None)


def untyped_input_node_ids(input_nodes, graph: Graph, subgraph_type: str) -> Tuple[Tensor, bool]:
    """ids, repeats allowed in directional subgraphs as PyG's: loader/repeated_seeds.py."""
    if input_nodes is None:
        return torch.arange(graph.num_nodes), False
    if isinstance(input_nodes, (str, tuple)):
        raise ConveyorError(f"conveyor.NeighborLoader takes input_nodes as node ids, a boolean mask or "
                            f"None, got {input_nodes!r}: node types are for heterogeneous graphs (a "
                            f"HeteroData), and this graph has one type.")
    ids = torch.as_tensor(input_nodes) if not isinstance(input_nodes, range) else torch.tensor(input_nodes)
    if ids.numel() == 0 and ids.dtype.is_floating_point:  # [] reads as float: no ids, no batch (PyG)
        ids = ids.long()
    if ids.dtype == torch.bool:
        if ids.shape != (graph.num_nodes,):
            raise ConveyorError(f"input_nodes as a boolean mask must have one entry per node "
                                f"({graph.num_nodes}), got shape {tuple(ids.shape)}.")
        return ids.nonzero().view(-1), True
    return directional_repeats(check_seeds(ids.cpu(), graph.num_nodes, unique=False), subgraph_type), False


def sampler_of(sampler, num_neighbors, seed: int, device, options: Options, graph: Optional[Graph] = None):
    """A sampler option by name as a spec the stage process builds, or the user's own object, made
    to give PyG's subgraph type. A typed graph's `num_neighbors` may be a dict by edge type."""
    fanouts = checked_fanouts(num_neighbors, graph)
    if options.disjoint and options.subgraph_type != "directional":
        what = "temporal sampling (time_attr, disjoint as PyG's)" if options.time_attr else "disjoint=True"
        raise ConveyorError(f"{what} is drawn with subgraph_type='directional' only, got "
                            f"{options.subgraph_type!r}; leave one of them out.")
    if options.time_attr is not None:
        return temporal_sampler_of(sampler, fanouts, seed, device, options, graph)
    if isinstance(sampler, torch.utils.data.Sampler):
        raise ConveyorError("conveyor.NeighborLoader's node_sampler= is the neighbour sampler (auto, bsp, fused, "
                            "pyg, or your own), not a torch Sampler of indices: give that as sampler=, as PyG.")
    if isinstance(sampler, str):
        if sampler not in (*SAMPLERS, "auto"):
            raise ConveyorError(f"conveyor.NeighborLoader's node_sampler must be one of auto, "
                                f"{', '.join(SAMPLERS)}, or a sampler object, got {sampler!r}.")
        if is_typed(graph) and resolve_sampler_name(sampler, device) != "bsp":
            raise ConveyorError(f"node_sampler={sampler!r} draws graphs of one node and edge type; sample a "
                                f"HeteroData with node_sampler='bsp' (or 'auto').")
        if resolve_sampler_name(sampler, device) == "fused":
            require_extra("triton", "node_sampler='fused'")  # here, not in the sampler's process
        name = resolve_sampler_name(sampler, device)
        check_replace(options.replace, name, is_typed(graph), options.weight_attr)
        check_disjoint(options.disjoint, name, is_typed(graph), options.weight_attr)
        sampler = SamplerSpec(name, fanouts, seed, once=True,  # PyG's draws
                              **({"weight_attr": options.weight_attr} if options.weight_attr else {}),
                              **{k: True for k in ("replace", "disjoint") if getattr(options, k)})
    elif options.replace or options.disjoint:
        raise ConveyorError("replace=True and disjoint=True work with conveyor's samplers (bsp; pyg for replace); "
                            "your own sampler draws as it likes: draw so in it, or leave them out.")
    elif not (callable(getattr(sampler, "sample", None)) or callable(getattr(sampler, "build", None))):
        raise ConveyorError(f"node_sampler= takes auto, bsp, fused, pyg, or a sampler object (with sample(seeds) or "
                            f"build(graph, device)), got a {type(sampler).__name__}.")
    elif options.weight_attr is not None:
        raise ConveyorError("weight_attr= works with conveyor's samplers (auto, bsp, fused); your own sampler "
                            "draws as it likes: weigh its draws itself, or leave weight_attr out.")
    if options.subgraph_type == "directional" or (options.subgraph_type == "bidirectional" and is_typed(graph)):
        return sampler  # a HeteroData's reverses join its edge types: made per batch (loader/hetero.py)
    return SubgraphSpec(sampler, options.subgraph_type)


def temporal_sampler_of(sampler, fanouts, seed: int, device, options: Options, graph: Graph) -> TemporalSpec:
    """The temporal sampler (samplers/temporal.py), after refusing what it does not draw."""
    name = resolve_sampler_name(sampler, device) if isinstance(sampler, str) else type(sampler).__name__
    check_temporal(options.time_attr, name, options.replace, options.weight_attr)
    time_of(graph, options.time_attr)  # a missing or misshapen time attribute: refused here, before anything starts
    return TemporalSpec(fanouts, seed, options.time_attr, options.temporal_strategy)


def checked_fanouts(num_neighbors, graph: Optional[Graph]):
    """num_neighbors checked: one list (hop 1 first, -1 for every neighbour), or for a typed
    graph also a dict by edge type (samplers/typed.py), kept as given for the sampler."""
    if is_typed(graph):
        relation_fanouts(graph.schema, num_neighbors)  # refused here, before anything starts
        return dict(num_neighbors) if isinstance(num_neighbors, dict) else check_fanouts(num_neighbors, "num_neighbors")
    if isinstance(num_neighbors, dict):
        raise ConveyorError("conveyor.NeighborLoader takes num_neighbors as one list (hop 1 first, -1 "
                            "for every neighbour); a dict per edge type is for heterogeneous graphs "
                            "(a HeteroData), and this graph has one type.")
    return check_fanouts(num_neighbors, "num_neighbors")


def seed_times(value, count: int, name: str) -> Tensor:
    """PyG's input_time / edge_label_time: one real time per seed or link."""
    times = torch.as_tensor(value).as_subclass(Tensor).cpu()
    if times.shape != (count,) or times.dtype == torch.bool or times.is_complex():
        raise ConveyorError(f"{name} must hold one real time per seed ({count}), got {times.dtype} of shape "
                            f"{tuple(times.shape)}.")
    return times


def attributes_of(graph: Graph):
    """Every attribute of the graph and e_id, as PyG's loader puts them in its batches."""
    return TypedAttributeSpec.everything(graph) if is_typed(graph) else AttributeSpec.everything(graph)


def features_of(cache, seed: int, graph: Graph):
    """A cache policy by name or CacheSettings as a spec, or the user's own feature source; None
    when the graph has no 2-D x (a 1-D x travels as a node attribute, as every other one)."""
    features = graph.features if is_typed(graph) else graph.x  # a typed graph's: per type (cache/typed.py)
    if not (features is not None and len(features)) and isinstance(cache, (str, CacheSettings)):
        return None
    if isinstance(cache, str):
        cache = CacheSettings(policy=cache)
    return CacheSpec(cache, seed) if isinstance(cache, CacheSettings) else cache


def pipeline_settings(pipeline: str, depth: int) -> PipelineSettings:
    return PipelineSettings(name=pipeline, depth=depth)


def seed_of(seed) -> int:
    """The loader's seed; None: torch's (so `torch.manual_seed(s)` before it sets it, as for PyG)."""
    if seed is None:
        return torch.initial_seed() % 2**62
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ConveyorError(f"conveyor.NeighborLoader's seed must be an integer or None, got {seed!r}.")
    return seed
