"""The `pyg` baseline: PyG's sampler behind the SampledBatch contract (its own semantics: a node
samples once, at the hop that first reaches it; layer h's edges are those of hops 1..h)."""
import pytest
import torch
import torch_geometric.typing as pyg_typing

from conveyor.samplers import build_sampler
from tests.helpers import power_law_graph, star_graph

pytestmark = pytest.mark.skipif(not (pyg_typing.WITH_PYG_LIB or pyg_typing.WITH_TORCH_SPARSE),
                                reason="needs pyg-lib or torch_sparse (the `pyg` extra)")


@pytest.mark.parametrize("make_graph", [power_law_graph, star_graph])
def test_pyg_batches_keep_the_contract(make_graph):
    graph = make_graph()
    fanouts = [5, 3, 2]
    seeds = torch.arange(0, graph.num_nodes, 7)
    batch = build_sampler("pyg", graph, fanouts, seed=0).sample(seeds)
    n_id, counts = batch.n_id, batch.num_nodes_per_hop.tolist()
    assert torch.equal(n_id[: len(seeds)], seeds) and torch.unique(n_id).numel() == n_id.numel()
    assert counts[-1] == n_id.numel() and counts == sorted(counts)
    deg = graph.in_degree()
    edges = torch.repeat_interleave(torch.arange(graph.num_nodes), deg) * graph.num_nodes + graph.indices.long()
    previous = 0
    for h, (src, dst) in enumerate(batch.edge_index_per_hop, start=1):
        assert src.max() < counts[h] and dst.max() < counts[h - 1]
        assert torch.isin(n_id[dst] * graph.num_nodes + n_id[src], edges).all()
        assert src.numel() >= previous  # cumulative: layer h sees hops 1..h
        previous = src.numel()
        # Nodes first reached at hop h-1 sampled min(deg, fanout) neighbours at hop h.
        new = torch.arange(counts[h - 2] if h > 1 else 0, counts[h - 1])
        got = torch.bincount(dst, minlength=counts[h - 1])[new]
        assert torch.equal(got, deg[n_id[new]].clamp(max=fanouts[h - 1]))
