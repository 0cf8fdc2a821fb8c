"""Checks of a `SampledBatch` against the sampler contract (docs/design.md §2.2), for any sampler:
conveyor's own in its tests and benchmarks, and yours before you hand it to the pipeline.

    from conveyor.samplers.checks import assert_valid_batch
    assert_valid_batch(my_sampler.sample(seeds), graph, seeds, fanouts)

Like `torch.testing.assert_close`, a failed check raises an AssertionError naming the broken
property (raised explicitly, so `python -O` keeps the checks).
"""
from __future__ import annotations

import torch

from conveyor.partition import Graph
from conveyor.samplers.batch import SampledBatch


def check(condition, message: str) -> None:
    if not condition:
        raise AssertionError(message)


def assert_valid_batch(batch: SampledBatch, graph: Graph, seeds: torch.Tensor, fanouts) -> None:
    """Every edge exists, each node of N_{h-1} gets exactly min(deg, fanout) distinct edges
    (all of them for fanout -1), ids unique, prefix property, seeds first and in order; where the
    batch says its edges' CSC positions (`edge_pos_per_hop`), each is an edge of its own target
    whose source is its neighbour, and no position is drawn twice (parallel edges are distinct
    edges: the same neighbour may come twice through two of them)."""
    n_id = batch.n_id.cpu().long()
    counts = batch.num_nodes_per_hop.tolist()
    check(len(counts) == len(fanouts) + 1 == batch.num_hops + 1,
          f"{len(counts) - 1} hops of node counts and {batch.num_hops} of edges for {len(fanouts)} fanouts")
    check(counts[0] == seeds.numel() and counts[-1] == n_id.numel(),
          f"num_nodes_per_hop {counts} does not start at the {seeds.numel()} seeds and end at n_id's "
          f"{n_id.numel()} nodes")
    check(all(a <= b for a, b in zip(counts, counts[1:])), f"num_nodes_per_hop {counts} is not cumulative")
    check(torch.equal(n_id[: counts[0]], seeds.cpu().long()), "seeds must come first, in order")
    check(torch.unique(n_id).numel() == n_id.numel(), "node ids must be unique")
    deg = graph.indptr[1:] - graph.indptr[:-1]
    edge_keys = torch.repeat_interleave(torch.arange(graph.num_nodes), deg) * graph.num_nodes + graph.indices.long()
    for h, fanout in enumerate(fanouts, start=1):
        check_hop(batch, graph, n_id, counts, deg, edge_keys, h, fanout)


def check_hop(batch: SampledBatch, graph: Graph, n_id, counts, deg, edge_keys, h: int, fanout: int) -> None:
    ei = batch.edge_index_per_hop[h - 1].cpu().long()
    check(ei.dim() == 2 and ei.size(0) == 2, f"hop {h}: edges of shape {tuple(ei.shape)}, not [2, E]")
    src, dst = ei
    if ei.numel():
        check(src.min() >= 0 and src.max() < counts[h], f"hop {h}: neighbour id out of range")
        check(dst.min() >= 0 and dst.max() < counts[h - 1], f"hop {h}: target id out of range")
    key = n_id[dst] * graph.num_nodes + n_id[src]  # the edge n_id[src] -> n_id[dst]
    check(torch.isin(key, edge_keys).all(), f"hop {h}: an edge that is not in the graph")
    if batch.edge_pos_per_hop is None:
        check(torch.unique(key).numel() == key.numel(), f"hop {h}: a neighbour drawn twice")
    else:
        check_positions(batch.edge_pos_per_hop[h - 1], graph, n_id[src], n_id[dst], h)
    per_target = torch.bincount(dst, minlength=counts[h - 1])
    expected = deg[n_id[: counts[h - 1]]]
    expected = expected if fanout == -1 else expected.clamp(max=fanout)
    check(torch.equal(per_target, expected), f"hop {h}: wrong number of neighbours per node")
    if counts[h] > counts[h - 1]:  # prefix property: every node first reached at hop h was sampled at hop h
        new_local = torch.arange(counts[h - 1], counts[h])
        check(torch.isin(new_local, src).all(), f"hop {h}: a node in N_{h} that no edge reached")


def check_positions(pos, graph: Graph, source, target, h: int) -> None:
    """Hop h's CSC positions against its edges' global (source, target): the edge at each position
    leads from that source into that target, and no edge is drawn twice."""
    pos = pos.cpu()
    check(pos.dtype == torch.long and pos.shape == source.shape,
          f"hop {h}: edge positions of shape {tuple(pos.shape)} and dtype {pos.dtype} for {source.numel()} "
          f"edges (int64, one per edge)")
    if not pos.numel():
        return
    check(pos.min() >= 0 and pos.max() < graph.num_edges, f"hop {h}: an edge position out of range")
    check(torch.equal(graph.indices[pos].long(), source), f"hop {h}: an edge position whose source is not "
                                                          f"the edge's neighbour")
    check(bool(((graph.indptr[target] <= pos) & (pos < graph.indptr[target + 1])).all()),
          f"hop {h}: an edge position outside its target's in-edges")
    check(torch.unique(pos).numel() == pos.numel(), f"hop {h}: an edge drawn twice")


def same_batch(a: SampledBatch, b: SampledBatch) -> bool:
    """Whether two batches are identical: the same ids, counts and edges, in the same order, and
    the same edge positions where both say them."""
    same_positions = (a.edge_pos_per_hop is None or b.edge_pos_per_hop is None
                      or all(torch.equal(x, y) for x, y in zip(a.edge_pos_per_hop, b.edge_pos_per_hop, strict=True)))
    return (torch.equal(a.n_id, b.n_id) and torch.equal(a.num_nodes_per_hop, b.num_nodes_per_hop)
            and all(torch.equal(x, y) for x, y in zip(a.edge_index_per_hop, b.edge_index_per_hop))
            and same_positions)
