"""`bsp`: one hop at a time (CPU or CUDA). The reference semantics.

At hop h every node of N_{h-1} draws min(deg, fanout) distinct in-neighbours uniformly without
replacement (Floyd's algorithm; with `weight_attr`, by weight, see `weighted_picks`), the new ones
are appended to n_id in ascending id order, and a dense global->local map (reset after each batch,
so the cost is O(batch), not O(graph)) relabels the edges. Each edge's CSC position comes with it
(`edge_pos_per_hop`).

The uniform draws are counter-based (samplers/bsp_compiled.py: one key a hop from the sampler's
generator, then SplitMix64 elements by node and step). On the CPU a hop runs as compiled loops
(samplers/bsp_hop.py: the draws and the reads of their sources in one pass, the claim of the new
nodes, the relabelling, each pass in chunks on the sampler's threads); on CUDA, and wherever
`COMPILED` is off, as vectorised torch ops over the nodes (`sample_positions`): the same batches
bit for bit.

There the new ones of a hop are found one of two ways, whichever is cheaper for the hop's size
(both give the same ascending ids): few sampled neighbours against a large graph are sorted
(`torch.unique`, O(E log E)); many are marked in a dense bitmap over the node ids and read back in
order (`nonzero`: O(num_nodes), but no sort). `BITMAP_FROM` is where the bitmap starts to win (the
compiled hops' own choice: bsp_hop.CLAIM_FROM). Small batches on a large graph are bound by random
reads and writes into the num_nodes-long map (kept int32 for it).
"""
from __future__ import annotations

import functools
import time

import numpy as np
import torch
from torch import Tensor

from conveyor.core import ConveyorError
from conveyor.core.cores import sampler_threads, torch_threads
from conveyor.partition import Graph
from conveyor.partition.graph import max_gap
from conveyor.samplers.batch import SampledBatch
from conveyor.samplers.bsp_compiled import claim_seeds, hop_key, plan_offsets, relabel_edges, stream_draws
from conveyor.samplers.bsp_hop import CompiledHops, draw_hop, splittable
from conveyor.samplers.bsp_threads import Splitter, keep_freed_memory
from conveyor.samplers.hop_buffers import HopBuffers, batch_nodes, capacity
from conveyor.samplers.validation import REPEATED_SEEDS, cap_fanouts, check_fanouts, check_seeds
from conveyor.samplers.weights import edge_weights, weight_keys

# The bitmap dedup once a hop samples at least num_nodes / BITMAP_FROM neighbours (torch's ops):
# measured on the products-shaped graph at scales 0.05 and 1.0, 1 and 2 threads (benchmarks/sampling.py).
BITMAP_FROM = 10
# The local ids reset by a fill of the whole map once a batch holds num_nodes / FILL_FROM nodes: a
# sequential write of every id against a random one of each of the batch's, even near 1 / 40 of
# the nodes (123 thousand and 2.4 million nodes, one thread).
FILL_FROM = 32
# The CPU's uniform draws in compiled loops (samplers/bsp_compiled.py); False: in torch's ops, as
# on CUDA (the same batches, bit for bit: tests/samplers/test_bsp_sampler.py holds them together).
COMPILED = True


def take_every_neighbour(start: Tensor, deg: Tensor, few: Tensor, pos: Tensor, owner: Tensor):
    """Write the positions and owners of every edge of the nodes `few` into `pos` and `owner`."""
    deg_few = deg.index_select(0, few)
    rep = torch.repeat_interleave(deg_few)  # each edge's index into `few`
    # Edge k of the run belongs to few[rep[k]], at its start + (k - the run's first edge).
    shift = start.index_select(0, few).sub_(torch.cumsum(deg_few, 0).sub_(deg_few))
    torch.index_select(shift, 0, rep, out=pos).add_(torch.arange(rep.numel(), device=start.device))
    torch.index_select(few, 0, rep, out=owner)


def true_ids(mask: Tensor) -> Tensor:
    """The indices where `mask` holds, ascending, int64: numpy's scan on the CPU (several times
    torch's `nonzero` there), torch's elsewhere."""
    if mask.device.type == "cpu":
        return torch.from_numpy(np.flatnonzero(mask.numpy()))
    return mask.nonzero().squeeze(1)


def floyd_offsets(bits: Tensor, deg: Tensor, fanout: int) -> Tensor:
    """[fanout, m] distinct offsets in [0, deg) per column (Floyd's algorithm, one row of picks per
    step, all m nodes at once) from the [fanout, m] 32-bit draws `bits`: step i takes
    t = (bits_i * (j_i + 1)) >> 32, uniform in [0, j_i] (j_i = deg - fanout + i), or j_i itself if
    an earlier step took t: bsp_compiled.node_picks' picks, bit for bit. Offsets are int32 (a
    degree fits), so the collision checks read half the bytes."""
    steps = torch.arange(fanout, device=deg.device)[:, None]
    j = (deg - fanout)[None, :] + steps
    picks = bits.mul_(j + 1).bitwise_right_shift_(32).int()  # < 2**32 * 2**31: no int64 overflow
    j = j.int()
    rows, bounds = picks.unbind(0), j.unbind(0)  # views made once: fanout**2 / 2 fewer index ops a hop
    for i in range(1, fanout):  # a draw that hits an earlier pick takes j_i (never picked before)
        clash = torch.eq(rows[0], rows[i])
        for k in range(1, i):
            clash.logical_or_(torch.eq(rows[k], rows[i]))
        torch.where(clash, bounds[i], rows[i], out=rows[i])
    return picks


def weighted_picks(start: Tensor, deg: Tensor, fanout: int, keys: Tensor, generator: torch.Generator) -> Tensor:
    """[m, fanout] distinct CSC positions per node (each with deg > fanout), drawn without
    replacement in proportion to the edges' weights (samplers/weights.py): every edge of the m
    rows gets the key log(E) + keys[pos], E ~ Exp(1) (one float64 `rand` per edge), and each row
    keeps its `fanout` smallest. O(sum of the rows' degrees), as PyG's weighted draw is."""
    m, device = deg.numel(), deg.device
    first = torch.cumsum(deg, 0).sub_(deg)  # each row's first candidate in the flat list
    owner = torch.repeat_interleave(torch.arange(m, device=device), deg)
    pos = (start - first).index_select(0, owner).add_(torch.arange(owner.numel(), device=device))
    u = torch.rand(owner.numel(), generator=generator, device=device, dtype=torch.float64)
    # log(E) >= -40 (E is 0 only when u is): zero weights' keys stay above every positive one's.
    key = torch.log(-torch.log1p(-u)).clamp_(min=-40).add_(keys.index_select(0, pos))
    order = torch.argsort(key, stable=True)  # by key, then (stable) by row: each row's keys ascending
    order = order.index_select(0, torch.argsort(owner.index_select(0, order), stable=True))
    take = (first[:, None] + torch.arange(fanout, device=device)).view(-1)
    return pos.index_select(0, order.index_select(0, take)).view(m, fanout)


def replacement_picks(start: Tensor, deg: Tensor, fanout: int, generator: torch.Generator):
    """PyG's replace=True: `fanout` edge positions per node that has any, uniformly with
    replacement (a node of fewer neighbours draws `fanout` too, repeats and all, as pyg-lib and
    torch_sparse do), node by node; (positions, edges) as `sample_positions` returns them."""
    having = (deg > 0).nonzero().squeeze(1)
    rows = deg.index_select(0, having)[:, None]
    picks = torch.rand(having.numel(), fanout, generator=generator, device=deg.device, dtype=torch.float64)
    picks = torch.minimum(picks.mul_(rows.double()).long(), rows - 1)
    pos = picks.add_(start.index_select(0, having)[:, None]).view(-1)
    edges = torch.empty(2, pos.numel(), dtype=torch.long, device=deg.device)
    edges[1] = torch.repeat_interleave(having, fanout)
    return pos, edges


def sample_positions(start: Tensor, deg: Tensor, fanout: int, generator: torch.Generator, keys: Tensor | None = None,
                     replace: bool = False, split: Splitter | None = None):
    """Draw min(deg, fanout) distinct edge positions per node, uniformly (Floyd) or, given the
    edges' weight `keys`, by weight; with `replace`, `fanout` with replacement (uniformly).
    Returns (positions, edges): edges a [2, E] buffer whose row 1
    holds each position's owner (index into the nodes) and row 0 is for the caller. Low-degree
    nodes keep every neighbour (first, in node order; whatever their weights, as PyG does), then
    come the high-degree ones' draws, node by node. A fanout of 0 draws nothing (PyG's meaning)."""
    if fanout == 0:
        empty = torch.empty(0, dtype=torch.long, device=deg.device)
        return empty, torch.empty(2, 0, dtype=torch.long, device=deg.device)
    if replace:
        return replacement_picks(start, deg, fanout, generator)
    if keys is None and deg.device.type == "cpu" and COMPILED:
        return compiled_positions(start, deg, fanout, generator, split or Splitter(1))
    key = hop_key(generator) if keys is None else None  # drawn whether or not a node draws, as compiled's
    take_all = deg <= fanout
    few, many = true_ids(take_all), true_ids(~take_all)
    num_few = int(deg.index_select(0, few).sum())
    pos = torch.empty(num_few + many.numel() * fanout, dtype=torch.long, device=deg.device)
    edges = torch.empty(2, pos.numel(), dtype=torch.long, device=deg.device)
    take_every_neighbour(start, deg, few, pos[:num_few], edges[1, :num_few])
    if many.numel() and keys is not None:
        pos[num_few:] = weighted_picks(start.index_select(0, many), deg.index_select(0, many), fanout, keys,
                                       generator).view(-1)
    elif many.numel():  # (fanout -1: never) draws: Floyd's columns in chunks
        floyd_positions(start.index_select(0, many), deg.index_select(0, many), fanout, key,
                        pos[num_few:].view(-1, fanout), split or Splitter(1))
    if many.numel():
        edges[1, num_few:].view(-1, fanout).copy_(many[:, None].expand(-1, fanout))
    return pos, edges


def compiled_positions(start: Tensor, deg: Tensor, fanout: int, generator: torch.Generator, split: Splitter):
    """`sample_positions`' uniform draws on the CPU (samplers/bsp_compiled.py), nodes in chunks on
    `split`'s threads: one key from `generator`, then counter-based draws: (positions, edges)."""
    start, deg = start.long().contiguous().numpy(), deg.long().contiguous().numpy()
    offset = np.empty_like(deg)
    few, total = plan_offsets(deg, fanout, offset)
    pos, edges = torch.empty(total, dtype=torch.long), torch.empty(2, total, dtype=torch.long)
    draw_hop((start, deg, offset, few, total), fanout, generator, split, pos.numpy().view(np.uint64), edges[1].numpy())
    return pos, edges


def floyd_positions(start: Tensor, deg: Tensor, fanout: int, key: int, out: Tensor, split: Splitter) -> None:
    """out[m, fanout]: each node's Floyd picks as CSC positions, node n's step i from draw
    n * fanout + i of the hop's counter-based stream (bsp_compiled.py), the nodes cut into chunks on
    `split`'s threads (the same picks whichever chunk a node is in)."""
    steps = torch.arange(fanout, device=deg.device)[:, None]

    def chunk(lo: int, hi: int):
        counters = torch.arange(lo, hi, device=deg.device)[None, :] * fanout + steps
        picks = floyd_offsets(stream_draws(key, counters), deg[lo:hi], fanout)
        torch.add(start[lo:hi, None], picks.t(), out=out[lo:hi])
    split.run(chunk, start.numel(), per_item=fanout)


def drawn_fanouts(fanouts, max_degree: int, replace: bool):
    """(each hop's fanout, whether it draws with replacement). Floyd's loop runs `fanout` steps:
    capped by the largest degree, the same sample costs 168 steps a hop on cora, not 100000 for
    sampler.fanouts=[100000]. With replacement a node draws `fanout` whatever its degree; -1 still
    takes each edge once."""
    asked = check_fanouts(fanouts)
    replacing = [replace and f != -1 for f in asked]
    return [f if r else cap for f, r, cap in zip(asked, replacing, cap_fanouts(asked, max_degree))], replacing


class BSPSampler:
    name = "bsp"

    def __init__(self, graph: Graph, fanouts, device="cpu", seed: int = 0, once: bool = False,
                 weight_attr: str | None = None, threads="auto", replace: bool = False):
        """`once` (sampler.draws=per_node): each node draws only at the hop after the one that first
        reached it, as PyG's NeighborLoader samples, instead of at every later hop (per_hop); hop
        h's edges are then every edge drawn in hops 1..h, so that each layer reads every target's
        one draw (the trainer's message-flow graphs, docs/design.md §2.2), and a loader's cut to
        PyG's edge list (samplers/subgraph.py) keeps each draw once.
        `weight_attr`: draw by the weights of that edge attribute (samplers/weights.py).
        `threads`: torch's CPU threads while sampling (the caller's are kept for the rest); auto:
        no more than the cores idle now (core/cores.py: more threads are then never slower).
        `replace`: PyG's replace=True, `fanout` draws with replacement per node (-1: every
        neighbour once, as PyG), uncapped by the degrees."""
        weights = edge_weights(graph, weight_attr)
        self.threads = sampler_threads(threads)
        self.device = torch.device(device)
        # On the CPU bsp's own threads split a hop's edges (samplers/bsp_threads.py); torch's stay at 1.
        self.split = Splitter(self.threads if self.device.type == "cpu" else 1)
        self.torch_threads = 1 if self.device.type == "cpu" else self.threads
        if self.device.type == "cpu":
            keep_freed_memory()
        self.once = once
        self.num_nodes = graph.num_nodes
        self.fanouts, self.replacing = drawn_fanouts(fanouts, max_gap(graph.indptr), replace)
        self.indptr = graph.indptr.to(self.device)
        self.indices = graph.indices.to(self.device)
        self.keys = None if weights is None else weight_keys(weights).to(self.device)
        # int32 (node ids fit: graph.indices is int32): half the bytes of the random reads and
        # writes into this num_nodes-long map, the main cost of small batches on a large graph.
        self.local = torch.full((self.num_nodes,), -1, dtype=torch.int32, device=self.device)
        # A bitmap per thread of the splitter (row 0 the caller's: torch's ops mark only that one),
        # so that no two cores write into one cache line (Splitter.place).
        self.marked = torch.zeros(self.split.threads, self.num_nodes, dtype=torch.bool, device=self.device)
        self.generator = torch.Generator(device=self.device)
        self.manual_seed(seed)
        # Uniform draws on the CPU: each hop one compiled pass (samplers/bsp_compiled.py), where a
        # subclass that draws its own way (typed.py: per relation) keeps `draw`.
        own_draw = type(self).draw is BSPSampler.draw
        self.compiled = [COMPILED and own_draw and self.device.type == "cpu" and self.keys is None and not r and f != 0
                         for f, r in zip(self.fanouts, self.replacing)]

    def manual_seed(self, seed: int) -> None:
        self.generator.manual_seed(int(seed))

    @functools.cached_property
    def cpu_hops(self) -> CompiledHops:
        """The compiled hops, on numpy views of this sampler's tensors made once a process."""
        return CompiledHops(self.indptr, self.indices, self.local, self.marked, self.split)

    def __getstate__(self):  # a copy makes its own views (numpy's would be pickled as copies of the graph)
        return {k: v for k, v in self.__dict__.items() if k != "cpu_hops"}

    def neighbours(self, pos: Tensor) -> Tensor:
        """The source ids of the edges at `pos` (`indices`' dtype), chunk by chunk on the sampler's threads."""
        nbrs = torch.empty(pos.numel(), dtype=self.indices.dtype, device=self.device)
        self.split.run(lambda lo, hi: torch.index_select(self.indices, 0, pos[lo:hi], out=nbrs[lo:hi]), pos.numel())
        return nbrs

    def new_nodes(self, nbrs: Tensor, known: Tensor, count: int) -> Tensor:
        """The ids among `nbrs` not yet in the batch (`known`), once each, ascending, int64, given
        local ids from `count` on (torch's ops: CUDA's, and the CPU's uncompiled hops)."""
        if nbrs.numel() * BITMAP_FROM < self.num_nodes:
            new = torch.unique(nbrs[self.local.index_select(0, nbrs) < 0]).long()
        else:
            marks = self.marked[0]
            marks.index_fill_(0, nbrs.long(), True)
            marks.index_fill_(0, known, False)
            new = true_ids(marks)
            marks.index_fill_(0, new, False)  # O(batch) reset, as for `local`
        self.local.index_copy_(0, new, torch.arange(count, count + new.numel(), dtype=torch.int32, device=self.device))
        return new

    def relabel(self, nbrs: Tensor, out: Tensor) -> None:
        """`out` (int64): each of `nbrs`' local id, chunk by chunk on the sampler's threads."""
        if self.device.type == "cpu":
            arrays = (self.local.numpy(), nbrs.numpy(), out.numpy())
            self.split.run(lambda lo, hi: relabel_edges(lo, hi, *arrays), nbrs.numel())
        else:
            out.copy_(self.local.index_select(0, nbrs))

    def hop_buffers(self, buffers: HopBuffers | None, positions: list, edges: list, seeds: int) -> HopBuffers:
        """per_node's buffers for a compiled hop: those the previous hop wrote into, or new ones
        (sized for the batch) holding whatever the earlier hops drew."""
        if buffers is not None and buffers.holds(edges[-1]):
            return buffers
        size = capacity(seeds, self.fanouts, self.num_nodes, self.indices.numel())
        return HopBuffers(size, positions[-1], edges[-1]) if edges else HopBuffers(size)

    def draw(self, nodes: Tensor, hop: int):
        """Hop `hop`'s draws for `nodes`: `sample_positions`' (positions, edges), row 1 of the
        edges the owner's index into `nodes` (samplers/typed.py draws per relation instead)."""
        start = self.indptr.index_select(0, nodes)
        deg = self.indptr.index_select(0, nodes + 1).sub_(start)
        return sample_positions(start, deg, self.fanouts[hop], self.generator, self.keys, self.replacing[hop],
                                self.split)

    def sample(self, seeds) -> SampledBatch:
        with torch_threads(self.torch_threads):
            return self._sample(seeds)

    def _sample(self, seeds) -> SampledBatch:
        ids, count = self.start_batch(seeds)
        split = self.split.worth_splitting(count.bit_length())  # never at one thread or on a busy machine
        began = time.perf_counter()
        counts, edges, positions = self.hops(ids, count, split)
        self.split.settle()  # no worker still reads `local` for this batch
        self.teach(split, time.perf_counter() - began, positions)
        n_id = ids[:counts[-1]]
        if n_id.numel() * FILL_FROM < self.num_nodes:
            self.local.index_fill_(0, n_id, -1)  # O(batch) reset for the next call
        else:
            self.local.fill_(-1)  # a sequential pass: cheaper than as many random writes
        return SampledBatch(n_id, torch.tensor(counts, dtype=torch.long), edges, positions)

    def teach(self, split: bool, seconds: float, positions: list) -> None:
        """The batch's time to the splitter (`Splitter.timed`), if its compiled hops could have split."""
        sizes = [p.numel() for p in positions]
        own = [b - a for a, b in zip([0] + sizes, sizes)] if self.once else sizes  # per_node's hold the earlier
        if self.split.threads > 1 and any(self.compiled) and splittable(max(own, default=0)):
            self.split.timed(split, seconds, sizes[-1])

    def hops(self, ids: Tensor, count: int, split: bool) -> tuple[list, list, list]:
        """The batch's hops from its seeds ids[:count], each hop's new nodes written into ids after the
        earlier ones': (the cumulative node counts, each hop's edges, each hop's positions). `split`:
        the compiled hops of SPLIT_FROM edges or more split on the sampler's threads."""
        room = ids.numpy() if self.device.type == "cpu" else None  # the compiled hops' view, made once a batch
        counts, edges, positions, buffers = [count], [], [], None
        for h in range(len(self.fanouts)):  # every node of N_{h-1} samples again, independently (not once)
            first = counts[-2] if self.once and len(counts) > 1 else 0  # once: N_{h-1}'s new nodes only
            if self.compiled[h]:
                buffers = self.hop_buffers(buffers, positions, edges, counts[0]) if self.once else None
                pos, hop, count = self.cpu_hops.run(room, first, count, self.fanouts[h], self.generator, buffers,
                                                    split)
            else:
                pos, hop, count = self.torch_hop(ids, first, count, h, positions, edges)
            counts.append(count)
            edges.append(hop)
            positions.append(pos)
        return counts, edges, positions

    def start_batch(self, seeds) -> tuple[Tensor, int]:
        """n_id's room, filled hop after hop (the compiled hops' claims write into it: no copy of the
        batch's nodes a hop; n_id is a view of its front), with the checked seeds in front, given
        local ids 0, 1, ...; and how many seeds."""
        compiled = COMPILED and self.device.type == "cpu"
        seeds = check_seeds(seeds, self.num_nodes, unique=not compiled).to(self.device)
        count = seeds.numel()
        ids = torch.empty(batch_nodes(count, self.fanouts, self.num_nodes), dtype=torch.long, device=self.device)
        if not compiled:
            ids[:count] = seeds
            self.local.index_copy_(0, seeds, torch.arange(count, dtype=torch.int32, device=self.device))
        elif claim_seeds(seeds.numpy(), self.cpu_hops.local, ids.numpy()) >= 0:
            raise ConveyorError(REPEATED_SEEDS)
        return ids, count

    def torch_hop(self, ids: Tensor, first: int, count: int, h: int, positions: list, edges: list):
        """Hop h of the batch's nodes ids[:count] (from `first` on) in torch's ops (CUDA's, and the
        CPU's uncompiled hops), its new nodes written into ids[count:]: (positions, edges, the
        batch's nodes after the hop)."""
        n_id = ids[:count]
        pos, hop = self.draw(n_id[first:], h)
        if first:
            hop[1] += first
        nbrs = self.neighbours(pos)
        if self.once and edges:  # each node's one draw serves every later layer: hop h holds hops 1..h
            pos, hop = torch.cat([positions[-1], pos]), torch.cat([edges[-1], hop], 1)
        new = self.new_nodes(nbrs, n_id, count)
        ids[count:count + new.numel()] = new
        self.relabel(nbrs, hop[0, hop.size(1) - nbrs.numel():])  # the hop's own edges
        return pos, hop, count + new.numel()

    def sample_many(self, seed_list):
        with torch_threads(self.torch_threads):
            return [self._sample(s) for s in seed_list]
