"""`SampledBatch`: the L-hop message-flow graph of one mini-batch (docs/design.md), tensors only."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List

import torch
from torch import Tensor


@dataclass
class SampledBatch:
    # Global ids of every node of the batch; n_id[:num_nodes_per_hop[0]] are the seeds, in order.
    n_id: Tensor
    # Cumulative node counts [|N_0|, ..., |N_L|] (CPU int64): hop h's nodes are n_id[:counts[h]].
    num_nodes_per_hop: Tensor
    # edge_index_per_hop[h-1]: [2, E_h] local ids, row 0 the sampled neighbour, row 1 its target.
    edge_index_per_hop: List[Tensor]

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
        return SampledBatch(self.n_id.to(device, non_blocking=non_blocking), self.num_nodes_per_hop,
                            [e.to(device, non_blocking=non_blocking) for e in self.edge_index_per_hop])

    def layers(self):
        """(edge_index, num_src, num_dst) per model layer, first layer (hop L) first."""
        counts = self.num_nodes_per_hop.tolist()
        for h in range(self.num_hops, 0, -1):
            yield self.edge_index_per_hop[h - 1], counts[h], counts[h - 1]

    def to_tensors(self) -> Dict[str, Tensor]:
        """The batch's tensors by name, to cross a process boundary in shared buffers; the node
        counts travel apart, as a plain list (`from_tensors` puts the batch back together)."""
        return {"n_id": self.n_id, **{f"e{h}": e for h, e in enumerate(self.edge_index_per_hop)}}

    @classmethod
    def from_tensors(cls, tensors: Dict[str, Tensor], num_nodes_per_hop: List[int]) -> "SampledBatch":
        hops = len(num_nodes_per_hop) - 1
        return cls(tensors["n_id"], torch.tensor(num_nodes_per_hop, dtype=torch.long),
                   [tensors[f"e{h}"] for h in range(hops)])

    def share_memory_(self) -> "SampledBatch":
        self.n_id.share_memory_()
        for e in self.edge_index_per_hop:
            e.share_memory_()
        return self


def empty_edges(device) -> Tensor:
    return torch.empty(2, 0, dtype=torch.long, device=device)
