"""`CompiledHops`: bsp's uniform hops on the CPU, each a few compiled passes (samplers/bsp_compiled.py)
on numpy views of the sampler's tensors made once: the plan, the draws and the reads of their
sources in one pass, the claim of the new nodes straight into the batch's n_id, and the relabelling
of the edges. A hop the sampler runs on the caller alone (one thread; a busy machine; fewer than
SPLIT_FROM edges; or a size whose hops took less time unsplit, `Splitter.worth_splitting`) is one
compiled call after its plan (`hop_alone`): the calls, closures and views between the passes were
15% of a batch's time at scale 0.05. A split hop runs its passes in chunks on the sampler's threads
(`split_hop`). A tensor's `.numpy()` is four torch ops: bsp made 36 of them a batch, and 201 torch
ops a batch in all at scale 0.05 (55 before a hop alone was one call).

The new ones of a hop are found one of two ways, whichever is cheaper for the hop's size (both
give the same ascending ids): few sampled neighbours against a large graph are collected and sorted
(`claim_sorted`); many are marked in a bitmap over the node ids (one a thread: samplers/bsp_threads.py)
as they are read and given their local ids in one scan of it (`claim_marked`), O(num_nodes) but no
sort. `CLAIM_FROM` is where the bitmap starts to win.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from conveyor.samplers.bsp_compiled import (
    claim_marked,
    claim_sorted,
    draw_positions,
    hop_alone,
    hop_key,
    plan_hop,
    relabel_edges,
)
from conveyor.samplers.bsp_threads import Splitter
from conveyor.samplers.hop_buffers import HopBuffers

# The bitmap once a hop draws at least num_nodes / CLAIM_FROM edges (`claim_marked` scans 64 ids a
# word): the sort and the bitmap even near num_nodes / 250 edges at 2.4 million nodes and / 110 at
# 20 million, one thread; per_node batches 0.85x the time of bsp.BITMAP_FROM's 10 at scale 1.0 (A/B,
# interleaved).
CLAIM_FROM = 100
# A hop of fewer edges runs on the caller alone, as one compiled call, whatever the sampler's threads:
# its split's hand-offs and the Python between its passes cost what a second thread saves (per_node,
# scale 0.05, 2 threads against 1, in one process: batch 1024 0.93x with the hops from 100K or 200K
# edges split, 0.97x with every hop split, 1.0x with none; batch 4096 0.92x, 0.98x and 1.03x).
SPLIT_FROM = 1 << 17


def splittable(edges: int) -> bool:
    """Whether a hop of `edges` is split on the sampler's threads when its batch splits (`CompiledHops.run`)."""
    return edges >= SPLIT_FROM


def draw_hop(plan: tuple, fanout: int, generator: torch.Generator, split: Splitter, pos: np.ndarray,
             owner: np.ndarray, first: int = 0, graph: tuple | None = None) -> np.ndarray | None:
    """The draws of a hop planned by `plan_offsets` ((start, deg, offset, few, total), numpy) into
    `pos` (uint64) and `owner` (each edge's node index + `first`), nodes in chunks on `split`'s
    threads: one key from `generator`, then counter-based draws. `graph` (indices, marked, mark):
    each drawn edge's source id read in the same pass (`draw_positions`) and returned, and with
    `mark` set in the bitmap of the chunk's thread (marked[split.place()])."""
    start, deg, offset, few, total = plan
    arrays = (start, deg, offset, few, fanout, hop_key(generator), first, pos, owner)
    if graph is None:
        split.run(lambda lo, hi: draw_positions(lo, hi, *arrays), deg.size, per_item=fanout)
        return None
    indices, marked, mark = graph
    sources = np.empty(total, indices.dtype)

    def chunk(lo: int, hi: int) -> None:
        row = marked[split.place()]
        bad = draw_positions(lo, hi, *arrays, (indices, sources, row, mark, row.size))
        if bad >= 0:
            raise corrupt_graph(indices, pos, bad, row.size)
    split.run(chunk, deg.size, per_item=fanout)
    return sources


def corrupt_graph(indices: np.ndarray, pos: np.ndarray, bad: int, num_nodes: int) -> IndexError:
    """The error for edge `bad`, whose source is no node id (as torch's index ops raise on the same graph)."""
    return IndexError(f"the graph's indices hold {indices[pos[bad]]} at CSC position {pos[bad]}, which is no "
                      f"node id (0..{num_nodes - 1}): the graph is corrupt")


class CompiledHops:
    """The compiled hops of a sampler over `indptr` and `indices`, its local-id map `local` and its
    bitmaps `marked` (one a thread of `split`), through numpy views of them."""

    def __init__(self, indptr: Tensor, indices: Tensor, local: Tensor, marked: Tensor, split: Splitter):
        self.indptr, self.indices = indptr.numpy(), indices.numpy()
        self.local, self.marked = local.numpy(), marked.numpy()
        self.split = split

    def run(self, ids: np.ndarray, first: int, count: int, fanout: int, generator: torch.Generator,
            buffers: HopBuffers | None = None, split: bool = False) -> tuple[Tensor, Tensor, int]:
        """The hop of nodes ids[first:count] (the batch holds ids[:count]), `fanout` draws each: its
        new nodes written into ids[count:], given their local ids; returns (positions, edges, the
        batch's nodes after the hop), edges' row 0 the local ids, row 1 the owners' index into ids.
        `buffers` (per_node): the hop's edges written after the earlier hops' they hold, and
        (positions, edges) those of every hop in them. `split`: the hop split on the sampler's
        threads if it has SPLIT_FROM edges or more (`split_hop`)."""
        nodes = ids[first:count]
        start, deg, offset = (np.empty(nodes.size, np.int64) for _ in range(3))
        few, total = plan_hop(self.indptr, nodes, fanout, start, deg, offset)
        buffers = HopBuffers(total) if buffers is None else buffers  # per_hop: a pair of its own
        pos, edges = buffers.extend(total)
        own_pos, own_edges = buffers.last(total)
        mark = total * CLAIM_FROM >= self.local.size  # the bitmap's scan: cheaper than a sort for this many
        plan = (start, deg, offset, few, total)
        if split and splittable(total):
            count = self.split_hop(plan, fanout, generator, first, own_pos, own_edges, ids, count, mark)
        else:
            bad, count = hop_alone(plan, fanout, hop_key(generator), first, own_pos, own_edges[0], own_edges[1],
                                   self.indices, self.local, self.marked, ids, count, mark)
            if bad >= 0:
                raise corrupt_graph(self.indices, own_pos, bad, self.local.size)
        return pos, edges, count

    def split_hop(self, plan: tuple, fanout: int, generator: torch.Generator, first: int, pos: np.ndarray,
                  edges: np.ndarray, ids: np.ndarray, count: int, mark: bool) -> int:
        """`run`'s hop in passes split on the sampler's threads; returns the batch's nodes after it."""
        nbrs = draw_hop(plan, fanout, generator, self.split, pos, edges[1], first, (self.indices, self.marked, mark))
        self.split.settle()  # every mark is in before the bitmap is read (a late chunk would add one after)
        if mark:
            count += claim_marked(self.marked, self.local, count, ids[count:])
        else:
            count += claim_sorted(nbrs, self.local, count, ids[count:])
        self.split.run(lambda lo, hi: relabel_edges(lo, hi, self.local, nbrs, edges[0]), plan[4])
        self.split.settle()  # a worker still in a chunk the caller did again: its time is the hop's, not the next's
        return count
