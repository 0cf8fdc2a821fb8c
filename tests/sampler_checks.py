"""Structural checks of a `SampledBatch` against its graph: shared by every sampler's tests."""
from __future__ import annotations

import torch

from conveyor.partition import Graph
from conveyor.samplers import SampledBatch


def assert_valid_batch(batch: SampledBatch, graph: Graph, seeds: torch.Tensor, fanouts) -> None:
    """Every edge exists, each node of N_{h-1} gets exactly min(deg, fanout) distinct neighbours,
    ids unique, prefix property, seeds first and in order."""
    n_id = batch.n_id.cpu().long()
    counts = batch.num_nodes_per_hop.tolist()
    assert len(counts) == len(fanouts) + 1 == batch.num_hops + 1
    assert counts[0] == seeds.numel() and counts[-1] == n_id.numel()
    assert all(a <= b for a, b in zip(counts, counts[1:])), counts
    assert torch.equal(n_id[: counts[0]], seeds.cpu().long()), "seeds must come first, in order"
    assert torch.unique(n_id).numel() == n_id.numel(), "node ids must be unique"
    indptr, indices = graph.indptr, graph.indices.long()
    deg = indptr[1:] - indptr[:-1]
    for h, fanout in enumerate(fanouts, start=1):
        ei = batch.edge_index_per_hop[h - 1].cpu().long()
        assert ei.dim() == 2 and ei.size(0) == 2
        src, dst = ei
        if ei.numel():
            assert src.min() >= 0 and src.max() < counts[h], f"hop {h}: neighbour id out of range"
            assert dst.min() >= 0 and dst.max() < counts[h - 1], f"hop {h}: target id out of range"
        g_src, g_dst = n_id[src], n_id[dst]
        # Every sampled edge exists: g_src is an in-neighbour of g_dst.
        key = g_dst * graph.num_nodes + g_src
        all_keys = torch.repeat_interleave(torch.arange(graph.num_nodes), deg) * graph.num_nodes + indices
        assert torch.isin(key, all_keys).all(), f"hop {h}: an edge that is not in the graph"
        # Distinct neighbours per target, exactly min(deg, fanout) of them, for every node of N_{h-1}.
        assert torch.unique(key).numel() == key.numel(), f"hop {h}: a neighbour drawn twice"
        per_target = torch.bincount(dst, minlength=counts[h - 1])
        expected = deg[n_id[: counts[h - 1]]].clamp(max=fanout)
        assert torch.equal(per_target, expected), f"hop {h}: wrong number of neighbours per node"
        # Prefix property: every node first reached at hop h was sampled at hop h.
        if counts[h] > counts[h - 1]:
            new_local = torch.arange(counts[h - 1], counts[h])
            assert torch.isin(new_local, src).all(), f"hop {h}: a node in N_{h} that no edge reached"


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


def same_batch(a: SampledBatch, b: SampledBatch) -> bool:
    return (torch.equal(a.n_id, b.n_id) and torch.equal(a.num_nodes_per_hop, b.num_nodes_per_hop)
            and all(torch.equal(x, y) for x, y in zip(a.edge_index_per_hop, b.edge_index_per_hop)))


def fused_state_is_clean(sampler) -> bool:
    """After a fused launch no node carries a mark and the task queue is empty: the next launch
    starts clean."""
    from conveyor.samplers import fused_kernel  # only once the test module has chosen the interpreter or not
    return bool((sampler._buf["state"] == fused_kernel.EMPTY.value).all() and (sampler._buf["queue"] == -1).all())
