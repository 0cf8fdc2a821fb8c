"""`conveyor.NeighborLoader`: PyG's `NeighborLoader` for homogeneous node-level work, backed by
conveyor's pipeline (docs/design.md §2.7).

It IS the pipeline: one batch source (`pipeline.batch_source`: the sampler and feature-loader
processes, the cache, the pace controller, the recycled slots), started at the first iteration and
kept across epochs. Each `iter()` is the next epoch, its seeds reshuffled from `seed`
(`pipeline.seeds`), each batch turned into PyG's `Data` (to_pyg.py). The trainer draws from the
same object through `run()`, which yields the pipeline's own `PreparedBatch`es (per-hop blocks).
"""
from __future__ import annotations

from typing import Iterator

from conveyor.core import ConveyorError
from conveyor.core.device import resolve_device
from conveyor.loader.inputs import as_graph, features_of, input_node_ids, pipeline_settings, sampler_of, seed_of
from conveyor.loader.keywords import check_keywords
from conveyor.loader.pipeline_loader import LoaderParts, PipelineLoader
from conveyor.loader.to_pyg import to_pyg
from conveyor.pipeline.guard import check_main_guard
from conveyor.pipeline.seeds import EpochPlan


class NeighborLoader(PipelineLoader):
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
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ConveyorError(f"conveyor.NeighborLoader's batch_size must be a positive integer, got "
                                f"{batch_size!r}.")
        graph, device, seed = as_graph(data), resolve_device(device), seed_of(seed)
        parts = LoaderParts(sampler_of(sampler, num_neighbors, seed, device), features_of(cache, seed), device,
                            settings)
        plan = EpochPlan(input_node_ids(input_nodes, graph), batch_size, seed, bool(shuffle), bool(drop_last))
        super().__init__(graph, parts, plan)
        self.batch_size, self.shuffle, self.drop_last, self.seed = batch_size, plan.shuffle, plan.drop_last, seed
        self.input_nodes = plan.nodes
        self.epochs_iterated = 0  # the next iter() is epoch epochs_iterated + 1

    def __iter__(self) -> Iterator:
        """The next epoch's batches as PyG `Data`s."""
        self.epochs_iterated += 1
        epoch = self.epochs_iterated
        labels = self.labels()
        for input_id, batch in zip(self.plan.positions(epoch), self.epoch(epoch)):
            data = to_pyg(batch, labels, input_id)
            del batch  # the Data holds the views it needs: the slots go back once it is dropped
            yield data

    def __repr__(self) -> str:
        return (f"conveyor.NeighborLoader({self.graph.num_nodes} nodes, {len(self)} batches of {self.batch_size}, "
                f"pipeline={self.parts.settings.name}, device={self.device})")
