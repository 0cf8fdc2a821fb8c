"""What every sampler's tests share beyond the batch-structure check, which lives in the package
(`conveyor.samplers.checks`: `assert_valid_batch`, `same_batch`)."""
from __future__ import annotations

import torch

from conveyor.partition import Graph
from conveyor.samplers import SampledBatch


def neighbour_counts(sample_fn, graph: Graph, node: int, fanout: int, draws: int) -> torch.Tensor:
    """How often each in-neighbour of `node` is drawn at hop 1 over `draws` independent batches."""
    nbrs = graph.indices[graph.indptr[node]: graph.indptr[node + 1]].long()
    counts = torch.zeros(graph.num_nodes, dtype=torch.long)
    for _ in range(draws):
        batch = sample_fn(torch.tensor([node]))
        src = batch.edge_index_per_hop[0][0].cpu().long()
        counts.index_add_(0, batch.n_id.cpu().long()[src], torch.ones_like(src))
    return counts[nbrs]


def fan_rank_counts(batch: SampledBatch, degree: int, hop: int = 1) -> torch.Tensor:
    """On `complete_in_graph(degree, copies)`: how often each neighbour rank (0..degree-1) was drawn
    at `hop` by the fan centres, summed over the copies."""
    n_id = batch.n_id.cpu().long()
    src, dst = batch.edge_index_per_hop[hop - 1].cpu().long()
    centre = n_id[dst]
    keep = centre % (degree + 1) == 0
    rank = n_id[src[keep]] - centre[keep] - 1
    return torch.bincount(rank, minlength=degree)


# Seeds every sampler must refuse (on a 300-node graph), and a word its error must contain.
BAD_SEEDS = [
    (torch.tensor([1, 2, 2]), "unique"),
    (torch.tensor([1, 400]), "0..299"),
    (torch.tensor([-1, 2]), "0..299"),
    (torch.tensor([[1, 2]]), "1-D"),
    (torch.tensor([1.0, 2.0]), "integer"),
]


def fused_state_is_clean(sampler) -> bool:
    """After a fused launch no node carries a mark and the task queue is empty: the next launch
    starts clean."""
    from conveyor.samplers import fused_kernel  # only once the test module has chosen the interpreter or not
    return bool((sampler._buf["state"] == fused_kernel.EMPTY.value).all() and (sampler._buf["queue"] == -1).all())
