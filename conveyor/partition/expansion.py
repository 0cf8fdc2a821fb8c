"""L-hop in-neighbourhoods over the CSC graph, vectorised: what a self-reliant part must hold.

A part that owns the node set S holds, with L = num_hops:
- every node within L hops of S along in-edges (u is 1 hop from v when u -> v is an edge), and
- every in-edge of every node within L - 1 hops of S; nodes at exactly L hops keep no in-edge.
That is exactly what an L-hop sampler reads: at hop h it draws in-neighbours of nodes reached
within h - 1 hops, so it reads the in-edge lists of nodes within L - 1 hops and reaches nodes
within L hops. With those lists complete (same degrees, same order), sampling a seed of S from the
part draws from the same distribution as sampling it from the full graph.

Hop distances for all K parts come from L sparse-matrix products with K columns: one pass over
the edges per hop for every part at once (the out-adjacency times the parts' membership matrix),
rather than K breadth-first searches that each gather the in-edge lists of most of the graph.
"""
from __future__ import annotations

import warnings
from typing import Iterator, Tuple

import numpy as np
import scipy.sparse as sp
import torch
from torch import Tensor

from conveyor.partition.graph import Graph

EDGES_PER_STEP = 1 << 24  # in-edges gathered at once: bounds the int64 position buffers (~256 MiB)


def in_edge_positions(indptr: Tensor, nodes: Tensor) -> Tuple[Tensor, Tensor]:
    """Positions in `indices` of the in-edges of `nodes`, and for each the index of its node."""
    start = indptr[nodes]
    deg = indptr[nodes + 1] - start
    owner = torch.repeat_interleave(torch.arange(nodes.numel()), deg)
    first = torch.cumsum(deg, 0) - deg  # where each node's run begins in the output
    return torch.arange(owner.numel()) + (start - first)[owner], owner


def in_neighbour_chunks(graph: Graph, nodes: Tensor,
                        max_edges: int = EDGES_PER_STEP) -> Iterator[Tuple[Tensor, Tensor]]:
    """(in-neighbours, index into `nodes` of the node they point to), a bounded slice at a time."""
    deg = graph.indptr[nodes + 1] - graph.indptr[nodes]
    ends = torch.cumsum(deg, 0)
    begin = 0
    while begin < nodes.numel():
        # the longest run of nodes with at most max_edges in-edges in all (at least one node)
        limit = (ends[begin - 1] if begin else 0) + max_edges
        end = max(begin + 1, int(torch.searchsorted(ends, limit, right=True)))
        pos, owner = in_edge_positions(graph.indptr, nodes[begin:end])
        yield graph.indices[pos].long(), owner + begin
        begin = end


def _csr(indptr: np.ndarray, indices: np.ndarray, values: Tensor, n: int) -> Tensor:
    with warnings.catch_warnings():  # "sparse CSR support is in beta"
        warnings.simplefilter("ignore")
        return torch.sparse_csr_tensor(torch.from_numpy(indptr), torch.from_numpy(indices), values,
                                       (n, n), check_invariants=False)


class Adjacency:
    """The graph as two sparse matrices, for products with a dense [N, K] matrix X (MKL, threaded):
    `into(X)[v]` sums X over v's in-neighbours (walks one hop forward, into v);
    `back(X)[u]` sums X over u's out-neighbours (reach one hop backward: u is an in-neighbour)."""

    def __init__(self, graph: Graph):
        n, e = graph.num_nodes, graph.num_edges
        dtype = np.int32 if e < 2**31 else np.int64
        indptr = graph.indptr.numpy().astype(dtype)
        indices = graph.indices.numpy().astype(dtype, copy=False)
        values = torch.ones(e, dtype=torch.float32)
        self.forward = _csr(indptr, indices, values, n)
        # The transpose (CSC of the in-adjacency = CSR of the out-adjacency), a linear-time pass.
        out = sp.csr_matrix((np.ones(e, dtype=np.int8), indices, indptr), shape=(n, n)).tocsc()
        symmetric = np.array_equal(out.indptr, indptr) and np.array_equal(out.indices, indices)
        self.backward = self.forward if symmetric else _csr(out.indptr.astype(dtype),
                                                            out.indices.astype(dtype), values, n)

    def into(self, x: Tensor) -> Tensor:
        return self.forward @ x

    def back(self, x: Tensor) -> Tensor:
        return self.backward @ x


def hop_distances(adjacency: Adjacency, sources: Tensor, num_hops: int) -> Tensor:
    """[K, N] int8: hops from each node to the nearest source of each of the K columns of the
    [N, K] boolean `sources`, along edges (num_hops + 1 when farther). L products in all."""
    dist = torch.full(sources.shape, num_hops + 1, dtype=torch.int8)
    dist[sources] = 0
    reached = sources.to(torch.float32)
    for hop in range(1, num_hops + 1):
        near = (adjacency.back(reached) + reached) > 0
        dist[near & (dist > hop)] = hop
        reached = near.to(torch.float32)
    return dist.t().contiguous()


def closure_subgraph(graph: Graph, dist: Tensor, num_hops: int) -> Tuple[Tensor, Tensor, Tensor]:
    """The part's CSC structure from its row of hop distances: (node_ids, indptr, indices), local.

    Local ids follow global ids (node_ids ascending), so each local in-neighbour list keeps the
    global list's order: a sampler drawing the same positions picks the same neighbours.
    """
    node_ids = (dist <= num_hops).nonzero().flatten()
    to_local = torch.full((graph.num_nodes,), -1, dtype=torch.int32 if node_ids.numel() < 2**31
                          else torch.long)
    to_local[node_ids] = torch.arange(node_ids.numel(), dtype=to_local.dtype)
    inner = dist < num_hops  # nodes whose whole in-edge list the part must hold
    in_deg = graph.in_degree()
    local_deg = torch.where(inner, in_deg, 0)[node_ids]
    indptr = torch.zeros(node_ids.numel() + 1, dtype=torch.long)
    indptr[1:] = torch.cumsum(local_deg, 0)
    keep = torch.repeat_interleave(inner, in_deg)  # one flag per global edge, in CSC order
    indices = torch.index_select(to_local, 0, graph.indices[keep])
    return node_ids, indptr, indices
