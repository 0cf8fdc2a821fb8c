"""`conveyor.LinkNeighborLoader`: PyG's `LinkNeighborLoader` for homogeneous graphs, backed by
conveyor's pipeline (docs/design.md §2.8).

Its seeds are positions in `edge_label_index`, the links to score: the pipeline hands each batch
of them to the sampler stage, where `samplers.link.LinkSampler` (built there, around the node
sampler) takes the pairs, draws the negatives from its own seeded generator, and samples the
neighbourhood of every endpoint. The batch's links in local ids travel with it as the
`SampledBatch`'s extras, through the same processes, cache and slots as the node loader's batches;
everything a PyG loader does over the pipeline (epochs, `loader(index)`, held batches, nested
loops) is pyg_loader.py's `PyGLoader`. A batch is PyG's: the user's data sliced to it, n_id,
e_id, the per-hop counts (directional), input_id, and `edge_label_index` with `edge_label` (binary
or no negatives) or `src_index`, `dst_pos_index`, `dst_neg_index` (triplet).
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor
from torch_geometric.loader import LinkNeighborLoader as PyGLinkNeighborLoader
from torch_geometric.sampler import EdgeSamplerInput

from conveyor.loader.hetero_links import TypedLinks, typed_label_edges, typed_link_data
from conveyor.loader.index_samplers import index_batches, plan_of
from conveyor.loader.inputs import attributes_of, features_of, pipeline_settings, sampler_of
from conveyor.loader.keywords import check_keywords
from conveyor.loader.link_inputs import (
    LINK_OWN,
    LINK_TAKEN,
    LINK_UNSUPPORTED,
    check_weights,
    input_ids,
    label_edges,
    link_labels,
    link_times,
    negatives_of,
    replaced_keys,
)
from conveyor.loader.pipeline_loader import LoaderParts
from conveyor.loader.pyg_face import describe, pipeline_sampler
from conveyor.loader.pyg_loader import PyGLoader, loader_inputs
from conveyor.loader.seeds import EpochPlan
from conveyor.loader.to_pyg import sliced_data
from conveyor.partition.hetero import is_typed
from conveyor.samplers.link import LinkSpec


class LinkNeighborLoader(PyGLoader, PyGLinkNeighborLoader):
    """As `torch_geometric.loader.LinkNeighborLoader(data, num_neighbors, edge_label_index=None,
    edge_label=None, batch_size=1, shuffle=False, drop_last=False, neg_sampling=None,
    neg_sampling_ratio=None, ...)` on a Data or a HeteroData (edge_label_index=(edge_type, index),
    num_neighbors a list or a dict by edge type: loader/hetero_links.py), with the keywords of PyG it honours
    (subgraph_type, num_workers, transform, input_id, ...) and conveyor's own, as
    `conveyor.NeighborLoader`: pipeline, node_sampler, cache, device, seed (the epochs' order, the
    neighbours and the negatives), depth. To PyG's code it is a `torch_geometric.loader.LinkNeighborLoader`
    (pyg_face.py: `link_sampler`, `input_data`, `collate_fn`, ...).

    Negatives (`neg_sampling="binary"` or `"triplet"`, or dict(mode=..., amount=..., src_weight=...,
    dst_weight=...); `neg_sampling_ratio=r` is binary with amount r) are drawn over the nodes of the
    endpoint's type (uniformly, or by the weights given) in the sampler stage, reproducibly from
    `seed`. Any other PyG keyword is refused by name unless it is at PyG's default."""
    input_name = "edge_label_index"
    typed = True  # it takes a HeteroData (loader/hetero_links.py)
    links: Optional[TypedLinks] = None  # a typed graph's links

    def __init__(self, data, num_neighbors, edge_label_index=None, edge_label=None, *, batch_size: int = 1,
                 shuffle: bool = False, drop_last: bool = False, neg_sampling=None, neg_sampling_ratio=None,
                 pipeline: Optional[str] = None, node_sampler="auto", cache="degree", device="auto", seed=None,
                 depth: Optional[int] = None, **pyg_keywords):
        taken = check_keywords(pyg_keywords, "LinkNeighborLoader", LINK_TAKEN, LINK_UNSUPPORTED, LINK_OWN)
        batches = index_batches(taken.get("sampler"), taken.get("batch_sampler"), batch_size, shuffle, drop_last,
                                "LinkNeighborLoader")
        negatives = negatives_of(neg_sampling, neg_sampling_ratio)
        self.leave_out = replaced_keys(negatives)
        options, graph, layout, device, seed = loader_inputs("LinkNeighborLoader", data, batch_size, taken, pipeline,
                                                             depth, node_sampler, cache, device, seed, self.leave_out,
                                                             typed=True)
        if negatives is not None:
            negatives.check_room(batch_size)
        edges, ends = self.label_edges(edge_label_index, data, graph)
        check_weights(negatives, ends[0][1], ends[1][1])
        labels = link_labels(edge_label, edges.size(1), negatives)
        times = link_times(taken.get("edge_label_time"), options.time_attr, edges.size(1))
        self.input_id = input_ids(taken.get("input_id"), edges.size(1))
        nodes = None if no_hops(num_neighbors) else sampler_of(node_sampler, num_neighbors, seed, device, options,
                                                               graph)
        parts = LoaderParts(LinkSpec(nodes, edges, labels, negatives, seed, options.disjoint, *ends, times,
                                     options.time_attr),
                            features_of(cache, seed, graph), device,
                            pipeline_settings(options.pipeline, options.depth), attributes=attributes_of(graph))
        positions = torch.arange(edges.size(1))
        plan = plan_of(positions, batches, seed, EpochPlan(positions, batch_size, seed, bool(shuffle), bool(drop_last)))
        super().__init__(data, graph, layout, parts, plan, options, cache, seed)
        self.edge_label_index = edges if self.links is None else edge_label_index  # a typed one as given, as PyG
        self.edge_label, self.neg_sampling, self.edge_label_time = labels, negatives, times
        self.batch_size, self.shuffle, self.drop_last = batch_size, bool(shuffle), bool(drop_last)
        describe(self, taken, taken.get("sampler"), taken.get("batch_sampler"))
        self.link_sampler = pipeline_sampler(node_sampler, num_neighbors, taken, options.subgraph_type)
        local = edges if self.links is None else self.links.local
        self.input_data = EdgeSamplerInput(self.input_id if self.input_id is not None else positions, local[0],
                                           local[1], labels, times,
                                           None if self.links is None else self.links.edge_type)

    def label_edges(self, edge_label_index, data, graph):
        """The [2, P] links (global ids) and each endpoint's node range (first id, count); a
        typed graph's links kept as `self.links` (loader/hetero_links.py)."""
        if not is_typed(graph):
            return label_edges(edge_label_index, data, graph), ((0, graph.num_nodes), (0, graph.num_nodes))
        self.links = typed_label_edges(edge_label_index, graph, data)
        return self.links.edges, (self.links.src_nodes, self.links.dst_nodes)

    def to_data(self, prepared, positions: Tensor):
        """PyG's link batch (LinkLoader.filter_fn): the sliced data, input_id, and the links."""
        input_id = positions if self.input_id is None else self.input_id[positions]
        triplet = self.neg_sampling is not None and self.neg_sampling.mode == "triplet"
        if self.links is not None:
            return typed_link_data(prepared, self.layout, self.links, input_id, triplet, self.options.subgraph_type)
        data = sliced_data(prepared, self.layout, hop_counts=self.options.subgraph_type == "directional")
        data.input_id = input_id
        extras = prepared.batch.extras
        if self.options.disjoint:
            data.batch = extras["batch"]  # whose subgraph each node is, by positive link (PyG's)
        if triplet:
            data.src_index, data.dst_pos_index = extras["src_index"], extras["dst_pos_index"]
            data.dst_neg_index = extras["dst_neg_index"]
        else:
            data.edge_label_index, data.edge_label = extras["edge_label_index"], extras.get("edge_label")
        for key in ("edge_label_time", "seed_time"):  # temporal: each link's time (samplers/link.py)
            if key in extras:
                data[key] = extras[key]
        return data


def no_hops(num_neighbors) -> bool:
    """PyG's num_neighbors=[] (or a dict of empty lists): the links' endpoints alone."""
    values = list(num_neighbors.values()) if isinstance(num_neighbors, dict) else [num_neighbors]
    return all(list(v) == [] for v in values)
