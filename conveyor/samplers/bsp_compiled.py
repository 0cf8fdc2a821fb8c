"""bsp's uniform draws on the CPU, compiled (numba): a hop's picks, gathers and relabelling as
loops over its nodes and edges, where torch's vectorised ops make a pass over memory for every
step (Floyd's collision checks alone were fanout**2 / 2 passes a hop).

The draws are counter-based: a hop takes one key from the sampler's torch generator (`hop_key`:
`manual_seed` and the order of calls decide everything, as before), and step i of the n-th node
that draws (in the hop's order of the nodes with deg > fanout) uses draw m = n * fanout + i of the
hop's stream: the high 32 bits of element m // 2 of the SplitMix64 stream seeded with that key for
even m, its low 32 bits for odd m (Steele, Lea and Flood 2014; `java.util.SplittableRandom`'s
generator, whose 64 output bits are all of full quality: one hash makes two draws, the hashing's
time halved, the fused pass 5-8% faster). A pick depends on its node's place in the hop and on the
key alone: any chunk of nodes can be drawn on any thread, in any order, or twice, with the same
picks. Floyd's step i draws t uniformly from [0, j] (j = deg - fanout + i) as the high 32 bits
of (32 random bits) * (j + 1) (Lemire's multiply-shift, the fused kernel's `umulhi`: a bias of at
most (j + 1) / 2**32), and takes j itself if an earlier step took t.

Each function compiles on its first call for its argument types, and numba caches the machine
code beside this file (`cache=True`): later processes load it in milliseconds. `nogil=True`: the
chunks of samplers/bsp_threads.py run these on several threads at once.
"""
from __future__ import annotations

import numba
import numpy as np
import torch
from llvmlite import ir
from numba.core import cgutils, types
from numba.cpython.unsafe.numbers import trailing_zeros
from numba.extending import intrinsic
from torch import Tensor

# Indices are cast to uint64 in the loops: with a signed index numba adds a wraparound fix (negative
# counts from the end) to every access, which made a gather 20% slower than torch's index_select.
U = np.uint64
GOLDEN = np.uint64(0x9E3779B97F4A7C15)  # SplitMix64's increment and mixing constants
MIX1, MIX2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
HASH_BLOCK = 512  # draws hashed at once by `stream_bits` (2 KB: they stay in L1 until Floyd's loop reads them)
# Nodes between a node's draws, which ask for its sources' cache lines (`prefetch`), and the reads of
# those sources in the same pass, by when the lines have come (LAG 4 to 32 alike at scale 0.05): the
# draws' arithmetic runs while the reads' cache misses are out. A pass of draws and then one of reads
# took 1.4-1.5x as long (the misses alone in theirs); reads right after each node's draws, twice.
LAG = U(8)


def hop_key(generator: torch.Generator) -> int:
    """A hop's key: one draw from the sampler's generator (62 bits: a Python int numba takes as int64)."""
    return int(torch.randint(1 << 62, (), generator=generator, device=generator.device))


def stream_draws(key: int, m: Tensor) -> Tensor:
    """Draws `m` (int64 counters) of a hop's stream (module doc), as int64 in [0, 2**32): the draws
    the compiled loops make, for the torch path (CUDA's, and the CPU's reference)."""
    z = splitmix_words(key, m >> 1)
    return torch.where(m & 1 == 0, logical_shift(z, 32), z & 0xFFFFFFFF)


def splitmix_words(key: int, n: Tensor) -> Tensor:
    """`splitmix64(key, n)` for each of the int64 counters `n`, as the int64 of the same bits, in
    torch's int64 ops (they wrap as uint64's do; a right shift is arithmetic, so the sign bits are
    masked off)."""
    z = n.add(1).mul_(signed(GOLDEN)).add_(key)
    z = z.bitwise_xor_(logical_shift(z, 30)).mul_(signed(MIX1))
    z = z.bitwise_xor_(logical_shift(z, 27)).mul_(signed(MIX2))
    return z.bitwise_xor_(logical_shift(z, 31))


def signed(value: np.uint64) -> int:
    """A uint64 constant as the int64 of the same bits."""
    return int(value) - (1 << 64) if int(value) >= 1 << 63 else int(value)


def logical_shift(z: Tensor, k: int) -> Tensor:
    """z >> k as on uint64 (zeros shifted in), for int64 z."""
    return (z >> k).bitwise_and_((1 << (64 - k)) - 1)


@numba.njit(inline="always")
def splitmix64(key, n):
    """Element n (from 0) of the SplitMix64 stream seeded with `key` (uint64 arithmetic wraps)."""
    z = key + (n + np.uint64(1)) * GOLDEN
    z = (z ^ (z >> np.uint64(30))) * MIX1
    z = (z ^ (z >> np.uint64(27))) * MIX2
    return z ^ (z >> np.uint64(31))


@numba.njit(nogil=True, cache=True)
def claim_seeds(seeds, local, ids):
    """A batch's seeds into ids[:n], given local ids 0, 1, ... in `local`; returns -1, or (a seed
    repeated) the index of its second copy, `local` as it was. One pass where torch's copy, index
    copy and the check's `unique` (a sort) took 3% of a batch (scale 0.05)."""
    for i in range(U(seeds.size)):
        u = U(seeds[i])
        if local[u] >= 0:
            for k in range(i):
                local[U(seeds[k])] = -1
            return np.int64(i)
        local[u] = i
        ids[i] = u
    return np.int64(-1)


@numba.njit(nogil=True, cache=True)
def plan_hop(indptr, nodes, fanout, start, deg, offset):
    """A hop's plan in one call: each node's first CSC position into `start`, its degree into
    `deg` (one pass: torch's two gathers and a subtraction were three, with a temporary), and
    `plan_offsets`' slots into `offset`; returns `plan_offsets`'."""
    for i in range(U(nodes.size)):
        v = U(nodes[i])
        start[i] = indptr[v]
        deg[i] = indptr[v + U(1)] - indptr[v]
    return plan_offsets(deg, fanout, offset)


@numba.njit(nogil=True, cache=True)
def plan_offsets(deg, fanout, offset):
    """Each node's first slot in the hop's edges (`offset`): the nodes with deg <= fanout first
    (every neighbour, in node order), then the others' `fanout` picks, node by node.
    Returns (edges of the first kind, edges in all)."""
    few = 0
    many = 0
    for i in range(U(deg.size)):
        if deg[i] <= fanout:
            offset[i] = few
            few += deg[i]
        else:
            offset[i] = many  # the rank among the drawing nodes, until the loop below
            many += 1
    for i in range(U(deg.size)):
        if deg[i] > fanout:
            offset[i] = few + offset[i] * fanout
    return few, few + many * fanout


@numba.njit(inline="always")
def node_picks(s, d, o, fanout, bits, b, pos):
    """Node (start s, degree d, first slot o)'s CSC positions into pos[o:]; returns how many.
    Every argument but `bits` and `pos` is a uint64; the stream's draw for the node's step is
    bits[b + step] (`stream_bits`). `seen` holds bit (t mod 64) of each offset t taken so far: a
    draw whose bit is clear is new, with no look at the earlier picks; one whose bit is set was
    taken before if the degree is at most 64 (the bits are exact), and otherwise only if an earlier
    pick equals it (a scan, for 1 draw in 64 / fanout or fewer). A branch or two a step instead of
    step / 2 comparisons: the same picks, the pass 15-25% faster (scale 0.05)."""
    if d <= fanout:
        for k in range(d):
            pos[o + k] = s + k
        return d
    seen = U(0)
    for step in range(fanout):
        j = d - fanout + step
        t = (U(bits[b + step]) * (j + U(1))) >> U(32)
        if seen & (U(1) << (t & U(63))) and (d <= U(64) or taken(pos, o, step, s + t)):
            t = j  # a draw an earlier step took takes j (never taken before)
        seen |= U(1) << (t & U(63))
        pos[o + step] = s + t
    return fanout


@numba.njit(inline="always")
def taken(pos, o, steps, p):
    """Whether one of the node's first `steps` picks (from slot o) is position p."""
    for k in range(o, o + steps):
        if pos[k] == p:
            return True
    return False


@numba.njit(inline="always")
def stream_bits(key, first, bits):
    """bits[k]: draw first + k of the hop's stream (module doc; `first` and bits.size even), for a
    block of the hop's draws at once: a loop of no branch, which the compiler vectorises (8 hashes
    an instruction with AVX-512); hashed one by one inside Floyd's loop, the pass took 15% longer
    (scale 0.05, the pass alone) and a batch 5-9%."""
    element = first >> U(1)
    for k in range(bits.size >> 1):
        z = splitmix64(key, element + U(k))
        bits[2 * k] = np.uint32(z >> U(32))
        bits[2 * k + 1] = np.uint32(z & U(0xFFFFFFFF))


@intrinsic
def prefetch(typingctx, array, index):
    """Ask for the cache line of array[index] and go on (x86's prefetcht0: no wait, no fault)."""
    def codegen(context, builder, sig, args):
        items = context.make_array(sig.args[0])(context, builder, args[0])
        ptr = cgutils.get_item_pointer(context, builder, sig.args[0], items, [args[1]], wraparound=False)
        byte_ptr, i32 = ir.IntType(8).as_pointer(), ir.IntType(32)
        intrinsic_type = ir.FunctionType(ir.VoidType(), [byte_ptr, i32, i32, i32])
        llvm_prefetch = cgutils.get_or_insert_function(builder.module, intrinsic_type, "llvm.prefetch.p0")
        builder.call(llvm_prefetch, [builder.bitcast(ptr, byte_ptr), i32(0), i32(3), i32(1)])  # read, keep, data
        return context.get_dummy_value()
    return types.void(array, index), codegen


@numba.njit(nogil=True, cache=True)
def draw_positions(lo, hi, start, deg, offset, few, fanout, key, first, pos, owner, sources=None):
    """Nodes lo..hi-1 (`plan_offsets`' layout): each edge's CSC position into `pos` and its node's
    index + `first` into `owner`. The same values whoever runs it, and however often (module doc):
    the stream is hashed in blocks from the chunk's first drawing node on. `pos` is uint64 (an
    int64 array's view): its picks compare with uint64 positions.
    `sources` (`gather_sources`' arrays): each edge's source gathered too, LAG nodes after its draw
    asked for the source's cache line. Returns -1, or the first edge whose source is no node id."""
    few, fanout, key = U(few), U(fanout), U(key)
    bits = np.empty(max(U(HASH_BLOCK), (fanout + U(2)) & ~U(1)), np.uint32)  # even, > fanout
    block = U(0)  # the stream's draw in bits[0] (even: the high half of an element)
    filled = U(0)  # draws in bits: none yet
    for i in range(U(lo), U(hi)):
        o, d = U(offset[i]), U(deg[i])
        n = o - few  # the node's rank among the drawing ones, times fanout (its first draw)
        if d > fanout and n + fanout > block + filled:
            block, filled = n & ~U(1), U(bits.size)
            stream_bits(key, block, bits)
        drawn = node_picks(U(start[i]), d, o, fanout, bits, n - block, pos)
        for k in range(o, o + drawn):
            owner[k] = np.int64(i) + first
        if sources is not None:
            for k in range(o, o + drawn):
                prefetch(sources[0], U(pos[k]))
            if i >= U(lo) + LAG:
                bad = gather_sources(i - LAG, deg, offset, fanout, pos, sources)
                if bad >= 0:
                    return bad
    if sources is not None:
        for i in range(max(U(lo) + LAG, U(hi)) - LAG, U(hi)):  # the last LAG nodes
            bad = gather_sources(i, deg, offset, fanout, pos, sources)
            if bad >= 0:
                return bad
    return np.int64(-1)


@numba.njit(inline="always")
def gather_sources(i, deg, offset, fanout, pos, sources):
    """Node i's edges: each one's source id (indices[pos]) into `nbrs`, and with `mark`,
    marked[source] = True; `sources` is (indices, nbrs, marked, mark, num_nodes). Returns -1, or the
    first edge whose source is no node id (not below `num_nodes`: a corrupt graph), before anything
    is written past the bitmap or read past the local ids (numba checks no bounds). A byte an id: a
    bit (words kept in L1 at scale 0.05) made the batch 5% slower, at scale 1.0 too."""
    indices, nbrs, marked, mark, num_nodes = sources
    o = U(offset[i])
    for k in range(o, o + min(U(deg[i]), fanout)):
        u = indices[U(pos[k])]
        if U(u) >= U(num_nodes):  # a negative id too, as a uint64
            return np.int64(k)
        nbrs[k] = u
        if mark:
            marked[U(u)] = True
    return np.int64(-1)


@numba.njit(nogil=True, cache=True)
def claim_marked(marked, local, count, new):
    """The ids marked in any row of `marked` (a bitmap per thread) and not yet in the batch
    (local < 0), ascending, into `new`, each given the next local id from `count`; the bitmaps
    cleared. Returns how many. The other rows are folded into row 0 first (a plain loop); then,
    64 ids at a time, a branch-free loop makes a word of their fresh bits and the word's set bits
    are taken one by one (`trailing_zeros`): the marks are random, and a branch on each of them ran
    four times slower; a pass that wrote every id's local id whatever its mark, 2.7 times."""
    marks = marked[0]
    for row in range(1, marked.shape[0]):
        other = marked[row]
        for u in range(marks.size):
            marks[u] |= other[u]
            other[u] = False
    c = 0
    whole = local.size - local.size % 64
    for first in range(0, whole, 64):
        c = claim_word(fresh_word(marks, local, first, 64), first, local, count, c, new)
    return claim_word(fresh_word(marks, local, whole, local.size - whole), whole, local, count, c, new)


@numba.njit(nogil=True, cache=True)
def claim_sorted(nbrs, local, count, new):
    """`claim_marked` for a hop of few sources against many nodes (a scan of every id would cost
    more): the ids among `nbrs` not yet in the batch (local < 0), once each, into `new`, ascending,
    each given the next local id from `count`. Returns how many. An id is held at -2 in `local`
    from its first sight until the sort is done: one compiled pass where torch's ops took six."""
    c = 0
    for k in range(U(nbrs.size)):
        u = U(nbrs[k])
        if local[u] == -1:
            local[u] = -2
            new[c] = u
            c += 1
    new[:c].sort()
    for k in range(c):
        local[U(new[k])] = count + k
    return c


@numba.njit(inline="always")
def fresh_word(marks, local, first, n):
    """Bit j: whether id first + j is marked and not yet in the batch (j < n <= 64); the marks cleared."""
    word = U(0)
    for j in range(n):
        word |= U(marks[first + j] & (local[first + j] < 0)) << U(j)
    for j in range(n):
        marks[first + j] = False
    return word


@numba.njit(inline="always")
def claim_word(word, first, local, count, c, new):
    """The ids first + (each set bit of `word`) get local ids count + c, ...; returns the new c."""
    while word:
        u = first + trailing_zeros(word)
        local[u] = count + c
        new[c] = u
        c += 1
        word &= word - U(1)
    return c


@numba.njit(nogil=True, cache=True)
def hop_alone(plan, fanout, key, first, pos, sources, owners, indices, local, marked, ids, count, mark):
    """A whole hop on the calling thread in one call (`bsp_hop.CompiledHops`, unless the hop is split), from
    its plan (`plan_hop`'s (start, deg, offset, few, total)): the draws and their sources
    (`draw_positions`, `mark`ing marked[0]), the new nodes' claim into ids[count:] (`claim_marked`
    or `claim_sorted`) and the relabelling into `sources` (local ids; `owners` each edge's node's
    index into ids). Returns (-1 or the first edge whose source is no node id, the batch's nodes
    after the hop). No Python between the passes: the calls, closures and views between them were
    15% of a batch's time (scale 0.05). Each row its own argument: a view of the rows of a
    [2, E] array is no contiguous array to numba, and its loops then stride each access."""
    start, deg, offset, few, total = plan
    nbrs = np.empty(total, indices.dtype)
    row = marked[0]
    bad = draw_positions(0, deg.size, start, deg, offset, few, fanout, key, first, pos, owners,
                         (indices, nbrs, row, mark, row.size))
    if bad >= 0:
        return bad, count
    if mark:  # only row 0 was marked: the other threads' rows (clear) are not folded in
        count += claim_marked(marked[:1], local, count, ids[count:])
    else:
        count += claim_sorted(nbrs, local, count, ids[count:])
    relabel_edges(0, total, local, nbrs, sources)
    return np.int64(-1), count


@numba.njit(nogil=True, cache=True)
def relabel_edges(lo, hi, local, nbrs, out):
    """out[e] = local[nbrs[e]] for the edges lo..hi-1."""
    for e in range(U(lo), U(hi)):
        out[e] = local[U(nbrs[e])]
    return 0
