"""Typed graphs (PyG's `HeteroData`, DGL's heterographs) as ONE homogeneous CSC, the way PyG's
`to_homogeneous()` and DGL's `to_homogeneous` lay them out, so that every stage that reads a
`Graph` (the pipeline, its slots and sharing, the attribute store, the layer-wise plans) reads a
typed one unchanged.

- Node ids are grouped by type: type t's nodes are `offsets[t] .. offsets[t + 1] - 1`, in the order
  of their type-local ids (`Schema.type_of`, `Schema.local`).
- Every relation's edges are in the one CSC; each node's in-edges are sorted by relation, then by
  source id (not by source id alone, as an untyped graph's), and `edge_attrs["edge_type"]` holds
  each position's relation (PyG's `edge_type`; RGCNConv reads it). `edge_ids` maps a position to
  its column in the relations' `edge_index`es concatenated in relation order, so a relation's own
  e_id is `edge_ids[pos] - Schema.edge_offsets[relation]`.
- `typed["relation_ptr"]` ([N, K], K the most relations into one node type) is where each node's
  in-edges of each relation into its type begin (`Schema.in_relations`: the relations, by id; a
  slot a type has no relation for begins at the row's end), so a sampler draws each relation's
  fanout from its own sub-row (samplers/typed.py).
- What differs in width or rows between types lives per type in `typed`: `x.<t>` (a node type's
  2-D features, which the feature cache keeps per type: cache/typed.py), `node.<t>.<key>` (its
  other node attributes), `edge.<r>.<key>` (a relation's edge attributes in its own edge order).
  `y` and the splits are global (the target type's nodes; -1: a node of another type).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Dict, List, Optional, Sequence, Tuple

import torch
from torch import Tensor

from conveyor.core.errors import ConveyorError
from conveyor.partition.graph import KINDS, Graph

EdgeType = Tuple[str, str, str]
EDGE_TYPE = "edge_type"  # graph.edge_attrs: each CSC position's relation
RELATION_PTR = "relation_ptr"
TYPED = "typed."  # how `tensors()` names the typed tensors: typed.x.0, typed.relation_ptr


@dataclass(frozen=True)
class Schema:
    """The types of a typed graph: node types and their node counts, relations (src, rel, dst)
    and their edge counts, and the node type whose labels and splits the graph holds."""
    node_types: Tuple[str, ...]
    node_counts: Tuple[int, ...]
    edge_types: Tuple[EdgeType, ...]
    edge_counts: Tuple[int, ...]
    target: Optional[str] = None

    @property
    def offsets(self) -> List[int]:
        """Node type t's global ids start at offsets[t]; offsets[-1] is the node count."""
        return [0, *torch.tensor(self.node_counts, dtype=torch.long).cumsum(0).tolist()]

    @property
    def edge_offsets(self) -> List[int]:
        """Relation r's first column in the relations' edge_indexes concatenated in order."""
        return [0, *torch.tensor(self.edge_counts, dtype=torch.long).cumsum(0).tolist()]

    def node_type(self, name: str) -> int:
        if name not in self.node_types:
            raise ConveyorError(f"the graph has no node type {name!r}; its node types are "
                                f"{list(self.node_types)}.")
        return self.node_types.index(name)

    def relation(self, key) -> int:
        """The relation `key` names: (src, rel, dst), or (src, dst) where one relation joins them."""
        key = tuple(key) if isinstance(key, (tuple, list)) else key
        if key in self.edge_types:
            return self.edge_types.index(key)
        matches = [r for r, (s, _, d) in enumerate(self.edge_types) if isinstance(key, tuple) and (s, d) == key]
        if len(matches) == 1:
            return matches[0]
        raise ConveyorError(f"the graph has no edge type {key!r} (or several join those node types); its "
                            f"edge types are {list(self.edge_types)}.")

    def in_relations(self) -> List[List[int]]:
        """For each node type, the relations into it, by id: its nodes' sub-rows, in order."""
        return [[r for r, (_, _, d) in enumerate(self.edge_types) if d == t] for t in self.node_types]

    def type_of(self, ids: Tensor) -> Tensor:
        """The node type (index) of each global id."""
        ends = torch.tensor(self.offsets[1:], dtype=ids.dtype, device=ids.device)
        return torch.bucketize(ids, ends, right=True)

    def to_json(self) -> dict:
        return {"node_types": list(self.node_types), "node_counts": list(self.node_counts),
                "edge_types": [list(e) for e in self.edge_types], "edge_counts": list(self.edge_counts),
                "target": self.target}

    @classmethod
    def from_json(cls, saved: dict) -> "Schema":
        return cls(tuple(saved["node_types"]), tuple(int(n) for n in saved["node_counts"]),
                   tuple(tuple(e) for e in saved["edge_types"]), tuple(int(n) for n in saved["edge_counts"]),
                   saved.get("target"))


@dataclass
class TypedGraph(Graph):
    """A `Graph` whose nodes and edges have types (module doc); built by `typed_graph`."""
    PREFIXES = (TYPED,)
    schema: Optional[Schema] = None
    typed: Dict[str, Tensor] = field(default_factory=dict)

    def tensors(self) -> Dict[str, Tensor]:
        return {**super().tensors(), **{TYPED + k: v for k, v in self.typed.items()}}

    @classmethod
    def from_tensors(cls, tensors: Dict[str, Tensor], **meta) -> "TypedGraph":
        typed = {k[len(TYPED):]: v for k, v in tensors.items() if k.startswith(TYPED)}
        rest = {k: v for k, v in tensors.items() if not k.startswith(TYPED)}
        schema = meta.pop("schema")
        return super().from_tensors(rest, typed=typed, schema=schema if isinstance(schema, Schema)
                                    else Schema.from_json(schema), **meta)

    def meta(self) -> dict:
        return {**super().meta(), "schema": self.schema.to_json()}

    @property
    def features(self) -> Dict[int, Tensor]:
        """Each node type's 2-D features that the feature cache keeps, by type index."""
        return {int(k[2:]): v for k, v in self.typed.items() if k.startswith("x.")}

    def type_attrs(self, kind: str, index: int) -> Dict[str, Tensor]:
        """Node type `index`'s other node attributes (`kind` "node") or relation `index`'s edge
        attributes ("edge"), by name."""
        prefix = f"{kind}.{index}."
        return {k[len(prefix):]: v for k, v in self.typed.items() if k.startswith(prefix)}

    def relation_edges(self) -> List[Tensor]:
        """Each relation's [2, E_r] edge_index of type-local ids, in the order it was built from."""
        positions = torch.empty_like(self.edge_ids)
        positions[self.edge_ids] = torch.arange(self.num_edges)
        full = self.edge_index()[:, positions]
        s, offsets = self.schema, self.schema.offsets
        return [full[:, lo:hi] - torch.tensor([[offsets[s.node_type(e[0])]], [offsets[s.node_type(e[2])]]])
                for e, lo, hi in zip(s.edge_types, s.edge_offsets[:-1], s.edge_offsets[1:])]

    def to_data(self):
        """This graph as a PyG `HeteroData`: each type's x and other attributes, the target type's
        y and split masks, each relation's edge_index and edge attributes."""
        from torch_geometric.data import HeteroData

        data, s = HeteroData(), self.schema
        for t, (node_type, count) in enumerate(zip(s.node_types, s.node_counts)):
            store = data.get_node_store(node_type)
            store.num_nodes = count
            store.update({"x": self.typed[f"x.{t}"]} if f"x.{t}" in self.typed else {})
            store.update(self.type_attrs("node", t))
        if s.target is not None:
            self.target_store(data.get_node_store(s.target))
        for r, (edge_type, edges) in enumerate(zip(s.edge_types, self.relation_edges())):
            data.get_edge_store(*edge_type).edge_index = edges
            data.get_edge_store(*edge_type).update(self.type_attrs("edge", r))
        return data

    def target_store(self, store) -> None:
        """The target type's labels and split masks, type-local, into a PyG node store."""
        offset, count = self.schema.offsets[self.schema.node_type(self.schema.target)], store.num_nodes
        store.y = self.y[offset:offset + count]
        for split in ("train", "val", "test"):
            ids = getattr(self, f"{split}_idx")
            if ids is not None:
                mask = torch.zeros(count, dtype=torch.bool)
                mask[ids - offset] = True
                store[f"{split}_mask"] = mask

    def validate(self) -> "TypedGraph":
        super().validate()
        s = self.schema
        if s is None or sum(s.node_counts) != self.num_nodes or sum(s.edge_counts) != self.num_edges:
            raise ConveyorError("a typed graph's schema must count its nodes and edges.")
        ptr = self.typed.get(RELATION_PTR)
        if ptr is None or ptr.shape != (self.num_nodes, max(map(len, s.in_relations()), default=0)):
            raise ConveyorError("a typed graph needs relation_ptr, [num_nodes, most relations into a node type].")
        return self

    def __repr__(self) -> str:
        s = self.schema
        types = ", ".join(f"{t} {n:,}" for t, n in zip(s.node_types, s.node_counts))
        return (f"TypedGraph({self.name}: {self.num_nodes:,} nodes ({types}), {self.num_edges:,} edges in "
                f"{len(s.edge_types)} relations, target {s.target}, classes={self.num_classes})")


KINDS[TypedGraph.__name__] = TypedGraph  # Graph.load reads a saved one back as one


class TypeCut:
    """A batch's nodes (global ids, `n_id`) by type: each one's type, each type's nodes in n_id
    order (`order`, type by type: `per_type` of each), each node's rank among its type's (its
    type-local batch id, so that a type's earlier nodes, seeds and earlier hops, come first)."""

    def __init__(self, schema: Schema, n_id: Tensor, counts: Optional[List[int]] = None):
        self.schema, self.counts = schema, counts
        self.types = schema.type_of(n_id)
        num_types = len(schema.node_types)
        self.order = torch.argsort(self.types, stable=True)  # each type's nodes, in n_id order
        self.per_type = torch.bincount(self.types, minlength=num_types).tolist()
        starts = torch.tensor([0, *self.per_type[:-1]], device=n_id.device).cumsum(0)
        self.rank = torch.empty_like(self.order)
        self.rank[self.order] = torch.arange(n_id.numel(), device=n_id.device) - starts[self.types[self.order]]
        self.n_id = n_id

    def positions(self, t: int) -> Tensor:
        """Where type t's nodes are in n_id, in order."""
        start = sum(self.per_type[:t])
        return self.order[start:start + self.per_type[t]]

    def nodes(self, t: int) -> Tensor:
        """Type t's nodes as type-local ids (PyG's per-type n_id)."""
        return self.n_id.index_select(0, self.positions(t)) - self.schema.offsets[t]

    def edges(self, edge_index: Tensor, edge_type: Tensor) -> List[Tensor]:
        """Each relation's edges of `edge_index` (batch ids) as type-local ids, in their order."""
        order, counts = by_relation(edge_type, len(self.schema.edge_types))
        local = self.rank.index_select(0, edge_index.index_select(1, order).reshape(-1)).view(2, -1)
        return list(local.split(counts, 1))

    def per_hop_nodes(self) -> List[List[int]]:
        """num_sampled_nodes of each type: its nodes first reached at each hop."""
        hops = torch.bucketize(torch.arange(self.n_id.numel(), device=self.n_id.device),
                               torch.tensor(self.counts, device=self.n_id.device), right=True)
        num_types = len(self.schema.node_types)
        table = torch.bincount(hops * num_types + self.types, minlength=len(self.counts) * num_types)
        return table.view(len(self.counts), num_types).t().tolist()


def by_relation(edge_type: Tensor, num_relations: int) -> Tuple[Tensor, List[int]]:
    """The order that groups edges by relation (each relation's in their given order: a stable
    sort), and each relation's count: one relation's edges are then a slice."""
    narrow = edge_type.to(torch.int16) if num_relations < 2 ** 15 else edge_type  # a radix sort: 5x int64's
    return torch.sort(narrow, stable=True).indices, torch.bincount(edge_type.long(), minlength=num_relations).tolist()


def split_flat(x: Tensor, per_type: List[int], widths: List[Optional[int]]) -> Dict[int, Tensor]:
    """Flat per-type rows (cache/typed.py: each type with a width in turn, `per_type[t]` rows of
    `widths[t]`) as each type's [n_t, F_t] view, by type index."""
    out, start = {}, 0
    for t, width in enumerate(widths):
        if width is not None:
            out[t] = x[start:start + per_type[t] * width].view(per_type[t], width)
            start += per_type[t] * width
    return out


def flat_features(graph: "TypedGraph", n_id: Tensor) -> Tensor:
    """The features of `n_id` (global ids) from the graph's host tensors, laid out as the typed
    feature cache gathers them (cache/typed.py): each type's rows in n_id order, type by type."""
    types = graph.schema.type_of(n_id)
    parts = [x.index_select(0, n_id[types == t] - graph.schema.offsets[t]).reshape(-1)
             for t, x in sorted(graph.features.items())]
    return torch.cat(parts) if parts else torch.empty(0)


def is_typed(graph) -> bool:
    return isinstance(graph, TypedGraph)


def typed_graph(node_counts: Dict[str, int], edges: Dict[EdgeType, Tensor], x: Optional[Dict[str, Tensor]] = None,
                node: Optional[Dict[Tuple[str, str], Tensor]] = None,
                edge: Optional[Dict[Tuple[EdgeType, str], Tensor]] = None, name: str = "typed") -> TypedGraph:
    """A TypedGraph from each node type's node count, each relation's `[2, E]` edge_index of
    type-local ids (row 0 sources of the relation's source type), and per type: `x` (2-D features,
    kept by the feature cache), `node` ((type, key) -> node attribute), `edge` ((relation, key) ->
    edge attribute in the relation's edge order). Every edge is kept, parallel ones too."""
    counts = {t: int(n) for t, n in node_counts.items()}
    edge_types = tuple(tuple(e) for e in edges)
    edges = {tuple(e): _checked_edges(e, v, counts) for e, v in edges.items()}
    schema = Schema(tuple(counts), tuple(counts.values()), edge_types, tuple(int(v.size(1)) for v in edges.values()))
    indptr, indices, order, edge_type = _typed_csc(schema, list(edges.values()))
    typed = {RELATION_PTR: relation_ptr(schema, indptr, edge_type)}
    typed.update({f"x.{schema.node_type(t)}": _rows(v, counts[t], f"x of {t!r}") for t, v in (x or {}).items()})
    typed.update({f"node.{schema.node_type(t)}.{k}": _rows(v, counts[t], f"{k} of {t!r}")
                  for (t, k), v in (node or {}).items()})
    typed.update({f"edge.{schema.relation(e)}.{k}": _rows(v, edges[tuple(e)].size(1), f"{k} of {e!r}")
                  for (e, k), v in (edge or {}).items()})
    graph = TypedGraph(indptr=indptr, indices=indices, edge_ids=order, edge_attrs={EDGE_TYPE: edge_type},
                       name=name, schema=schema, typed=typed)
    return graph.validate()


def _checked_edges(edge_type, edge_index, counts: Dict[str, int]) -> Tensor:
    if len(edge_type) != 3 or edge_type[0] not in counts or edge_type[2] not in counts:
        raise ConveyorError(f"edge type {edge_type!r} must be (source type, relation, destination type) of "
                            f"the node types {list(counts)}.")
    edge_index = torch.as_tensor(edge_index)
    if edge_index.dim() != 2 or edge_index.size(0) != 2 or edge_index.is_floating_point():
        raise ConveyorError(f"the edge_index of {edge_type!r} must be an integer tensor of shape [2, E], got "
                            f"{edge_index.dtype} {tuple(edge_index.shape)}.")
    edge_index = edge_index.long()
    for row, node_type in ((0, edge_type[0]), (1, edge_type[2])):
        ids = edge_index[row]
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= counts[node_type]):
            raise ConveyorError(f"the edge_index of {edge_type!r} holds {node_type!r} ids up to {int(ids.max())}, "
                                f"but that type has {counts[node_type]} nodes; set its num_nodes or remap the ids.")
    return edge_index


def _rows(value: Tensor, rows: int, what: str) -> Tensor:
    value = torch.as_tensor(value)
    if value.dim() == 0 or value.size(0) != rows:
        raise ConveyorError(f"{what} has shape {tuple(value.shape)} but should have {rows} rows.")
    return value


def _typed_csc(schema: Schema, edges: Sequence[Tensor]):
    """(indptr, indices, edge_ids, edge_type) of every relation's edges in one CSC, each row
    sorted by relation, then source, then (parallel edges) given order."""
    offsets, n, num_relations = schema.offsets, schema.offsets[-1], max(len(edges), 1)
    src = torch.cat([e[0] + offsets[schema.node_type(s)] for e, (s, _, _) in zip(edges, schema.edge_types)]
                    or [torch.empty(0, dtype=torch.long)])
    dst = torch.cat([e[1] + offsets[schema.node_type(d)] for e, (_, _, d) in zip(edges, schema.edge_types)]
                    or [torch.empty(0, dtype=torch.long)])
    rel = torch.repeat_interleave(torch.arange(len(edges)), torch.tensor([e.size(1) for e in edges], dtype=torch.long))
    row = dst * num_relations + rel
    if n * num_relations * max(n, 1) < 2 ** 62:  # one sort where (row, source) fits a key
        order = torch.sort(row * max(n, 1) + src, stable=True).indices
    else:
        order = torch.sort(src, stable=True).indices
        order = order[torch.sort(row[order], stable=True).indices]
    indptr = torch.zeros(n + 1, dtype=torch.long)
    indptr[1:] = torch.cumsum(torch.bincount(dst, minlength=n), 0)
    small = torch.int8 if num_relations < 128 else torch.int32
    indices = src[order].to(torch.int32 if n < 2 ** 31 - 1 else torch.long)
    return indptr, indices, order, rel[order].to(small)


def relation_ptr(schema: Schema, indptr: Tensor, edge_type: Tensor) -> Tensor:
    """[N, K]: where each node's in-edges of its type's k-th relation begin (module doc)."""
    n, num_relations = indptr.numel() - 1, max(len(schema.edge_types), 1)
    slots = schema.in_relations()
    width = max(map(len, slots), default=0)
    dst = torch.repeat_interleave(torch.arange(n), indptr[1:] - indptr[:-1])
    counts = torch.bincount(dst * num_relations + edge_type.long(), minlength=n * num_relations).view(n, num_relations)
    starts = indptr[:-1, None] + torch.cumsum(counts, 1) - counts  # [N, R]: each relation's sub-row start
    ptr = indptr[1:, None].expand(n, width).clone()  # a slot without a relation: empty, at the row's end
    offsets = schema.offsets
    for t, relations in enumerate(slots):
        if relations:
            rows = slice(offsets[t], offsets[t + 1])
            ptr[rows, :len(relations)] = starts[rows][:, relations]
    return ptr


def with_target(graph: TypedGraph, target: str, y: Tensor, num_classes: int,
                splits: Dict[str, Optional[Tensor]]) -> TypedGraph:
    """The graph labelled on node type `target`: `y` (its nodes' labels) and `splits` (train, val,
    test: its type-local ids) made global; every other type's label is -1."""
    t = graph.schema.node_type(target)
    offset, count = graph.schema.offsets[t], graph.schema.node_counts[t]
    labels = torch.full((graph.num_nodes,), -1, dtype=torch.long)
    labels[offset:offset + count] = _rows(y, count, f"y of {target!r}").reshape(count, -1)[:, 0].long()
    ids = {f"{split}_idx": None if idx is None else torch.as_tensor(idx).reshape(-1).long() + offset
           for split, idx in splits.items()}
    return replace(graph, y=labels, num_classes=int(num_classes), schema=replace(graph.schema, target=target),
                   **ids).validate()
