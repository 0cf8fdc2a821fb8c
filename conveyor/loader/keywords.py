"""PyG's keywords that conveyor's `NeighborLoader` does not support, each refused by name.

PyG's `NeighborLoader` passes its keywords on to `NodeLoader` and torch's `DataLoader`. A keyword
given at PyG's default changes nothing, so it is accepted (a loop written for PyG may spell out
`replace=False` or `num_workers=0`); any other value is refused with the reason and the fix, never
ignored: a loader that silently sampled with replacement, or dropped a transform, would train
something else than the user wrote.
"""
from __future__ import annotations

from conveyor.core import ConveyorError

WORKERS = ("conveyor runs its own sampler and feature-loader processes (pipeline='async'); drop it, or "
           "use pipeline='serial' to sample in this process")
PER_BATCH = "apply it to each batch in your loop instead"
SAMPLING = "conveyor draws distinct in-neighbours, uniformly, hop by hop, as PyG's defaults do"

# keyword: (PyG's default, why conveyor refuses another value and what to do instead)
UNSUPPORTED = {
    "input_time": (None, "temporal sampling is not supported"),
    "time_attr": (None, "temporal sampling is not supported"),
    "temporal_strategy": ("uniform", "temporal sampling is not supported"),
    "replace": (False, f"sampling with replacement is not supported: {SAMPLING}"),
    "subgraph_type": ("directional", f"only PyG's default 'directional' subgraphs are made: {SAMPLING}"),
    "disjoint": (False, "disjoint subgraphs per seed are not supported"),
    "directed": (True, "only directed (PyG's default 'directional') subgraphs are made"),
    "weight_attr": (None, f"weighted sampling is not supported: {SAMPLING}"),
    "is_sorted": (False, "conveyor sorts the graph itself (it keeps it in CSC form)"),
    "neighbor_sampler": (None, "pass your own sampler as sampler= (README: 'Your own sampler or feature source')"),
    "node_sampler": (None, "pass your own sampler as sampler= (README: 'Your own sampler or feature source')"),
    "transform": (None, f"a transform is not run by the loader; {PER_BATCH}"),
    "transform_sampler_output": (None, f"a sampler-output transform is not run; {PER_BATCH}"),
    "filter_per_worker": (None, WORKERS),
    "custom_cls": (None, "heterogeneous data is not supported"),
    "input_id": (None, "input_id is derived from input_nodes, as PyG's NeighborLoader does"),
    "num_workers": (0, WORKERS),
    "persistent_workers": (False, WORKERS),
    "prefetch_factor": (None, f"{WORKERS}; depth= sets how many batches each stage may prepare ahead"),
    "worker_init_fn": (None, WORKERS),
    "multiprocessing_context": (None, WORKERS),
    "timeout": (0, f"{WORKERS}; a stalled stage stops after PipelineSettings.stall_timeout_s"),
    "pin_memory": (False, "batches arrive on device= already (the features through the cache)"),
    "pin_memory_device": ("", "batches arrive on device= already (the features through the cache)"),
    "collate_fn": (None, f"every batch is a PyG Data made by conveyor; {PER_BATCH}"),
    "batch_sampler": (None, "batches are cut from input_nodes by batch_size, shuffle and drop_last"),
    "generator": (None, "the order comes from seed= (each epoch reshuffled from it)"),
    "in_order": (True, "batches always come in order"),
}


def check_keywords(keywords: dict) -> None:
    """Refuse, in one paragraph, the first keyword that is not PyG's default or not PyG's at all."""
    for name, value in keywords.items():
        if name not in UNSUPPORTED:
            raise ConveyorError(
                f"conveyor.NeighborLoader got the keyword {name!r}, which neither it nor PyG's "
                f"NeighborLoader takes; its keywords are PyG's data, num_neighbors, input_nodes, "
                f"batch_size, shuffle, drop_last, and its own pipeline, sampler, cache, device, seed, depth.")
        default, why = UNSUPPORTED[name]
        if not _same(value, default):
            raise ConveyorError(
                f"conveyor.NeighborLoader does not support PyG's {name}={value!r}: {why}. Leave "
                f"{name} out (or at PyG's default, {default!r}); to keep it, use "
                f"torch_geometric.loader.NeighborLoader for this loop.")


def _same(value, default) -> bool:
    """Whether `value` is PyG's default (an enum by its value: SubgraphType.directional)."""
    if default is None or isinstance(default, bool):
        return value is default
    value = getattr(value, "value", value)
    if isinstance(default, int):
        return isinstance(value, (int, float)) and not isinstance(value, bool) and value == default
    return type(value) is type(default) and value == default
