"""A prepared batch as PyG's `NeighborLoader` yields it: one `Data` with x, y, edge_index, n_id,
input_id, batch_size, num_sampled_nodes and num_sampled_edges.

conveyor's `SampledBatch` holds one edge tensor per hop, and its samplers may draw at hop h for
every node reached so far (message-flow graphs: bsp, fused). PyG's batch is one edge_index in
which every node draws once, at the hop after the one that first reached it, hop 1's edges first,
so that `trim_to_layer` can cut the last hops off as a prefix. Keeping, at hop h, only the edges
into the nodes first reached at hop h-1 gives exactly that, whichever of the two the sampler
drew (PyG's own `pyg` sampler keeps hops 1..h in its hop-h tensor: the same filter picks hop h
out). A node reached only through a dropped edge stays in n_id without an edge to the seeds: it
changes no output.
"""
from __future__ import annotations

import torch
from torch import Tensor
from torch_geometric.data import Data

from conveyor.samplers import SampledBatch


def pyg_edges(batch: SampledBatch) -> tuple[Tensor, list]:
    """The batch's edges as PyG's one `edge_index` (hop 1's first) and the count of each hop's."""
    counts = batch.num_nodes_per_hop.tolist()
    kept = []
    for h, edges in enumerate(batch.edge_index_per_hop, start=1):
        low = counts[h - 2] if h >= 2 else 0  # the nodes first reached at hop h-1 draw at hop h
        target = edges[1]
        kept.append(edges[:, (target >= low) & (target < counts[h - 1])] if h >= 2 else edges)
    edge_index = torch.cat(kept, dim=1) if kept else torch.empty(2, 0, dtype=torch.long)
    return edge_index.long(), [int(e.size(1)) for e in kept]


def to_pyg(prepared, labels: Tensor | None, input_id: Tensor) -> Data:
    """`prepared` (a pipeline.PreparedBatch) as PyG's batch; `labels`: every node's label on the
    batch's device (y is those of n_id, as in PyG), or None for a graph without labels."""
    batch = prepared.batch
    edge_index, edge_counts = pyg_edges(batch)
    counts = batch.num_nodes_per_hop
    per_hop = torch.diff(counts, prepend=counts.new_zeros(1)).tolist()
    data = Data(x=prepared.x, edge_index=edge_index, n_id=batch.n_id, input_id=input_id,
                batch_size=per_hop[0], num_sampled_nodes=per_hop, num_sampled_edges=edge_counts)
    if labels is not None:
        data.y = labels.index_select(0, batch.n_id).long()
    return data
