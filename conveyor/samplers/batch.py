"""`SampledBatch`: the L-hop message-flow graph of one mini-batch (docs/design.md), tensors only."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional

import torch
from torch import Tensor

EXTRA = "extra."  # the slot names of a batch's extras: extra.<name>


@dataclass
class SampledBatch:
    # Global ids of every node of the batch; n_id[:num_nodes_per_hop[0]] are the seeds, in order.
    n_id: Tensor
    # Cumulative node counts [|N_0|, ..., |N_L|] (CPU int64): hop h's nodes are n_id[:counts[h]].
    num_nodes_per_hop: Tensor
    # edge_index_per_hop[h-1]: [2, E_h] local ids, row 0 the sampled neighbour, row 1 its target.
    edge_index_per_hop: List[Tensor]
    # edge_pos_per_hop[h-1]: [E_h] int64, each sampled edge's position in the graph's CSC arrays
    # (`graph.indices[pos]` is its neighbour): its edge attributes' row, and through `graph.edge_ids`
    # PyG's e_id. None for a sampler that does not say (its batches carry no edge attributes).
    edge_pos_per_hop: Optional[List[Tensor]] = None
    # Other tensors a sampler returns with the batch, by name (a link sampler's local
    # edge_label_index, edge_label, ...): they travel with it through the pipeline's slots
    # (`to_tensors` names them EXTRA + name) and reach the trainer as they were drawn.
    extras: Dict[str, Tensor] = field(default_factory=dict)

    @property
    def num_hops(self) -> int:
        return len(self.edge_index_per_hop)

    @property
    def seeds(self) -> Tensor:
        return self.n_id[: int(self.num_nodes_per_hop[0])]

    @property
    def num_sampled_edges(self) -> int:
        return sum(int(e.size(1)) for e in self.edge_index_per_hop)

    def to(self, device, non_blocking: bool = False) -> "SampledBatch":
        move = lambda tensors: None if tensors is None else [t.to(device, non_blocking=non_blocking) for t in tensors]
        extras = {k: v.to(device, non_blocking=non_blocking) for k, v in self.extras.items()}
        return SampledBatch(self.n_id.to(device, non_blocking=non_blocking), self.num_nodes_per_hop,
                            move(self.edge_index_per_hop), move(self.edge_pos_per_hop), extras)

    def layers(self):
        """(edge_index, num_src, num_dst) per model layer, first layer (hop L) first."""
        counts = self.num_nodes_per_hop.tolist()
        for h in range(self.num_hops, 0, -1):
            yield self.edge_index_per_hop[h - 1], counts[h], counts[h - 1]

    def to_tensors(self) -> Dict[str, Tensor]:
        """The batch's tensors by name, to cross a process boundary in shared buffers; the node
        counts travel apart, as a plain list (`from_tensors` puts the batch back together)."""
        positions = {f"p{h}": p for h, p in enumerate(self.edge_pos_per_hop or [])}
        extras = {EXTRA + name: t for name, t in self.extras.items()}
        return {"n_id": self.n_id, **{f"e{h}": e for h, e in enumerate(self.edge_index_per_hop)}, **positions,
                **extras}

    @classmethod
    def from_tensors(cls, tensors: Dict[str, Tensor], num_nodes_per_hop: List[int]) -> "SampledBatch":
        hops = len(num_nodes_per_hop) - 1
        # zero hops (PyG's num_neighbors=[]): no edges, so every position is known (none)
        positions = [tensors[f"p{h}"] for h in range(hops)] if not hops or "p0" in tensors else None
        extras = {k[len(EXTRA):]: v for k, v in tensors.items() if k.startswith(EXTRA)}
        return cls(tensors["n_id"], torch.tensor(num_nodes_per_hop, dtype=torch.long),
                   [tensors[f"e{h}"] for h in range(hops)], positions, extras)

    def share_memory_(self) -> "SampledBatch":
        self.n_id.share_memory_()
        for e in [*self.edge_index_per_hop, *(self.edge_pos_per_hop or []), *self.extras.values()]:
            e.share_memory_()
        return self


def empty_edges(device) -> Tensor:
    return torch.empty(2, 0, dtype=torch.long, device=device)
