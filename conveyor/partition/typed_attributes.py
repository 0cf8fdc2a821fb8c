"""A typed graph's attributes as a batch carries them (partition/hetero.py), through the pipeline's
attribute store protocol (partition/attributes.py): gathered in the loader stage, as an untyped
graph's are.

- `<t>/<key>` (node): node type t's attribute `key`, one row per node of type t in the batch, in
  the order those nodes have in its n_id;
- `<r>/<key>` (edge): relation r's attribute `key`, one row per sampled edge of relation r, in the
  order those edges have among the batch's edges (every hop's, hop 1's first), read by the edge's
  column in relation r's own edge_index;
- `e_id` and `edge_type` (edge): every sampled edge's column in the relations' concatenated edges
  and its relation (a relation's own e_id is e_id - Schema.edge_offsets[r]).

A typed field has fewer rows than the batch has nodes or edges: `rows(name, index)` says how many,
so the pipeline sizes its slot (pipeline/batch.py, `gather_attributes`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional, Tuple

import torch
from torch import Tensor

from conveyor.partition.attributes import E_ID, EDGE, NODE, Field
from conveyor.partition.hetero import EDGE_TYPE, TypedGraph


@dataclass(frozen=True)
class TypedAttributeSpec:
    """Which of a typed graph's attributes a batch carries: (node type, key) and (relation, key)
    pairs by index, and whether every edge's e_id and edge_type."""
    node: Tuple[Tuple[int, str], ...] = ()
    edge: Tuple[Tuple[int, str], ...] = ()
    e_id: bool = False
    edge_type: bool = False

    @classmethod
    def everything(cls, graph: TypedGraph) -> "TypedAttributeSpec":
        """Every typed attribute, e_id and edge_type: what PyG's loader puts in its batches."""
        keys = [k.split(".", 2) for k in graph.typed if k.startswith(("node.", "edge."))]
        return cls(tuple((int(t), key) for kind, t, key in keys if kind == "node"),
                   tuple((int(r), key) for kind, r, key in keys if kind == "edge"), True, True)

    @property
    def needs_edges(self) -> bool:
        return bool(self.edge) or self.e_id or self.edge_type

    def build(self, graph: TypedGraph, device) -> "TypedAttributes":
        return TypedAttributes(graph, self)


class TypedAttributes:
    """The attributes `spec` names, read from the typed graph's host tensors (module doc)."""

    def __init__(self, graph: TypedGraph, spec: TypedAttributeSpec):
        self.schema = graph.schema
        self.ends = torch.tensor(graph.schema.offsets[1:], dtype=torch.long)
        self.edge_type, self.edge_ids = graph.edge_attrs[EDGE_TYPE], graph.edge_ids
        self.memo: Dict[str, tuple] = {}  # kind -> (the last index, its types): `types`
        # name -> (kind, node type or relation (None: every node or edge), tensor)
        self.sources: Dict[str, Tuple[str, Optional[int], Tensor]] = {
            **{f"{t}/{k}": (NODE, t, graph.typed[f"node.{t}.{k}"]) for t, k in spec.node},
            **{f"{r}/{k}": (EDGE, r, graph.typed[f"edge.{r}.{k}"]) for r, k in spec.edge}}
        if spec.e_id:
            self.sources[E_ID] = (EDGE, None, self.edge_ids)
        if spec.edge_type:
            self.sources[EDGE_TYPE] = (EDGE, None, self.edge_type)

    def fields(self) -> Dict[str, Field]:
        return {name: (kind, tuple(t.shape[1:]), t.dtype) for name, (kind, _, t) in self.sources.items()}

    def rows(self, name: str, index: Tensor) -> int:
        """How many rows `gather(name, index, out)` writes (module doc)."""
        return int(self.selected(name, index.cpu()).numel())

    def selected(self, name: str, index: Tensor) -> Tensor:
        """The rows of attribute `name`'s tensor that `index` (n_id, or the edges' positions) reads."""
        kind, which, _ = self.sources[name]
        if which is None:
            return index
        if kind == NODE:
            return index[self.types(index, NODE) == which] - self.schema.offsets[which]
        edges = index[self.types(index, EDGE) == which]
        return self.edge_ids.index_select(0, edges) - self.schema.edge_offsets[which]

    def types(self, index: Tensor, kind: str) -> Tensor:
        """Each node's type (NODE) or edge's relation (EDGE) of `index`; kept for the batch's other
        fields (each is sized, then gathered, by the same n_id or positions)."""
        if self.memo.get(kind, (None,))[0] is not index:  # held, so its memory is not another's meanwhile
            types = (torch.bucketize(index, self.ends, right=True) if kind == NODE
                     else self.edge_type.index_select(0, index).long())
            self.memo[kind] = (index, types)
        return self.memo[kind][1]

    def gather(self, name: str, index: Tensor, out: Tensor) -> Tensor:
        rows = self.selected(name, index.cpu())
        tensor = self.sources[name][2]
        return out.copy_(tensor.index_select(0, rows), non_blocking=False)
