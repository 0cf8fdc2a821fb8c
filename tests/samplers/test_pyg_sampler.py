"""The `pyg` baseline: PyG's sampler behind the SampledBatch contract (its own semantics: a node
samples once, at the hop that first reaches it; layer h's edges are those of hops 1..h)."""
import re

import pytest
import torch
import torch_geometric.typing as pyg_typing

from conveyor.core import ConveyorError
from conveyor.samplers import build_sampler
from tests.helpers import (
    BAD_WEIGHTS,
    assert_drawn_as,
    drawn_subsets,
    multigraph,
    power_law_graph,
    random_graph,
    star_graph,
    successive_sampling,
    weighted_fans,
)

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


def test_edge_positions_map_pygs_edge_ids_to_the_csc():
    """PyG's edge ids, as conveyor's CSC positions, on a graph with parallel edges: each holds its
    edge's neighbour, lies in its target's CSC row, and layer h's positions are hops 1..h's; with
    a fanout above every degree the seeds get each of their in-edges, parallel ones apart."""
    graph = multigraph()
    seeds = torch.tensor([0, 5, 9, 17])
    batch = build_sampler("pyg", graph, [100, 3], seed=0).sample(seeds)
    n_id, previous = batch.n_id, torch.empty(0, dtype=torch.long)
    for (src, dst), pos in zip(batch.edge_index_per_hop, batch.edge_pos_per_hop, strict=True):
        assert pos.dtype == torch.long and torch.equal(graph.indices[pos].long(), n_id[src])
        assert bool(((graph.indptr[n_id[dst]] <= pos) & (pos < graph.indptr[n_id[dst] + 1])).all())
        assert torch.unique(pos).numel() == pos.numel() and torch.equal(pos[: previous.numel()], previous)
        previous = pos
    first = batch.edge_pos_per_hop[0]
    rows = [torch.arange(graph.indptr[s], graph.indptr[s + 1]) for s in seeds.tolist()]
    assert torch.equal(first.sort().values, torch.cat(rows).sort().values)
    assert any(graph.indices[row].unique().numel() < row.numel() for row in rows)  # parallel edges met


@pytest.mark.parametrize("attributes, words", BAD_WEIGHTS)
def test_bad_weight_attr(attributes, words):
    graph = random_graph()
    graph.edge_attrs.update(attributes(graph.num_edges))
    with pytest.raises(ConveyorError, match=re.escape(words)):
        build_sampler("pyg", graph, [5], weight_attr="w")


@pytest.mark.skipif(pyg_typing.WITH_WEIGHTED_NEIGHBOR_SAMPLE, reason="pyg-lib >= 0.3 samples by weight")
def test_weight_attr_without_pyg_lib_is_refused_by_name():
    graph = weighted_fans([1.0, 2.0, 3.0], copies=2)
    with pytest.raises(ConveyorError, match="weight_attr='w'.*pyg-lib >= 0.3.*sampler=bsp"):
        build_sampler("pyg", graph, [2], weight_attr="w")


@pytest.mark.skipif(not pyg_typing.WITH_WEIGHTED_NEIGHBOR_SAMPLE, reason="needs pyg-lib >= 0.3 (weighted sampling)")
def test_weight_attr_reaches_pyg_lib():
    """Handed to PyG, weight_attr draws as bsp and fused do: successive sampling by weight."""
    weights, copies = [1.0, 2.0, 3.0, 0.0, 4.0, 10.0], 1000
    graph = weighted_fans(weights, copies)
    centres = torch.arange(copies) * (len(weights) + 1)
    sampler = build_sampler("pyg", graph, [3], seed=0, weight_attr="w")
    assert_drawn_as(drawn_subsets([sampler.sample(centres) for _ in range(4)], len(weights)),
                    successive_sampling(weights, 3))
