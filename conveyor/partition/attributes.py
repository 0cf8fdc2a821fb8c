"""A graph's other attributes as a batch carries them (PyG's `filter_data`): node-level tensors
(`Graph.node_attrs`: a Data's train_mask, year, a 1-D x, ...) gathered by the batch's `n_id`,
edge-level ones (`Graph.edge_attrs`: edge_attr, edge_weight, ...) by the sampled edges' CSC
positions, and each sampled edge's id (PyG's `e_id`, `Graph.edge_ids`).

`AttributeStore` is what the pipeline asks of a store: any class with these two methods serves.
`AttributeSpec` names the attributes a batch carries and builds the store over the graph, in the
process that gathers (the pipeline's loader stage), so nothing of the graph is pickled.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Protocol, Tuple, runtime_checkable

import torch
from torch import Tensor

from conveyor.core import ConveyorError

NODE, EDGE = "node", "edge"
E_ID = "e_id"  # the edge field every store may hold: the sampled edges' ids
Field = Tuple[str, Tuple[int, ...], torch.dtype]  # (NODE | EDGE, a row's shape, dtype)


@runtime_checkable
class AttributeStore(Protocol):
    """The attributes a batch carries, gathered by id."""

    def fields(self) -> Dict[str, Field]:
        """Each attribute by name: whether it is indexed by node or edge, a row's shape, its dtype."""

    def gather(self, name: str, index: Tensor, out: Tensor) -> Tensor:
        """Rows `index` (node ids, or the edges' CSC positions) of attribute `name`, into `out`.
        A store whose attribute has other than one row per index says how many with an optional
        `rows(name, index)` (a typed graph's: partition/typed_attributes.py)."""


def attribute_rows(store, name: str, index: Tensor) -> int:
    """How many rows `store.gather(name, index, out)` writes: its `rows`, else one per index."""
    return int(store.rows(name, index)) if callable(getattr(store, "rows", None)) else index.numel()


@dataclass(frozen=True)
class AttributeSpec:
    """Which of the graph's attributes a batch carries; `e_id`: also each sampled edge's id."""
    node: Tuple[str, ...] = ()
    edge: Tuple[str, ...] = ()
    e_id: bool = False

    @classmethod
    def everything(cls, graph) -> "AttributeSpec":
        """Every attribute the graph holds, and e_id: what PyG's loader puts in its batches."""
        return cls(tuple(graph.node_attrs), tuple(graph.edge_attrs), True)

    @property
    def needs_edges(self) -> bool:
        """Whether a batch needs its edges' positions (`SampledBatch.edge_pos_per_hop`)."""
        return bool(self.edge) or self.e_id

    def build(self, graph, device) -> "GraphAttributes":
        return GraphAttributes(graph, self)


class GraphAttributes:
    """The attributes `spec` names, read from `graph`'s tensors (host memory, shared with the
    trainer) and gathered onto the device of the `out` they are given."""

    def __init__(self, graph, spec: AttributeSpec):
        missing = ([n for n in spec.node if n not in graph.node_attrs]
                   + [e for e in spec.edge if e not in graph.edge_attrs])
        if missing:
            raise ConveyorError(f"the graph has no attribute {', '.join(missing)}; it holds node attributes "
                                f"{sorted(graph.node_attrs)} and edge attributes {sorted(graph.edge_attrs)}.")
        self.sources: Dict[str, Tuple[str, Tensor]] = {
            **{name: (NODE, graph.node_attrs[name]) for name in spec.node},
            **{name: (EDGE, graph.edge_attrs[name]) for name in spec.edge}}
        if spec.e_id:
            self.sources[E_ID] = (EDGE, graph.edge_ids)  # None: an edge's position is its id

    def fields(self) -> Dict[str, Field]:
        return {name: (kind, (), torch.long) if t is None else (kind, tuple(t.shape[1:]), t.dtype)
                for name, (kind, t) in self.sources.items()}

    def gather(self, name: str, index: Tensor, out: Tensor) -> Tensor:
        _, tensor = self.sources[name]
        if tensor is None:  # e_id of a graph whose positions are the ids
            return out.copy_(index)
        if out.device == tensor.device:
            return torch.index_select(tensor, 0, index.to(tensor.device), out=out)
        return out.copy_(tensor.index_select(0, index.cpu()), non_blocking=False)
