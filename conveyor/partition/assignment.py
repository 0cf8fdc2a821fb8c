"""Which part owns which node: the assignment algorithms of partitioner.py.

How training nodes are assigned (`method`):
- `pagraph`: PaGraph's streaming greedy. Training nodes arrive in a seeded random order; node v
  goes to the part i maximising
      score_i(v) = |TV_i ∩ IN_L(v)| * (TV_avg - |TV_i|) / max(|PV_i|, 1)
  (TV_i: training nodes already in part i; IN_L(v): v's L-hop in-neighbourhood; PV_i: all nodes of
  part i, replicas included, so an empty part divides by 1; TV_avg = |TV| / K). Ties go to the
  part with the smallest |PV_i|, then the fewest training nodes, then the lowest index (so with no
  information at all the nodes go round-robin). A part may only take a node while that keeps the
  final counts within one of each other: below floor(|TV|/K) it may, at floor only while fewer
  than |TV| mod K parts have reached the ceiling.
  Two documented approximations make it fast (a products-sized graph has |IN_2(v)| ~ 10^4 and
  |IN_3(v)| ~ 10^6 nodes per training node, so the exact sets cannot be listed):
  * |TV_i ∩ IN_L(v)| is counted as walks, not distinct nodes: the number of in-walks of length
    1..L from nodes of TV_i to v, i.e. row v of (A + A^2 + ... + A^L) T with A the in-adjacency
    and T the part-membership indicator of the assigned training nodes. It is exact for L = 1
    and wherever the neighbourhood is a tree; otherwise nodes reachable by several paths weigh
    more. It costs L - 1 sparse-dense products over the graph (K columns) per chunk.
  * The stream is processed in chunks (sizes growing geometrically to `chunk_size`): the walk
    counts and |PV_i| are those at the chunk start; |TV_i| and the capacity rule are updated
    after every node, so balance is exact. |PV_i| itself is exact at each chunk start.
- `random`: a seeded random permutation of the training nodes dealt round-robin.
- `metis`: METIS (pymetis) on the symmetrised graph with two balance constraints (all nodes and
  training nodes), then the fewest random moves that make training counts differ by at most one.

Validation and test nodes then go to the part whose training nodes' neighbourhood holds them
closest (smallest hop distance, ties at random), and the fewest random moves balance them the
same way (counts differ by at most one); their L-hop neighbourhoods join the part.
"""
from __future__ import annotations

import math
from typing import List, Optional

import torch
from torch import Tensor

from conveyor.core.errors import ConveyorError
from conveyor.partition.expansion import Adjacency, hop_distances, in_neighbour_chunks
from conveyor.partition.graph import Graph

PASSES = 32  # passes over the edges that pagraph's scores may take (sets the chunk size)


# -- training-node assignment -----------------------------------------------------------------------

def round_robin(n: int, num_parts: int, generator: torch.Generator) -> Tensor:
    """A random part per node with counts differing by at most one."""
    owner = torch.empty(n, dtype=torch.long)
    owner[torch.randperm(n, generator=generator)] = torch.arange(n) % num_parts
    return owner


def rebalance(owner: Tensor, num_parts: int, generator: torch.Generator) -> Tensor:
    """Move the fewest nodes (chosen at random) so that part sizes differ by at most one.

    The `n mod K` largest parts keep ceil(n / K) nodes, the others floor(n / K); a part's surplus
    nodes fill the other parts' deficits.
    """
    n = owner.numel()
    counts = torch.bincount(owner, minlength=num_parts)
    base, extra = divmod(n, num_parts)
    target = torch.full((num_parts,), base, dtype=torch.long)
    target[torch.sort(counts, descending=True, stable=True).indices[:extra]] += 1
    # Nodes grouped by part in random order; the first `target` of each part stay.
    shuffled = torch.randperm(n, generator=generator)
    grouped = shuffled[torch.sort(owner[shuffled], stable=True).indices]
    starts = torch.cumsum(counts, 0) - counts
    rank = torch.arange(n) - torch.repeat_interleave(starts, counts)
    surplus = grouped[rank >= target[owner[grouped]]]
    owner = owner.clone()
    owner[surplus] = torch.repeat_interleave(torch.arange(num_parts), (target - counts).clamp(min=0))
    return owner


def chunk_sizes(n: int, chunk_size: int) -> List[int]:
    """Stream chunks growing geometrically from chunk_size / 16 to chunk_size: early decisions,
    made with the least information, are made in the smallest chunks."""
    sizes, size, done = [], max(1, chunk_size // 16), 0
    while done < n:
        sizes.append(min(size, n - done))
        done += sizes[-1]
        size = min(2 * size, chunk_size)
    return sizes


def default_chunk_size(num_train: int, num_hops: int) -> int:
    """Sized so that the chunks' products take about PASSES passes over the edges in all: each
    chunk costs L - 1 passes for the walk counts and L for |PV_i| (until every part holds the
    whole graph). Coarse chunks cost little quality: on the synthetic products-shaped graph
    (scale 0.01, K = 4, L = 1, training closures only) the replication factor is 2.08 with 16
    chunks, 2.06 with this default (~33), 2.04 with 1,000 (random: 2.23, metis: 1.50)."""
    steady = max(2, PASSES // (2 * num_hops - 1) - 3)  # chunk_sizes adds ~4 growing chunks
    return max(1, math.ceil(num_train / steady))


def greedy_chunk(walks: List[List[float]], tv: List[int], pv: List[float], num_train: int) -> List[int]:
    """PaGraph's score for each node of a chunk in turn, with |TV_i| and the capacity updated
    after every node (inherently sequential; K is small, so plain Python over K-lists)."""
    k = len(tv)
    base, extra = divmod(num_train, k)
    avg = num_train / k
    at_ceiling = sum(t > base for t in tv)
    choice = []
    for row in walks:
        best, best_key = -1, None
        for i in range(k):
            if tv[i] > base or (tv[i] == base and at_ceiling >= extra):
                continue  # taking another node would leave the counts more than one apart
            key = (row[i] * (avg - tv[i]) / pv[i], -pv[i], -tv[i], -i)
            if best_key is None or key > best_key:
                best, best_key = i, key
        tv[best] += 1
        at_ceiling += tv[best] == base + 1
        choice.append(best)
    return choice


def assign_pagraph(graph: Graph, adjacency: Adjacency, train: Tensor, num_parts: int,
                   num_hops: int, generator: torch.Generator,
                   chunk_size: Optional[int] = None) -> Tensor:
    """PaGraph's streaming assignment (see the module docstring)."""
    n = train.numel()
    chunk_size = chunk_size or default_chunk_size(n, num_hops)
    member = torch.zeros(graph.num_nodes, num_parts)  # T: one-hot part of each assigned node
    order = torch.randperm(n, generator=generator)
    stream_owner = torch.empty(n, dtype=torch.long)
    tv, pv = [0] * num_parts, [1.0] * num_parts
    begin = 0
    for size in chunk_sizes(n, chunk_size):
        chunk = train[order[begin:begin + size]]
        walks = torch.zeros(size, num_parts)
        if begin:
            below = member  # Y = T + A (T + A (...)): walks of length 0..L-1 into each node
            for _ in range(num_hops - 1):
                below = member + adjacency.into(below)
            for nbrs, row in in_neighbour_chunks(graph, chunk):  # one more hop: 1..L
                walks.index_add_(0, row, below[nbrs])
            if min(pv) < graph.num_nodes:  # |PV_i| only grows: once all hold everything, stop
                sizes = (hop_distances(adjacency, member > 0, num_hops) <= num_hops).sum(1)
                pv = [max(float(s), 1.0) for s in sizes]
        choice = torch.tensor(greedy_chunk(walks.tolist(), tv, pv, n), dtype=torch.long)
        member[chunk, choice] = 1.0
        stream_owner[begin:begin + size] = choice
        begin += size
    owner = torch.empty(n, dtype=torch.long)
    owner[order] = stream_owner
    return owner


def assign_metis(graph: Graph, train: Tensor, num_parts: int, generator: torch.Generator) -> Tensor:
    """METIS on the symmetrised graph, balancing nodes and training nodes, then rebalanced."""
    try:
        import pymetis
    except ImportError:
        raise ConveyorError("partition method 'metis' needs pymetis, which is not installed: "
                            "`pip install pymetis` (or the `metis` extra: pip install "
                            "'conveyor[metis]'), or use partition=pagraph or random.") from None
    import numpy as np
    import scipy.sparse as sp

    if num_parts == 1:
        return torch.zeros(train.numel(), dtype=torch.long)
    n = graph.num_nodes
    adj = sp.csr_matrix((np.ones(graph.num_edges, dtype=np.int8), graph.indices.numpy(),
                         graph.indptr.numpy()), shape=(n, n))
    adj = (adj + adj.T).tocsr()  # METIS wants an undirected graph: both directions, no loops
    adj.setdiag(0)
    adj.eliminate_zeros()
    is_train = np.zeros(n, dtype=np.int64)
    is_train[train.numpy()] = 1
    weights = np.stack([np.ones(n, dtype=np.int64), is_train], 1).ravel()
    options = pymetis.Options(seed=int(torch.randint(0, 2**31 - 1, (1,), generator=generator)))
    result = pymetis.part_graph(num_parts, pymetis.CSRAdjacency(adj.indptr, adj.indices),
                                vweights=weights, options=options)
    owner = torch.from_numpy(np.asarray(result.vertex_part, dtype=np.int64))[train]
    return rebalance(owner, num_parts, generator)


# -- validation and test nodes -----------------------------------------------------------------------

def assign_nearest(dist: Tensor, nodes: Tensor, generator: torch.Generator) -> Tensor:
    """Each node to the part holding it closest (ties at random), then balanced."""
    jitter = torch.rand(dist.size(0), nodes.numel(), generator=generator) * 0.5
    owner = (dist[:, nodes].float() + jitter).argmin(0)
    return rebalance(owner, dist.size(0), generator)


def membership(num_nodes: int, owned: List[Tensor]) -> Tensor:
    """[N, K] boolean: node v belongs to owned[k]."""
    member = torch.zeros(num_nodes, len(owned), dtype=torch.bool)
    for k, ids in enumerate(owned):
        member[ids, k] = True
    return member
