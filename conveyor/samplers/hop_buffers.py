"""`HopBuffers`: the edges of a per_node batch's hops in one pair of buffers, so that hop h's
positions and edges (every edge of hops 1..h, samplers/bsp.py) are views of what the earlier hops
wrote, not a copy of them: each hop copied all the earlier ones' edges in front of its own, 24
bytes an edge, a quarter of bsp's time at batch size 4096 on the products-shaped graph.

Hop h's edges are then a [2, E_h] view whose rows lie `capacity` apart: not contiguous, which
every reader of a batch takes (they read its rows, cut it or copy it into a slot). The buffers are
sized once for a batch, by a bound on its edges (`capacity`); a hop past them (a bound cut at
MAX_CAPACITY) moves what they hold into larger ones, the copy every hop made before.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

MAX_CAPACITY = 1 << 27  # edges (3 GiB of address space): a larger bound grows the buffers on demand instead


def capacity(seeds: int, fanouts, num_nodes: int, num_edges: int) -> int:
    """At least as many edges as a per_node batch of `seeds` draws with these (capped) fanouts:
    hop h's edges reach at most one new node each (and no more than the graph's nodes), each of
    which draws at most the next fanout; no node draws twice, so never more than the graph's edges."""
    reach, bound = seeds, 0
    for fanout in fanouts:
        reach = min(reach, num_nodes) * fanout
        bound += reach
    return max(1, min(bound, num_edges, MAX_CAPACITY))


def batch_nodes(seeds: int, fanouts, num_nodes: int) -> int:
    """At least as many nodes as a batch of `seeds` holds with these (capped) fanouts, drawn per_hop
    or per_node: hop h's nodes draw at most the fanout each, each draw one new node at most."""
    bound = seeds
    for fanout in fanouts:
        bound = min(bound * (1 + fanout), num_nodes)
    return bound


class HopBuffers:
    """Positions [capacity] and edges [2, capacity] (int64), filled hop after hop from the front."""

    def __init__(self, size: int, positions: Tensor | None = None, edges: Tensor | None = None):
        """`positions` and `edges`: what the earlier hops drew (a hop drawn elsewhere), copied in."""
        self.pos = torch.empty(size, dtype=torch.long)
        self.edges = torch.empty(2, size, dtype=torch.long)
        self.arrays = self.pos.numpy().view(np.uint64), self.edges.numpy()  # the compiled loops' views
        self.used = 0
        if positions is not None:
            self.used = positions.numel()
            self.pos[:self.used] = positions
            self.edges[:, :self.used] = edges

    def holds(self, edges: Tensor) -> bool:
        """Whether `edges` (the previous hop's) are what these buffers hold."""
        return self.used == edges.size(1) and edges.data_ptr() == self.edges.data_ptr()

    def extend(self, n: int) -> tuple[Tensor, Tensor]:
        """(positions, edges) of the first used + n edges, the last n for the next hop to write;
        moved into buffers twice as large (or of used + n) first if these are short."""
        if self.used + n > self.pos.numel():
            grown = HopBuffers(max(2 * self.pos.numel(), self.used + n), self.pos[:self.used],
                               self.edges[:, :self.used])
            self.pos, self.edges, self.arrays = grown.pos, grown.edges, grown.arrays
        self.used += n
        return self.pos[:self.used], self.edges[:, :self.used]

    def last(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """numpy views of the last n edges' positions (uint64) and edges [2, n]."""
        pos, edges = self.arrays
        return pos[self.used - n:self.used], edges[:, self.used - n:self.used]
