"""`conveyor.NeighborLoader`: PyG's `NeighborLoader` for homogeneous node-level work, backed by
conveyor's pipeline (docs/design.md §2.7).

It IS the pipeline (loader/pipeline_loader.py): one batch source, started at the first iteration
and kept across epochs. Each `iter()` is the next epoch, its seeds reshuffled from `seed`
(`pipeline.seeds`), each batch the user's data sliced to it as PyG's loader slices it
(pyg_input.py, to_pyg.py): every node- and edge-level attribute, e_id, parallel edges, dtypes.

Batches of the async pipeline are views of recycled shared buffers. A loop that drops each batch
before it asks for the one after next never copies; a batch still alive two batches later (kept in
a list, `list(loader)`) has its tensors copied out of the buffers then, so that it stays valid
and the buffers go back. A second iteration while one is under way (nested loops, `loader(index)`)
runs in this process, with the same seeds and draws as the pipeline's.
"""
from __future__ import annotations

import weakref
from dataclasses import replace
from typing import Iterator, List, Optional

import torch
from torch import Tensor

from conveyor.core import ConveyorError
from conveyor.core.device import resolve_device
from conveyor.loader.hetero import (
    hetero_data_of_stores,
    hetero_graph_and_layout,
    is_hetero,
    to_hetero_data,
    typed_stores,
    with_weights,
)
from conveyor.loader.inputs import (
    attributes_of,
    features_of,
    input_node_ids,
    options_of,
    pipeline_settings,
    sampler_of,
    seed_of,
)
from conveyor.loader.keywords import check_keywords
from conveyor.loader.pipeline_loader import LoaderParts, PipelineLoader
from conveyor.loader.pyg_input import graph_and_layout
from conveyor.loader.repeated_seeds import distinct_seeds, has_repeats, with_repeated_seeds
from conveyor.loader.to_pyg import to_pyg
from conveyor.pipeline import PipelineSettings, batch_source
from conveyor.pipeline.guard import check_main_guard
from conveyor.pipeline.seeds import STREAM_SAMPLER, EpochPlan, stream_seed

KEEP_BEHIND = 2  # batches a loop may hold as views: the one it works on, and the one before it


class NeighborLoader(PipelineLoader):
    """As `torch_geometric.loader.NeighborLoader(data, num_neighbors, input_nodes=None,
    batch_size=1, shuffle=False, drop_last=False, ...)` with the keywords of PyG it honours
    (keywords.py: subgraph_type, weight_attr, num_workers, transform, ...), plus conveyor's own:

    pipeline: "async" (sampler and feature loader in their own processes, overlapped with your
        loop; PyG's num_workers=0 means "serial") or "serial" (both in this process); sampler:
        "auto", "bsp", "fused", "pyg", or your own sampler or spec (README, "Your own sampler or
        feature source"); cache: a policy ("degree", "random", "none"), a `cache.CacheSettings`,
        or your own feature source or spec; device: where batches arrive ("auto": CUDA when there
        is one); seed: the epochs' order and draws (None: `torch.initial_seed()`, so
        `torch.manual_seed` sets it); depth: batches each stage may prepare ahead.

    Any other PyG keyword is refused by name unless it is at PyG's default. Close it with
    `close()` or a `with` block; garbage collection and interpreter exit close it too."""

    def __init__(self, data, num_neighbors, input_nodes=None, *, batch_size: int = 1, shuffle: bool = False,
                 drop_last: bool = False, pipeline: Optional[str] = None, sampler="auto", cache="degree",
                 device="auto", seed=None, depth: Optional[int] = None, **pyg_keywords):
        options = options_of(check_keywords(pyg_keywords), pipeline, depth)
        if options.pipeline == "async":
            check_main_guard("conveyor.NeighborLoader(pipeline='async')", (sampler, cache))
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ConveyorError(f"conveyor.NeighborLoader's batch_size must be a positive integer, got "
                                f"{batch_size!r}.")
        graph, self.layout = read_data(data, options)
        device, seed = resolve_device(device, "device"), seed_of(seed)
        parts = LoaderParts(sampler_of(sampler, num_neighbors, seed, device, options, graph),
                            features_of(cache, seed, graph), device, pipeline_settings(options.pipeline, options.depth),
                            attributes=attributes_of(graph))
        nodes, self.mask_input, self.input_type = input_node_ids(input_nodes, graph, options.subgraph_type)
        super().__init__(graph, parts, EpochPlan(nodes, batch_size, seed, bool(shuffle), bool(drop_last)))
        self.data, self.options, self.cache_option = data, options, cache
        self._snapshot = snapshot(data)
        self.batch_size, self.shuffle, self.drop_last, self.seed = batch_size, bool(shuffle), bool(drop_last), seed
        self.input_nodes = nodes
        self.epochs_iterated = 0  # the next iter() is epoch epochs_iterated + 1
        self._busy = False  # an iteration of the pipeline is under way
        self._side = None  # the in-process source of a second, nested iteration
        self._handed: List[weakref.ref] = []  # the pipeline's batches handed out that may still be views

    @property
    def source(self):
        """The pipeline, started on first use, over the data as it is then: PyG's loader reads
        `loader.data` at each batch, so a key set on it before the first batch (e.g. PyG's
        examples' `loader.data.n_id = torch.arange(num_nodes)`) is in the batches here too."""
        if self._state["source"] is None and self._side is None and snapshot(self.data) != self._snapshot:
            self.graph, self.layout = read_data(self.data, self.options)
            self.parts = replace(self.parts, features=features_of(self.cache_option, self.seed, self.graph),
                                 attributes=attributes_of(self.graph))
            self._snapshot = snapshot(self.data)
        return super().source

    @property
    def dataset(self) -> range:
        """As PyG's loader (a DataLoader over positions in input_nodes): one item per seed node."""
        return range(self.input_nodes.numel())

    def __iter__(self) -> Iterator:
        """The next epoch's batches as PyG `Data`s."""
        self.epochs_iterated += 1
        epoch = self.epochs_iterated
        positions = self.plan.positions(epoch)
        if self._busy and self.parts.settings.name == "async":
            batches = self.side_source().run(self.seed_batches(epoch), self.plan.sampler_seed(epoch))
            return self.batches(positions, batches, keep_views=True)
        return self.pipeline_epoch(positions, self.epoch(epoch))

    def pipeline_epoch(self, positions: List[Tensor], prepared) -> Iterator:
        self._busy = True
        try:
            yield from self.batches(positions, prepared, keep_views=self.parts.settings.name != "async")
        finally:
            self._busy = False

    def batches(self, positions: List[Tensor], prepared, keep_views: bool) -> Iterator:
        prepared, keep = iter(prepared), 0  # a batch of an earlier iteration is no loop's current one
        for position in positions:
            if not keep_views:  # before the pipeline is asked for a buffer again
                self._handed, keep = detach_held(self._handed, keep), KEEP_BEHIND - 1
            batch = next(prepared)
            data = self.to_data(batch, position)
            del batch  # the Data holds the views it needs: the slots go back once it is dropped
            if not keep_views:
                self._handed.append(weakref.ref(data))
            yield data

    def seed_batches(self, epoch: int) -> List[Tensor]:
        """Each batch's seeds once each: a repeat gets its place in to_data."""
        return [distinct_seeds(seeds) for seeds in super().seed_batches(epoch)]

    def __call__(self, index) -> "torch_geometric.data.Data":  # noqa: F821
        """The batch of these positions in input_nodes (PyG's NodeLoader.__call__)."""
        positions = torch.as_tensor(index, dtype=torch.long).view(-1)
        if positions.numel() and (int(positions.min()) < 0 or int(positions.max()) >= self.input_nodes.numel()):
            raise ConveyorError(f"loader(index) takes positions in input_nodes (0..{self.input_nodes.numel() - 1}), "
                                f"got {index!r}.")
        source = self.side_source() if self.parts.settings.name == "async" else self.source
        seeds = distinct_seeds(self.input_nodes[positions])
        batch = next(iter(source.run([seeds], stream_seed(self.seed, 0, STREAM_SAMPLER))))
        return self.to_data(batch, positions)

    def to_data(self, prepared, positions: Tensor):
        input_id = self.input_nodes[positions] if self.mask_input else positions
        if self.input_type is not None:  # a HeteroData's batch (loader/hetero.py); a mask's ids are the type's
            offset = self.layout.schema.offsets[self.layout.schema.node_type(self.input_type)]
            input_id = input_id - offset if self.mask_input else input_id
            data = to_hetero_data(prepared, self.layout, self.input_type, input_id, self.options.subgraph_type)
        else:
            data = to_pyg(prepared, self.layout, input_id, hop_counts=self.options.subgraph_type == "directional")
            seeds = self.input_nodes[positions]
            if not self.mask_input and has_repeats(seeds):
                data = with_repeated_seeds(data, seeds, self.layout)
        return data if self.options.transform is None else self.options.transform(data)

    def side_source(self):
        """The in-process batch source of nested iterations: the same batches as the pipeline's."""
        self.source  # noqa: B018  (the graph as the pipeline has it)
        if self._side is None:
            p = self.parts
            self._side = batch_source(self.graph, p.sampler, p.features, p.device, PipelineSettings(name="serial"),
                                      attributes=p.attributes)
        return self._side

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"  # PyG's


def read_data(data, options):
    """The pipeline's graph of the user's data and its batches' layout: a HeteroData's (or typed
    stores') as a typed graph, with its relations' `weight_attr` gathered for the sampler
    (loader/hetero.py); anything else's as pyg_input.py reads it."""
    if isinstance(data, (tuple, list)) and len(data) == 2 and typed_stores(data[1]):
        data = hetero_data_of_stores(*data)
    if not is_hetero(data):
        return graph_and_layout(data)
    graph, layout = hetero_graph_and_layout(data)
    return with_weights(graph, options.weight_attr), layout


def snapshot(data):
    """Which values a PyG Data holds under which keys (None for a Graph or stores: fixed)."""
    return tuple((key, id(value)) for key, value in data) if hasattr(data, "is_node_attr") else None


def detach_held(handed: List[weakref.ref], keep: int) -> List[weakref.ref]:
    """Copy out of the pipeline's buffers every handed batch but the last `keep` that the caller
    still holds (their buffers then go back); return the ones still views."""
    old, recent = handed[: len(handed) - keep], handed[len(handed) - keep:]
    for ref in old:
        data = ref()
        if data is not None:
            for key, value in data:
                if isinstance(value, Tensor):
                    data[key] = value.clone()
    return recent
