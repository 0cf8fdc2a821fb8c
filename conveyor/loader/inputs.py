"""The NeighborLoader's arguments made into what the pipeline takes: the graph, the seed nodes,
the sampler and feature source (or their specs), the pipeline's settings. Each bad argument is one
ConveyorError naming the fix, raised before anything starts."""
from __future__ import annotations

import torch
from torch import Tensor

from conveyor.cache import CacheSettings, CacheSpec
from conveyor.core import ConveyorError
from conveyor.partition import Graph
from conveyor.pipeline import PipelineSettings
from conveyor.samplers import SamplerSpec, resolve_sampler_name
from conveyor.samplers.settings import SAMPLERS
from conveyor.samplers.validation import check_fanouts, check_seeds


def as_graph(data) -> Graph:
    """A conveyor.Graph, or a homogeneous PyG Data made into one (features required)."""
    if not isinstance(data, Graph):
        if isinstance(data, (tuple, list)) or type(data).__name__ == "HeteroData":
            raise ConveyorError(
                f"conveyor.NeighborLoader takes a homogeneous graph (a PyG Data or a conveyor.Graph), "
                f"got a {type(data).__name__}; heterogeneous data and (FeatureStore, GraphStore) pairs "
                f"are not supported: use torch_geometric.loader.NeighborLoader for them, or "
                f"data.to_homogeneous() first.")
        data = Graph.from_data(data)
    if data.x is None:
        raise ConveyorError("conveyor.NeighborLoader needs node features (data.x): its batches carry "
                            "x of every sampled node; give the graph an x.")
    return data


def input_node_ids(input_nodes, graph: Graph) -> Tensor:
    """PyG's input_nodes as node ids: None (every node), a boolean mask over the nodes, or ids."""
    if input_nodes is None:
        return torch.arange(graph.num_nodes)
    if isinstance(input_nodes, (str, tuple)):
        raise ConveyorError(f"conveyor.NeighborLoader takes input_nodes as node ids, a boolean mask or "
                            f"None, got {input_nodes!r}: node types are for heterogeneous graphs, which "
                            f"it does not support.")
    ids = torch.as_tensor(input_nodes)
    if ids.dtype == torch.bool:
        if ids.shape != (graph.num_nodes,):
            raise ConveyorError(f"input_nodes as a boolean mask must have one entry per node "
                                f"({graph.num_nodes}), got shape {tuple(ids.shape)}.")
        ids = ids.nonzero().view(-1)
    return check_seeds(ids.cpu(), graph.num_nodes)


def sampler_of(sampler, num_neighbors, seed: int, device):
    """A sampler option by name as a spec the stage process builds, or the user's own object."""
    if isinstance(num_neighbors, dict):
        raise ConveyorError("conveyor.NeighborLoader takes num_neighbors as one list (hop 1 first, -1 "
                            "for every neighbour); a dict per edge type is for heterogeneous graphs, "
                            "which it does not support.")
    fanouts = check_fanouts(num_neighbors)
    if not isinstance(sampler, str):
        return sampler  # a sampler (sample(seeds)) or a spec (build(graph, device)), used as given
    if sampler not in (*SAMPLERS, "auto"):
        raise ConveyorError(f"conveyor.NeighborLoader's sampler must be one of auto, {', '.join(SAMPLERS)}, "
                            f"or a sampler object, got {sampler!r}.")
    return SamplerSpec(resolve_sampler_name(sampler, device), fanouts, seed, once=True)  # PyG's draws


def features_of(cache, seed: int):
    """A cache policy by name or CacheSettings as a spec, or the user's own feature source."""
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
