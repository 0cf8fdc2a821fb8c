"""`conveyor.NeighborLoader`: PyG's `NeighborLoader` for homogeneous node-level work, backed by
conveyor's pipeline (docs/design.md §2.7).

It IS the pipeline: one batch source (`pipeline.batch_source`: the sampler and feature-loader
processes, the cache, the pace controller, the recycled slots), started at the first iteration and
kept across epochs. Each `iter()` is the next epoch, its seeds reshuffled from `seed`
(`pipeline.seeds`), each batch turned into PyG's `Data` (to_pyg.py). The trainer draws from the
same object through `run()`, which yields the pipeline's own `PreparedBatch`es (per-hop blocks).
"""
from __future__ import annotations

import gc
import weakref
from dataclasses import replace
from typing import Iterator, List

import torch
from torch import Tensor

from conveyor.partition import ConveyorError
from conveyor.partition.device import resolve_device
from conveyor.pipeline import PipelineSettings, batch_source
from conveyor.pipeline.batch import device_labels
from conveyor.pipeline.guard import check_main_guard
from conveyor.pipeline.seeds import STREAM_SAMPLER, epoch_seed_batches, stream_seed

from .inputs import as_graph, features_of, input_node_ids, pipeline_settings, sampler_of, seed_of
from .keywords import check_keywords
from .to_pyg import to_pyg


class NeighborLoader:
    """As `torch_geometric.loader.NeighborLoader(data, num_neighbors, input_nodes=None,
    batch_size=1, shuffle=False, drop_last=False)`, plus conveyor's own keywords:

    pipeline: "async" (sampler and feature loader in their own processes, overlapped with your
        loop) or "serial" (both in this process); sampler: "auto", "bsp", "fused", "pyg", or your
        own sampler or spec (README, "Your own sampler or feature source"); cache: a policy
        ("degree", "random", "none"), a `cache.CacheSettings`, or your own feature source or spec;
        device: where batches arrive ("auto": CUDA when there is one); seed: the epochs' order and
        draws (None: `torch.initial_seed()`, so `torch.manual_seed` sets it); depth: batches each
        stage may prepare ahead.

    Any other PyG keyword is refused by name unless it is at PyG's default (keywords.py). Close it
    with `close()` or a `with` block; garbage collection and interpreter exit close it too."""

    def __init__(self, data, num_neighbors, input_nodes=None, batch_size: int = 1, shuffle: bool = False,
                 drop_last: bool = False, *, pipeline: str = "async", sampler="auto", cache="degree",
                 device="auto", seed=None, depth: int = 4, **pyg_keywords):
        check_keywords(pyg_keywords)
        settings = pipeline_settings(pipeline, depth)
        if settings.name == "async":
            check_main_guard("conveyor.NeighborLoader(pipeline='async')")
        graph, device, seed = as_graph(data), resolve_device(device), seed_of(seed)
        parts = {"sampler": sampler_of(sampler, num_neighbors, seed, device), "features": features_of(cache, seed),
                 "device": device, "settings": settings}
        self._setup(graph, parts, input_node_ids(input_nodes, graph), batch_size, shuffle, drop_last, seed)

    @classmethod
    def from_settings(cls, graph, sampler, features, device, settings: PipelineSettings, seed: int,
                      batch_ratio: float = 1.0, recorder=None, input_nodes=None, batch_size: int = 1,
                      shuffle: bool = True) -> "NeighborLoader":
        """The loader over the pipeline as the trainer builds it: `sampler` and `features` as
        `pipeline.batch_source` takes them (objects or specs), the pipeline's own settings, and
        what `batch_source` takes besides (`batch_ratio`, `recorder`)."""
        loader = cls.__new__(cls)
        parts = {"sampler": sampler, "features": features, "device": torch.device(device), "settings": settings,
                 "batch_ratio": batch_ratio, "recorder": recorder}
        loader._setup(graph, parts, input_node_ids(input_nodes, graph), batch_size, shuffle, False, seed)
        return loader

    def _setup(self, graph, parts: dict, input_nodes: Tensor, batch_size: int, shuffle: bool, drop_last: bool,
               seed: int) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ConveyorError(f"conveyor.NeighborLoader's batch_size must be a positive integer, got "
                                f"{batch_size!r}.")
        self.labelled = graph.y is not None
        self.graph = graph if self.labelled else replace(graph, y=torch.full((graph.num_nodes,), -1))
        self.parts, self.input_nodes, self.batch_size = parts, input_nodes, batch_size
        self.shuffle, self.drop_last, self.seed = bool(shuffle), bool(drop_last), int(seed)
        self.device = parts["device"]
        self.epoch = 0  # the epochs iterated so far: the next iter() is epoch self.epoch + 1
        self._labels = None
        self._state = {"source": None, "closed": False}  # shared with the finalizer, which must not hold self
        self._finalizer = weakref.finalize(self, _close, self._state)

    @property
    def source(self):
        """The pipeline's batch source, started on first use and kept until `close()`."""
        if self._state["closed"]:
            raise ConveyorError("this conveyor.NeighborLoader was closed; make a new one to iterate again.")
        if self._state["source"] is None:
            p = self.parts
            self._state["source"] = batch_source(self.graph, p["sampler"], p["features"], p["device"], p["settings"],
                                                 p.get("batch_ratio", 1.0), p.get("recorder"))
        return self._state["source"]

    def run(self, seed_batches: List[Tensor], sampler_seed: int, phase: str = "train") -> Iterator:
        """The pipeline's `PreparedBatch`es of `seed_batches` (per-hop blocks: the trainer's fast path)."""
        return self.source.run(seed_batches, sampler_seed, phase)

    def positions(self, epoch: int) -> List[Tensor]:
        """Epoch `epoch`'s batches as positions in input_nodes (PyG's input_id): shuffled from the
        seed as the trainer shuffles its training nodes, or in order."""
        everything = torch.arange(self.input_nodes.numel())
        batches = (epoch_seed_batches(everything, self.batch_size, self.seed, epoch) if self.shuffle
                   else list(everything.split(self.batch_size)))
        if self.drop_last and batches and batches[-1].numel() < self.batch_size:
            batches.pop()
        return batches

    def __iter__(self) -> Iterator:
        """The next epoch's batches as PyG `Data`s."""
        self.epoch += 1
        positions = self.positions(self.epoch)
        prepared = self.run([self.input_nodes[p] for p in positions], stream_seed(self.seed, self.epoch,
                                                                                  STREAM_SAMPLER))
        labels = self.labels()
        for input_id, batch in zip(positions, prepared):
            data = to_pyg(batch, labels, input_id)
            del batch  # the Data holds the views it needs: the slots go back once it is dropped
            yield data

    def labels(self):
        """Every node's label on the device, kept narrow (widened per batch), or None."""
        if self._labels is None and self.labelled:
            self._labels = device_labels(self.graph.y, self.device)
        return self._labels

    def __len__(self) -> int:
        n, b = self.input_nodes.numel(), self.batch_size
        return n // b if self.drop_last else -(-n // b)

    def close(self) -> None:
        """Stop the pipeline's processes and release its memory (idempotent)."""
        self._finalizer()

    def __enter__(self) -> "NeighborLoader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"conveyor.NeighborLoader({self.graph.num_nodes} nodes, {len(self)} batches of {self.batch_size}, "
                f"pipeline={self.parts['settings'].name}, device={self.device})")


def _close(state: dict) -> None:
    state["closed"] = True
    source, state["source"] = state["source"], None
    if source is not None:
        source.close()
        del source
        gc.collect()  # the queues' named semaphores go once their last reference does: some sit in cycles
