"""What a batch source yields, `PreparedBatch`, and what a batch costs on its way, `BatchCost`.

Both sources (serial.py in the trainer's process, source.py across stage processes) build the
same PreparedBatch from the same parts: the sampled subgraph, the features the cache gathers for
its nodes, the labels of its seeds, and one cost record that each stage adds its share to.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Dict, List, Optional

import torch
from torch import Tensor

from conveyor.core import ConveyorError
from conveyor.partition.attributes import EDGE, NODE, attribute_rows
from conveyor.samplers import SampledBatch

# Batches trained before an `auto` cache is sized: by then the training's peak memory is known.
WARMUP_BATCHES = 3


# a feature source's counter (stats()) -> the BatchCost field a gather's share of it goes to
COUNTED = {"hits": "cache_hits", "misses": "cache_misses", "bytes_from_host": "bytes_from_host",
           "host_hits": "host_hits", "window_hits": "window_hits", "disk_rows": "disk_rows", "disk_bytes": "disk_bytes"}


@dataclass(frozen=True)
class BatchCost:
    sample_s: float = 0.0
    gather_s: float = 0.0
    ipc_s: float = 0.0  # copying into and out of the pipeline's slots, summed over the stages
    slot_bytes: int = 0  # bytes written into the pipeline's slots, summed over the stages
    cache_hits: int = 0
    cache_misses: int = 0
    bytes_from_host: int = 0
    host_hits: int = 0  # the rows below the device tier (cache/host_tier.py): its static rows,
    window_hits: int = 0  # the rows prefetched ahead,
    disk_rows: int = 0  # the rows read from disk when gathered,
    disk_bytes: int = 0  # and every byte read from disk meanwhile (the prefetches' too)

    def gathered(self, gather_s: float, cache_before: dict, cache_after: dict) -> "BatchCost":
        """This cost plus a gather's: its time and the cache counters it moved."""
        moved = {k: int(cache_after.get(k, 0)) - int(cache_before.get(k, 0)) for k in COUNTED}
        return replace(self, gather_s=gather_s, **{field: moved[k] for k, field in COUNTED.items()})

    def plus_ipc(self, seconds: float, slot_bytes: int = 0) -> "BatchCost":
        return replace(self, ipc_s=self.ipc_s + seconds, slot_bytes=self.slot_bytes + slot_bytes)


@dataclass
class PreparedBatch:
    batch: SampledBatch  # on the training device
    x: Optional[Tensor]  # features of batch.n_id, in the cache's dtype (None: no feature source)
    y: Optional[Tensor]  # labels of the seeds: class ids narrow (device_labels), float [seeds, C] targets, or None
    cost: BatchCost
    node_attrs: Dict[str, Tensor] = field(default_factory=dict)  # the attributes the batch carries, by n_id
    edge_attrs: Dict[str, Tensor] = field(default_factory=dict)  # by the edges of every hop, hop 1's first

    @classmethod
    def of(cls, batch: SampledBatch, x, y, cost: BatchCost, attrs: Dict[str, Tensor]) -> "PreparedBatch":
        """The batch with the attributes `attrs` holds by their slot names (node.<name>, edge.<name>)."""
        split = {kind: {k[len(kind) + 1:]: v for k, v in attrs.items() if k.startswith(kind + ".")}
                 for kind in (NODE, EDGE)}
        return cls(batch, x, y, cost, split[NODE], split[EDGE])

    @classmethod
    def from_views(cls, views: Dict[str, Tensor], counts: List[int], cost: BatchCost) -> "PreparedBatch":
        """The batch whose tensors `views` holds by their slot names (x, y, node.<name>, edge.<name>)."""
        return cls.of(SampledBatch.from_tensors(views, counts), views.get("x"), views.get("y"), cost, views)


def gather_attributes(store, batch: SampledBatch, new: Callable) -> Dict[str, Tensor]:
    """Every attribute of `store` (partition.attributes.AttributeStore) for `batch`, each gathered
    into `new(name, shape, dtype)`, by `kind.name` (node.year, edge.e_id). Edge attributes follow the
    edges of every hop, hop 1's first."""
    out, positions = {}, None
    for name, (kind, row, dtype) in store.fields().items():
        if kind == EDGE and positions is None:
            positions = edge_positions(batch)
        index = batch.n_id if kind == NODE else positions
        rows = attribute_rows(store, name, index)  # a typed graph's: only its type's (partition/typed_attributes.py)
        out[f"{kind}.{name}"] = store.gather(name, index, new(f"{kind}.{name}", (rows, *row), dtype))
    return out


def edge_positions(batch: SampledBatch) -> Tensor:
    if batch.edge_pos_per_hop is None:
        raise ConveyorError("the sampler's batches do not say which edges they hold (SampledBatch."
                            "edge_pos_per_hop is None), so their edge attributes and e_id cannot be "
                            "gathered; use a built-in sampler (bsp, fused, pyg), or have yours fill it.")
    return torch.cat(batch.edge_pos_per_hop) if batch.edge_pos_per_hop else batch.n_id.new_empty(0)


def seed_labels(labels: Tensor, batch: SampledBatch, out: Optional[Tensor] = None) -> Tensor:
    """The labels of the batch's seeds (its first nodes), gathered where `labels` and the batch
    are (the training device), into `out` if given: the one label formula."""
    return torch.index_select(labels, 0, batch.seeds, out=out)


def device_labels(labels: Optional[Tensor], device) -> Optional[Tensor]:
    """`labels` on `device` in the narrowest integer type that holds them (int16 below 32,768
    classes): kept there for the whole run, they cost 2 bytes a node instead of int64's 8 (0.2 GB
    rather than 0.9 GB of GPU memory on papers100M). The trainer widens each batch's few seeds.
    Float [N, C] targets (multi-label) go as they are; no labels (None) stay None."""
    if labels is None:
        return None
    if labels.is_floating_point():
        return labels.to(device)
    low, high = (int(labels.min()), int(labels.max())) if labels.numel() else (0, 0)
    for dtype in (torch.int16, torch.int32):
        if torch.iinfo(dtype).min <= low and high <= torch.iinfo(dtype).max:
            return labels.to(device=device, dtype=dtype)
    return labels.to(device)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def built(part, graph, device):
    """A sampler, a feature source or an attribute store as a batch source was handed it: the
    object itself (or None), or, for a spec (any object with `build(graph, device)`, e.g.
    samplers.SamplerSpec, cache.CacheSpec, partition.attributes.AttributeSpec), the one it builds
    over `graph` on `device` (in the stage process that uses it)."""
    return part.build(graph, device) if callable(getattr(part, "build", None)) else part


def reseed(sampler, seed: int) -> None:
    """Restart the sampler's random stream (the contract's `manual_seed`; a sampler without one
    draws as it likes)."""
    if callable(getattr(sampler, "manual_seed", None)):
        sampler.manual_seed(seed)


def sample_many(sampler, seed_list: List[Tensor]) -> List[SampledBatch]:
    """The batches of `seed_list`, as consecutive `sample` calls would draw them: in one call where
    the sampler has `sample_many` (the fused kernel's super-batch)."""
    if callable(getattr(sampler, "sample_many", None)):
        return sampler.sample_many(seed_list)
    return [sampler.sample(seeds) for seeds in seed_list]


def feature_stats(features) -> dict:
    """A feature source's counters (`hits`, `misses`, `bytes_from_host`; none: zeros)."""
    return features.stats() if callable(getattr(features, "stats", None)) else {}
