"""PyG's keywords beyond the ones `conveyor.NeighborLoader` names, each taken with a meaning
conveyor honours or refused by name.

PyG's `NeighborLoader` passes its keywords on to `NodeLoader` and torch's `DataLoader`. Those that
conveyor can honour are taken (`TAKEN`: what each means here); a keyword given at PyG's default
changes nothing, so it is accepted too (a loop written for PyG may spell out `replace=False`); any
other value is refused with the reason and the fix, never ignored: a loader that silently sampled
with replacement, or dropped a sampler-output transform, would train something else than the user
wrote.
"""
from __future__ import annotations

from conveyor.core import ConveyorError

PER_BATCH = "apply it to each batch in your loop instead"
WORKERS = "conveyor runs its own sampler and feature-loader processes: set how far ahead they work with depth="

# keyword: what conveyor does with it (README: "The PyG door")
TAKEN = {
    "subgraph_type": "directional (PyG's default), bidirectional or induced, as PyG makes them",
    "directed": "False is PyG's old spelling of subgraph_type='induced'",
    "weight_attr": "neighbours drawn with probability proportional to that edge attribute",
    "replace": "True: each node draws its fanout with replacement, as PyG (node_sampler bsp or pyg, uniformly)",
    "disjoint": "True: each seed its own subgraph, the batch's `batch` saying whose each node is, as PyG "
                "(node_sampler bsp, uniformly; samplers/disjoint.py)",
    "num_workers": "0 samples in this process (pipeline='serial'); more runs the sampler and the feature "
                   "loader in their own processes (pipeline='async'); neither it nor pipeline= given: auto",
    "persistent_workers": "conveyor's stage processes always live as long as the loader",
    "filter_per_worker": "batches are always assembled in conveyor's loader process (async) or in this one",
    "pin_memory": "batches arrive on device= already (on CUDA through pinned staging buffers)",
    "pin_memory_device": "batches arrive on device=",
    "prefetch_factor": "how many batches each stage may prepare ahead (depth=)",
    "transform": "called on each batch before it is yielded",
    "is_sorted": "conveyor sorts the graph itself (it keeps it in CSC form)",
    "in_order": "batches always come in order",
    "sampler": "a torch sampler of positions in the seeds (e.g. ImbalancedSampler): each epoch's seeds, cut by "
               "batch_size and drop_last, as PyG's DataLoader takes it (loader/index_samplers.py)",
    "batch_sampler": "a torch sampler of batches of seed positions, as PyG's DataLoader takes it",
    "time_attr": "temporal sampling: the node- or edge-level attribute of times; a seed's subgraph holds nothing "
                 "later than its time (node_sampler bsp; samplers/temporal.py), each seed its own subgraph, as PyG",
    "input_time": "each input node's time (default: its own, with node-level time_attr), as PyG",
    "temporal_strategy": "uniform (PyG's default) or last: draw uniformly among the neighbours not later than "
                         "the seed, or take the latest of them",
    "worker_init_fn": "run in each of conveyor's stage processes as it starts (the sampler: worker 0, the "
                      "feature loader: worker 1); the serial pipeline, like num_workers=0, runs none",
}
# keyword: (PyG's default, why conveyor refuses another value and what to do instead)
UNSUPPORTED = {
    "neighbor_sampler": (None, "PyG's NeighborSampler objects do not draw conveyor's batches: pass conveyor's "
                               "own sampler as node_sampler= (README: 'Your own sampler or feature source')"),
    "transform_sampler_output": (None, f"a sampler-output transform is not run; {PER_BATCH}"),
    "custom_cls": (None, "heterogeneous stores are not supported"),
    "input_id": (None, "input_id is derived from input_nodes, as PyG's NeighborLoader does"),
    "multiprocessing_context": (None, WORKERS),
    "timeout": (0, f"{WORKERS}; a stalled stage stops after PipelineSettings.stall_timeout_s"),
    "collate_fn": (None, f"every batch is a PyG Data made by conveyor; {PER_BATCH}"),
    "generator": (None, "the order comes from seed= (each epoch reshuffled from it)"),
}
OWN = ("data, num_neighbors, input_nodes, batch_size, shuffle, drop_last, the keywords of PyG's NodeLoader and "
       "DataLoader it honours (" + ", ".join(TAKEN) + "), and its own pipeline, node_sampler, cache, device, seed, "
       "depth")


def check_keywords(keywords: dict, loader: str = "NeighborLoader", taken: dict = TAKEN,
                   unsupported: dict = UNSUPPORTED, own: str = OWN) -> dict:
    """The keywords conveyor's `loader` honours (`taken`), after refusing, in one paragraph, the
    first one that is neither honoured, nor at PyG's default (`unsupported`), nor PyG's at all."""
    for name, value in keywords.items():
        if name in taken:
            continue
        if name not in unsupported:
            raise ConveyorError(f"conveyor.{loader} got the keyword {name!r}, which neither it nor PyG's "
                                f"{loader} takes; its keywords are {own}.")
        default, why = unsupported[name]
        if not _same(value, default):
            raise ConveyorError(
                f"conveyor.{loader} does not support PyG's {name}={value!r}: {why}. Leave "
                f"{name} out (or at PyG's default, {default!r}); to keep it, use "
                f"torch_geometric.loader.{loader} for this loop.")
    return {name: value for name, value in keywords.items() if name in taken}


def _same(value, default) -> bool:
    """Whether `value` is PyG's default (an enum by its value)."""
    if default is None or isinstance(default, bool):
        return value is default
    value = getattr(value, "value", value)
    if isinstance(default, int):
        return isinstance(value, (int, float)) and not isinstance(value, bool) and value == default
    return type(value) is type(default) and value == default
