"""`PyGLoader`: what conveyor's drop-ins for PyG's loaders share (`NeighborLoader`,
`LinkNeighborLoader`): one pipeline over the user's data, iterated epoch by epoch as PyG's
`Data` batches, `loader(index)`, `list(loader)` and nested loops, `.data`, `.dataset`, `str()`.

It IS the pipeline (loader/pipeline_loader.py): one batch source, started at the first iteration
and kept across epochs. Each `iter()` is the next epoch, its seeds reshuffled from `seed`
(`loader.seeds`); each batch is made a `Data` by the subclass's `to_data`.

Batches of the async pipeline are views of recycled shared buffers. A loop that drops each batch
before it asks for the one after next never copies; a batch still alive two batches later (kept in
a list, `list(loader)`) has its tensors copied out of the buffers then, so that it stays valid
and the buffers go back. A second iteration while one is under way (nested loops, `loader(index)`)
runs in this process, with the same seeds and draws as the pipeline's.
"""
from __future__ import annotations

import sys
from dataclasses import replace
from typing import Iterator, List, Tuple

import torch
from torch import Tensor

from conveyor.core import ConveyorError
from conveyor.core.device import resolve_device
from conveyor.loader.inputs import Options, attributes_of, features_of, options_of, pipeline_settings, seed_of
from conveyor.loader.pipeline_loader import LoaderParts, PipelineLoader
from conveyor.loader.pyg_face import PyGFace
from conveyor.loader.pyg_input import BatchLayout, graph_and_layout
from conveyor.loader.seeds import STREAM_SAMPLER, SeedPlan, stream_seed
from conveyor.loader.workers import with_worker_init
from conveyor.partition import Graph
from conveyor.pipeline import PipelineSettings, batch_source
from conveyor.pipeline.guard import check_main_guard

KEEP_BEHIND = 2  # batches a loop may hold as views: the one it works on, and the one before it


class PyGLoader(PyGFace, PipelineLoader):
    """The pipeline behind one of PyG's loaders over `data` (its graph and `layout`): `plan`'s
    seeds are positions in what the loader's batches are cut from (`input_name`: input_nodes,
    edge_label_index); a subclass says how a prepared batch becomes PyG's (`to_data`)."""
    input_name = "input_nodes"
    leave_out: Tuple[str, ...] = ()  # keys of the user's Data the batches do not slice (graph_and_layout)
    typed = False  # whether it takes a HeteroData (NeighborLoader: loader/hetero.py)
    worker_init_fn = None  # PyG's: run in each stage process as it starts (loader/workers.py)
    transform = None  # PyG's: run on each batch (filter_fn)
    filter_per_worker = False

    def __init__(self, data, graph: Graph, layout: BatchLayout, parts: LoaderParts, plan: SeedPlan,
                 options: Options, cache, seed: int):
        super().__init__(graph, parts, plan)
        self.data, self.layout, self.options, self.cache_option, self.seed = data, layout, options, cache, seed
        self._snapshot = snapshot(data)
        self.epochs_iterated = 0  # the next iter() is epoch epochs_iterated + 1
        self._busy = False  # an iteration of the pipeline is under way
        self._side = None  # the in-process source of a second, nested iteration
        self._handed: List[List[Tensor]] = []  # the tensors of batches handed out that may still be views

    @property
    def source(self):
        """The pipeline, started on first use, over the data as it is then: PyG's loader reads
        `loader.data` at each batch, so a key set on it before the first batch (e.g. PyG's
        examples' `loader.data.n_id = torch.arange(num_nodes)`) is in the batches here too."""
        if self._state["source"] is None and self._side is None and snapshot(self.data) != self._snapshot:
            self.graph, self.layout = read_data(self.data, self.options, self.leave_out, self.typed)
            self.parts = replace(self.parts, features=features_of(self.cache_option, self.seed, self.graph),
                                 attributes=attributes_of(self.graph))
            self._snapshot = snapshot(self.data)
        if self._state["source"] is None and self.worker_init_fn is not None and self.asynchronous:
            parts, self.parts = self.parts, with_worker_init(self.parts, self.worker_init_fn)
            try:
                return super().source
            finally:
                self.parts = parts
        return super().source

    @property
    def dataset(self) -> range:
        """As PyG's loader (a DataLoader over positions): one item per seed."""
        return range(self.plan.nodes.numel())

    def __iter__(self) -> Iterator:
        """The next epoch's batches as PyG `Data`s."""
        self.epochs_iterated += 1
        epoch = self.epochs_iterated
        positions = self.plan.positions(epoch)
        if self._busy and self.asynchronous:
            batches = self.side_source().run(self.seed_batches(epoch), self.plan.sampler_seed(epoch))
            return self.batches(positions, batches, keep_views=True)
        return self.pipeline_epoch(positions, self.epoch(epoch))

    def pipeline_epoch(self, positions: List[Tensor], prepared) -> Iterator:
        self._busy = True
        try:
            yield from self.batches(positions, prepared, keep_views=not self.asynchronous)
        finally:
            self._busy = False

    def batches(self, positions: List[Tensor], prepared, keep_views: bool) -> Iterator:
        prepared, keep = iter(prepared), 0  # a batch of an earlier iteration is no loop's current one
        for position in positions:
            if not keep_views:  # before the pipeline is asked for a buffer again
                self._handed, keep = detach_held(self._handed, keep), KEEP_BEHIND - 1
            batch = next(prepared)
            data = self.to_data(batch, position)
            if not keep_views:
                self._handed.append(aliased(data, batch))
            del batch  # the Data's aliases hold the batch: the slots go back once they are copied or dropped
            yield self.filter_fn(data)

    def sample(self, index) -> "torch_geometric.data.Data":  # noqa: F821
        """The batch of these positions before `transform` (pyg_face.py: PyG's collate_fn)."""
        positions = torch.as_tensor(index, dtype=torch.long).view(-1)
        count = self.plan.nodes.numel()
        if positions.numel() and (int(positions.min()) < 0 or int(positions.max()) >= count):
            raise ConveyorError(f"loader(index) takes positions in {self.input_name} (0..{count - 1}), "
                                f"got {index!r}.")
        source = self.side_source() if self.asynchronous else self.source
        seeds = self.seed_batch(self.plan.nodes[positions])
        batch = next(iter(source.run([seeds], stream_seed(self.seed, 0, STREAM_SAMPLER))))
        return self.to_data(batch, positions)

    def seed_batch(self, seeds: Tensor) -> Tensor:
        """A batch's seeds as the sampler is to take them (the node loader's: each node once)."""
        return seeds

    def to_data(self, prepared, positions: Tensor):
        """The prepared batch of these seed positions as PyG's batch (the subclass's)."""
        raise NotImplementedError

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


def loader_inputs(name: str, data, batch_size, taken: dict, pipeline, depth, sampler, cache, device, seed,
                  leave_out: Tuple[str, ...] = (), typed: bool = False):
    """What every loader reads first, checked before anything starts: the options of PyG's keywords
    `taken` honours (and the `__main__` guard the async pipeline needs), the batch size, the
    graph and batch layout of `data`, the device and the seed."""
    options = options_of(taken, pipeline, depth)
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ConveyorError(f"conveyor.{name}'s batch_size must be a positive integer, got {batch_size!r}.")
    graph, layout = read_data(data, options, leave_out, typed)
    if pipeline_settings(options.pipeline, options.depth).choose(graph)[0] == "async":  # auto's choice too
        check_main_guard(f"conveyor.{name}(pipeline='async')", (sampler, cache))
    return options, graph, layout, resolve_device(device, "device"), seed_of(seed)


def read_data(data, options, leave_out: Tuple[str, ...] = (), typed: bool = False):
    """The pipeline's graph of the user's data and its batches' layout: with `typed` (a loader that
    takes them), a HeteroData's (or typed stores') as a typed graph, with its relations'
    `weight_attr` gathered for the sampler (loader/hetero.py); anything else's as pyg_input.py reads it."""
    from conveyor.loader.hetero import (
        hetero_data_of_stores,
        hetero_graph_and_layout,
        is_hetero,
        typed_stores,
        with_weights,
    )
    if typed and isinstance(data, (tuple, list)) and len(data) == 2 and typed_stores(data[1]):
        data = hetero_data_of_stores(*data)
    if not (typed and is_hetero(data)):
        return graph_and_layout(data, leave_out)
    graph, layout = hetero_graph_and_layout(data, leave_out)
    return with_weights(graph, options.weight_attr), layout


def snapshot(data):
    """Which values a PyG Data holds under which keys (None for a Graph or stores: fixed)."""
    return tuple((key, id(value)) for key, value in data) if hasattr(data, "is_node_attr") else None


def aliased(data, prepared) -> List[Tensor]:
    """Each tensor of `data` (a Data or HeteroData) replaced by an alias of it (a view of the whole),
    which `detach_held` can later turn into a copy wherever it went; the aliases. (The pipeline's
    views carry the weak references its slots' leases hang on, which `swap_tensors` refuses.) Each
    alias keeps `prepared`, the batch of the pipeline's own views, alive: a tensor cut out of one
    of them (a node type's rows of x) holds its memory but not the view, so a batch with no
    pipeline view left in it (a typed adj_t batch) gave its slots back while still reading them."""
    aliases = []
    for store in data.stores:
        for key, value in store.items():
            if isinstance(value, Tensor):
                store[key] = alias = value.view_as(value)
                alias._conveyor_batch = prepared  # the slots' leases live as long as this
                aliases.append(alias)
    return aliases


HELD_HERE = 3  # references to an alias while detach_held looks at it: the list's, the loop's, getrefcount's


def detach_held(handed: List[List[Tensor]], keep: int) -> List[List[Tensor]]:
    """Copy out of the pipeline's buffers every tensor of the handed batches but the last `keep`
    that anything still holds, in place (`torch.utils.swap_tensors`: whoever holds it, the batch or
    a tensor taken out of it such as PyG's CachedLoader keeps, now holds the copy), so that their
    buffers go back; return the batches still views."""
    old, recent = handed[: len(handed) - keep], handed[len(handed) - keep:]
    for aliases in old:
        for alias in aliases:
            if sys.getrefcount(alias) > HELD_HERE:
                torch.utils.swap_tensors(alias, alias.clone())
    return recent
