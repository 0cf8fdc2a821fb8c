"""The persistent Triton kernel behind the `fused` sampler: every hop of B mini-batches, one launch.

Output: exactly the `bsp` semantics (docs/design.md). At hop h every node of N_{h-1} draws
min(deg, fanouts[h-1]) distinct in-neighbours uniformly without replacement, independently of the
other hops; n_id holds the seeds first, in order, then the nodes first reached at hop 1, then at
hop 2, ...; hop h's edges are in local ids. A super-batch keeps its B batches apart with
"virtual" node ids vb = b * N + v, as gSampler does.

Memory (kept by the host across launches):
    state[vb]  int32 per (batch, node). Low 4 bits: the node's *level*, the first hop that reaches
               it (0 for a seed, EMPTY = 15 while unreached); the node is in N_h for every
               h >= level. Once the levels are final the high bits take its slot within its level.
    queue      int64 task slots, -1 when empty. A task (vb << 4) | h reads "sample v's
               in-neighbours for hop h of batch b".
    records    int64: every non-seed node a batch reaches, once.
    edges      int64 [B, 3, E_STRIDE]: batch b's hop h picks at eoff[h-1]..eoff[h], in three rows:
               the neighbour and the target (global ids until phase 3 relabels them), and the
               pick's CSC position (its edge attributes' row; never relabelled).
    ctr        int64 counters, zeroed before each launch (named below, each on its own 128-byte
               line so that the queue's head, tail and completion count do not contend), then
               per-(batch, level) node counts and per-(batch, hop) edge counts: the only thing
               the host reads back.

The grid is persistent (as many programs as fit on the GPU). Each phase below is a loop in which
a program claims work with one atomic add on a counter, until none is left:

0. Seeds: level 0, n_id[b, i] = seed i, and the L tasks (seed, 1), ..., (seed, L) queued.
1. The task queue (PGSampler's fused hops). A program claims C consecutive slots with one
   fetch-and-add on the head counter and runs whichever of them hold a task, until it has run them
   all: a claimed slot may still be empty, and is filled as soon as some task pushes into it.
   A task draws its k = min(deg, fanout) picks (Floyd's algorithm, see `_floyd`: O(k) steps
   whatever the degree, from Philox counters (node, batch's stream position, hop, step), so the
   draws depend on the seed alone, never on which program runs a task or when), writes its k
   edges, still in global ids, with their CSC positions at slots reserved from its (batch, hop)
   edge counter, and lowers every neighbour u's level to h with atomic_min. The work of a task is
   k, never its degree: a hub with 100k in-neighbours and a leaf cost the same (NextDoor's
   balance by neighbours to sample). A chunk's tasks of every hop and of both kinds (Floyd rows,
   deg > fanout, and take-all rows) share one [C, W] tile of picks; only take-all rows longer
   than W (possible only for a fanout above W) take further tiles, TW at a time.
   With WEIGHTED (a constexpr: its own compiled variant) the rows with deg > fanout draw by
   weight instead (`_weighted`: Efraimidis-Spirakis keys from the same kind of Philox counters,
   the row read TW edges at a time, O(deg)); everything else is the same.
   Dedup per (vertex, hop), by construction: a node of level l needs exactly the tasks
   (u, l+1) .. (u, L), since every vertex of N_{h-1} samples at hop h. When atomic_min lowers u's
   level from `old` to h, the program that did it pushes the tasks it newly owes, hops
   h+1 .. min(old, L), and appends u to `records` if `old` was EMPTY. atomic_min serialises the
   lowerings of a node, so their hop ranges are disjoint and together cover level+1 .. L: no task
   is lost or duplicated, however the hops interleave.
   Termination, by counting (not PGSampler's "fetch size < fanout" heuristic): the tail counter
   counts the tasks ever pushed (slots reserved), `completed` the tasks run to the end, their own
   pushes included. A program whose claimed slots stay empty reads `completed` and then the tail;
   if completed == min(tail, capacity), no task is queued or running, so none can ever be pushed
   again, and it leaves (proof at `_drain_queue`). Slots past the queue's capacity are never
   written nor waited for.
2. Slots: the levels are final. Each reached node takes a slot from its (batch, level) counter;
   a seed's slot is its position.
3. Relabel: the local id of a node of level l is (seeds + nodes of levels 1..l-1) + slot, so
   every hop's node set is a prefix of the next by construction. Edges are rewritten in place,
   n_id is filled.
4. Cleanup: the state of every node the launch touched (records and seeds) goes back to EMPTY,
   so the next launch starts clean in O(batch) time, never O(graph); the queue is already empty.

Between phases a program waits for a "done" counter to reach the phase's number of chunks (after
phase 1: for the termination count). A program only ever waits for work that a *running* program
has claimed, or that such work will push -- never for a program that has not started. So the
kernel cannot deadlock, whether or not all its programs are resident, and under
TRITON_INTERPRET=1, where programs run one after another, program 0 does all the work alone and
the others find nothing left.

Uniform control flow (a program is 4 warps; they must take every branch and loop together, or
their `bar.sync`s stop lining up and the program hangs or corrupts its tiles). Triton replicates
a small tile in every warp and reduces it (`tl.max`, `tl.sum`) within each warp, so a condition
is uniform only if every warp computes it from the same values. Every branch and loop condition
here is a function of (a) kernel arguments and constexprs, (b) memory no program writes during
the launch (indptr, indices, fanouts, seeds, seed_off, seed_batch), read identically by every
warp, (c) memory whose writers have all finished behind a wait of this program (phases 2-4 read
counters, records, state and edges only after `_wait_until`), or (d) the *results of atomics*:
Triton runs an atomic once per element (one thread for a scalar, the owning thread for a tile
element) and hands its result to every thread through shared memory behind a barrier, so every
warp sees the same value. No decision reads a volatile or plain load of memory that another
program may be writing: a warp that read a slot a moment after another warp would disagree with
it. In particular the task slots are taken with an atomic exchange (not a load then an
exchange), the termination counts and every wait are read with atomics, and `_visit` lowers
levels with atomic_min on every pick rather than first loading the level (whose value could
differ between warps).

Memory ordering (PTX, GPU scope). Each pair below is a release and an acquire on the same
location, so everything before the release (in this program: the preceding `debug_barrier`
orders all its threads' writes first) is visible after the acquire:
  - phase chunks: `_finish_chunk` adds 1 to the phase's done counter with release; `_wait_until`
    reads it with an acquire atomic (whose value is used: Triton folds away an atomic add of 0
    whose result is unused, and the acquire with it);
  - tasks: a pushed task word is written with a release exchange and taken with an acquire
    exchange; the push's slots come from the tail counter *before* (the exchange's address
    depends on the reservation), so a taken task's reservation happens before its completion;
  - completion: `completed` is increased with release after all of a chunk's writes (edges,
    records, its pushes) and read with acquire by the termination check, which then reads the
    tail: every task counted complete was reserved before the tail is read;
  - `.cg` loads (through L2, never a stale L1 line) for data other programs wrote.
tests/samplers/test_fused_compile.py compiles the kernel for sm_90 and checks these atomics are in the PTX.

Overflow: the host sizes the buffers. A write past a capacity is dropped (never out of bounds)
while the counters keep counting, so the host sees what was needed and runs the launch again with
bigger buffers; the counter-based random numbers make the rerun draw the same batch.
"""
import triton
import triton.language as tl

MAX_HOPS = 14
INT64_MAX = tl.constexpr(2**63 - 1)
EMPTY = tl.constexpr(15)  # level bits of an unreached node; levels are 0..L <= 14

# Counter slots (int64) in `ctr`, one 128-byte line apart (16 int64s); then B * (L + 1)
# per-(batch, level) node counters, then B * L per-(batch, hop) edge counters.
Q_HEAD = tl.constexpr(0)
Q_TAIL = tl.constexpr(16)
COMPLETED = tl.constexpr(32)
R_TAIL = tl.constexpr(48)
SEED_CLAIM = tl.constexpr(64)
SEED_DONE = tl.constexpr(80)
SLOT_CLAIM = tl.constexpr(96)
SLOT_DONE = tl.constexpr(112)
LABEL_CLAIM = tl.constexpr(128)
LABEL_DONE = tl.constexpr(144)
RESET_CLAIM = tl.constexpr(160)
FIXED = tl.constexpr(176)


def num_counters(num_batches: int, num_hops: int) -> int:
    return FIXED.value + num_batches * (num_hops + 1) + num_batches * num_hops


# -- small building blocks ---------------------------------------------------------------------

@triton.jit
def _finish_chunk(done):
    tl.debug_barrier()  # all threads' writes of the chunk come before the release
    tl.atomic_add(done, 1, sem="release")


@triton.jit
def _wait_until(counter, target):
    """Spin until *counter >= target, reading it with an acquire atomic whose value every thread
    shares (uniform). Only ever waits for chunks that running programs have claimed."""
    seen = tl.atomic_add(counter, 0, sem="acquire")
    while seen < target:
        seen = tl.atomic_add(counter, 0, sem="acquire")
    tl.debug_barrier()


@triton.jit
def _reserve(counter, amount):
    """Reserve amount[i, j] consecutive slots per lane from one counter with one atomic.
    Returns each lane's first slot, the old counter value and the total."""
    row = tl.sum(amount, axis=1)
    total = tl.sum(row, axis=0)
    base = tl.atomic_add(counter, total, mask=total > 0, sem="relaxed")
    first = base + (tl.cumsum(row, axis=0) - row)[:, None] + tl.cumsum(amount, axis=1) - amount
    return first, base, total


@triton.jit
def _reserve_binned(counters, bins, amount, NBINS: tl.constexpr):
    """Like _reserve for 1-D lanes, but lane i draws from counters[bins[i]]: one vector atomic."""
    onehot = bins[:, None] == tl.arange(0, NBINS)[None, :]
    per_bin = tl.where(onehot, amount[:, None].to(tl.int32), 0)  # int32: half the scan's memory
    total = tl.sum(per_bin, axis=0).to(tl.int64)
    base = tl.atomic_add(counters + tl.arange(0, NBINS), total, mask=total > 0, sem="relaxed")
    before = tl.cumsum(per_bin, axis=0) - per_bin
    return tl.sum(tl.where(onehot, base[None, :] + before, 0), axis=1)


@triton.jit
def _push_tasks(queue, ctr, vb, level, count, Q_CAP, L: tl.constexpr):
    """Queue the tasks (vb, level+1) .. (vb, level+count) of every lane (2-D lanes): reserve
    their slots from the tail, then publish each task word with a release exchange."""
    first, _, _ = _reserve(ctr + Q_TAIL, count)
    tl.debug_barrier()  # the pushing chunk's writes come before the releases below
    for j in tl.static_range(L):
        pos = first + j
        tl.atomic_xchg(queue + pos, (vb << 4) | (level + 1 + j), mask=(j < count) & (pos < Q_CAP),
                       sem="release")


@triton.jit
def _first_id(ctr, seed_off, b, level, L: tl.constexpr):
    """Local id of the first node of `level` in batch b: seeds, then hop 1's new nodes, ..."""
    acc = tl.load(seed_off + b + 1) - tl.load(seed_off + b)
    first = tl.zeros_like(acc)
    row = ctr + FIXED + b * (L + 1)
    for lvl in tl.static_range(1, L + 1):
        first = tl.where(level >= lvl, acc, first)
        acc += tl.load(row + lvl, cache_modifier=".cg")
    return first


@triton.jit
def _local_id(state, ctr, seed_off, vb, b, mask, L: tl.constexpr):
    word = tl.load(state + vb, mask=mask, other=0, cache_modifier=".cg")
    return _first_id(ctr, seed_off, b, word & 15, L) + (word >> 4)


# -- phases ------------------------------------------------------------------------------------

@triton.jit
def _install_seeds(c, seeds, seed_batch, seed_off, state, queue, n_id, ctr, N, S, Q_CAP, N_CAP,
                   L: tl.constexpr, CH: tl.constexpr):
    i = c * CH + tl.arange(0, CH)
    m = i < S
    s = tl.load(seeds + i, mask=m, other=0)
    b = tl.load(seed_batch + i, mask=m, other=0)
    vb = b * N + s
    tl.store(state + vb, tl.zeros_like(i).to(tl.int32), mask=m)  # level 0
    tl.store(n_id + b * N_CAP + i - tl.load(seed_off + b), s, mask=m)
    count = tl.where(m, L, 0).to(tl.int64)[:, None]
    _push_tasks(queue, ctr, vb[:, None], tl.zeros_like(vb)[:, None], count, Q_CAP, L)


@triton.jit
def _floyd(deg, k, big, v, b, hop, seed, stream, C: tl.constexpr, W: tl.constexpr):
    """Positions (within each adjacency list) of the picks of rows with deg > fanout: [C, W].

    Floyd's algorithm: step i draws t_i uniform in [0, j_i], j_i = deg - k + i, and picks t_i, or
    j_i itself if t_i was picked already; its k steps give a uniform k-subset, whatever the degree.
    All t_i come at once from Philox (counters: node, the batch's stream position and hop, step).
    Which steps collide is solved for all steps together: collide_i holds iff an earlier step l
    picked t_i, i.e. (collide_l ? j_l : t_l) == t_i. Step i depends
    on earlier steps only, so iterating to the fixed point gives exactly the sequential result
    (in 2 or 3 rounds unless k is close to deg; never more than k + 1). The loop's condition is a
    reduction of values every warp computes alike from the task words: uniform.
    """
    col = tl.arange(0, W)[None, :]
    # int32 positions (an adjacency list is shorter than 2**31): half the registers of the
    # [C, W, W] collision tiles.
    j = (deg[:, None] - k[:, None] + col).to(tl.int32)
    key = (((stream + b) << 4) | hop).to(tl.uint32)[:, None] + tl.zeros([C, W], dtype=tl.uint32)
    r, _, _, _ = tl.philox(seed, v.to(tl.uint32)[:, None] + key * 0, key, col.to(tl.uint32) + key * 0, key * 0)
    t = tl.umulhi(r, (j + 1).to(tl.uint32)).to(tl.int32)
    earlier = big[:, None, None] & (col[:, None, :] < col[:, :, None])  # [task, step i, step l]
    collide = t < 0
    changed = 1
    while changed != 0:
        picked = tl.where(collide, j, t)  # what each step picks, given the collisions so far
        update = tl.max((earlier & (t[:, :, None] == picked[:, None, :])).to(tl.int32), axis=2) > 0
        changed = tl.max(tl.max((update != collide).to(tl.int32), axis=1), axis=0)
        collide = update
    return tl.where(collide, j, t).to(tl.int64)


@triton.jit
def _packed_keys(start, offset, inside, v, key, wkeys, seed):
    """The sort keys of a tile of a row's edges (`offset` within the row, where `inside`), each
    packed with its offset into one int64; INT64_MAX outside the row.

    Efraimidis-Spirakis: offset i gets key_i = log(E_i) + wkeys[start + i], E_i = -log(u_i) ~
    Exp(1), wkeys = -log(w / w_max) (ZERO_WEIGHT_KEY for a zero weight, samplers/weights.py), and
    a row takes its k smallest keys. In order, each pick is the edge of the smallest E_i / w_i
    among those left, which is edge i with probability w_i / (their total weight) (the first of
    independent exponential clocks of rates w_i): successive sampling in proportion to the
    weights; zero weights come after every positive one, uniformly among themselves.
    u_i = (23 random bits + 0.5) / 2**23 is exact in float32 and lies in [2**-24, 1 - 2**-24], so
    E_i <= 16.7; E_i is held >= 2**-25 (below its least exact value, against a fast log's error
    near u = 1), so log(E_i) lies in [-17.4, 2.9] and key_i + 32 is a positive normal float32,
    never NaN, whose bits order as the float does: (bits << 32) | i, distinct within a row, orders
    as the keys (keys equal in float32 go to the lower offset; float32 resolves a weight to ~1e-6
    of itself). u_i comes from Philox (node, the batch's stream position and hop, offset): a pure
    function of the seed, whichever program runs the task, so overflow reruns draw the same picks.
    """
    r, _, _, _ = tl.philox(seed, v.to(tl.uint32)[:, None] + key * 0, key, offset.to(tl.uint32), key * 0)
    u = ((r >> 9).to(tl.float32) + 0.5) * (1.0 / 8388608.0)
    weight_key = tl.load(wkeys + start[:, None] + offset, mask=inside, other=0.0)
    sort_key = tl.log(tl.maximum(-tl.log(u), 2.9802322e-08)) + weight_key + 32.0  # E >= 2**-25
    return tl.where(inside, (sort_key.to(tl.int32, bitcast=True).to(tl.int64) << 32) | offset, INT64_MAX)


@triton.jit
def _keep_smallest(best, kth, packed, W: tl.constexpr):
    """Merge a tile of packed keys into `best`, which holds, in its first k columns, the k smallest
    keys of its row seen so far (INT64_MAX while fewer were seen; -1 in the columns past k, never
    a maximum), in no order; `kth` is its maximum, the k-th smallest. No sort: Triton's is a
    bitonic network, and interpreted it takes seconds a tile.

    While some row's smallest remaining candidate `least` is below its `kth`, that candidate
    replaces the maximum (its first column, if several) and leaves the tile. A row whose `least`
    is not below its `kth` has no candidate left that could enter (all are >= least), so at the
    end `best` holds the k smallest of everything read. Termination: each iteration removes one
    candidate of each row, so at most the tile's width in iterations (about k for a row's first
    tile, ~0 for its later ones: the i-th edge enters a top k with probability k / i under equal
    weights).
    Uniform: the condition is a reduction of keys every warp computes alike (`_packed_keys`).
    """
    slot = tl.arange(0, W)[None, :]
    least = tl.min(packed, axis=1)
    while tl.max((least < kth).to(tl.int32), axis=0) > 0:
        at_max = tl.min(tl.where(best == kth[:, None], slot, W), axis=1)
        best = tl.where((least < kth)[:, None] & (slot == at_max[:, None]), least[:, None], best)
        packed = tl.where(packed == least[:, None], INT64_MAX, packed)
        kth = tl.max(best, axis=1)
        least = tl.min(packed, axis=1)
    return best, kth


@triton.jit
def _weighted(start, deg, k, big, v, b, hop, wkeys, seed, stream, C: tl.constexpr, W: tl.constexpr,
              T: tl.constexpr):
    """Offsets (within each adjacency list) of the picks of rows with deg > fanout, drawn by
    weight without replacement (samplers/weights.py): [C, W], the first k of each row valid.

    Each row's k smallest Efraimidis-Spirakis keys (`_packed_keys`), read T offsets a tile and
    kept in `best` (`_keep_smallest`). Termination: ceil(longest / T) tiles, `longest` the chunk's
    largest weighted-row degree (a reduction of degrees from indptr, read-only: uniform). O(deg)
    per task, as any weighted draw without preprocessing (pyg-lib's too); uniform rows stay O(k).
    """
    col = tl.arange(0, T)[None, :]
    key = (((stream + b) << 4) | hop).to(tl.uint32)[:, None] + tl.zeros([C, T], dtype=tl.uint32)
    rows = tl.where(big & (k > 0), deg, 0)  # (a fanout of 0 draws nothing: no row to read)
    longest = tl.max(rows, axis=0)
    best = tl.where(tl.arange(0, W)[None, :] < k[:, None], INT64_MAX, -1).to(tl.int64)
    kth = tl.max(best, axis=1)
    c0 = longest * 0  # a tensor loop variable, as in _sample_tasks' WIDE loop
    while c0 < longest:
        offset = c0 + col
        packed = _packed_keys(start, offset, offset < rows[:, None], v, key, wkeys, seed)
        best, kth = _keep_smallest(best, kth, packed, W)
        c0 += T
    return best & 0xFFFFFFFF


@triton.jit
def _visit(at, slot, valid, b, v, hop, indices, state, queue, records, edges, lo, cap, ctr,
           N, Q_CAP, R_CAP, E_STRIDE, L: tl.constexpr):
    """Picks at CSC positions `at` ([tasks, picks]) of hop `hop`: write their edges (global ids
    until phase 3) and their CSC positions at `slot`, and lower each neighbour's level to `hop`:
    whoever lowers it owes the tasks of its new hops. Every mask is uniform (from the task words
    and atomics' results)."""
    u = tl.load(indices + at, mask=valid, other=0).to(tl.int64)
    keep = valid & (slot < cap)
    tl.store(edges + lo + slot, u, mask=keep)
    tl.store(edges + lo + E_STRIDE + slot, v + slot * 0, mask=keep)
    tl.store(edges + lo + 2 * E_STRIDE + slot, at, mask=keep)
    ub = b * N + u
    h = (hop + slot * 0).to(tl.int32)
    old = tl.atomic_min(state + ub, h, mask=valid, sem="relaxed")
    lowered = valid & (old > h)
    _push_tasks(queue, ctr, ub, h.to(tl.int64), tl.where(lowered, tl.minimum(old, L) - h, 0).to(tl.int64),
                Q_CAP, L)
    new = lowered & (old == EMPTY)
    at_record, _, _ = _reserve(ctr + R_TAIL, new.to(tl.int64))
    tl.store(records + at_record, ub, mask=new & (at_record < R_CAP))


@triton.jit
def _sample_tasks(task, got, indptr, indices, wkeys, fanouts, state, queue, records, edges, eoff, ctr,
                  N, B, Q_CAP, R_CAP, E_STRIDE, seed, stream, L: tl.constexpr, W: tl.constexpr,
                  TW: tl.constexpr, C: tl.constexpr, EBINS: tl.constexpr, WIDE: tl.constexpr,
                  WEIGHTED: tl.constexpr):
    """Run the tasks of one chunk (lanes where `got`)."""
    hop = tl.where(got, task & 15, 1)
    vb = tl.where(got, task >> 4, 0)
    b = vb // N
    v = vb - b * N
    start = tl.load(indptr + v, mask=got, other=0)
    deg = tl.load(indptr + v + 1, mask=got, other=0) - start
    fanout = tl.load(fanouts + hop - 1, mask=got, other=0).to(tl.int64)
    k = tl.minimum(deg, fanout)
    big = deg > fanout  # Floyd (or weighted) rows, k = fanout <= W; the others take all their deg neighbours
    # Edge slots, k per task, reserved per (batch, hop).
    first = _reserve_binned(ctr + FIXED + B * (L + 1), (b * L + hop - 1).to(tl.int32), k, EBINS)[:, None]
    lo = (b * 3 * E_STRIDE + tl.load(eoff + hop - 1))[:, None]
    cap = (tl.load(eoff + hop) - tl.load(eoff + hop - 1))[:, None]
    col = tl.arange(0, W)[None, :]
    at = col + tl.zeros([C, W], dtype=tl.int64)  # take-all rows: their first W neighbours
    if tl.max(big.to(tl.int32), axis=0) > 0:
        if WEIGHTED:
            at = tl.where(big[:, None], _weighted(start, deg, k, big, v, b, hop, wkeys, seed, stream, C, W, TW), at)
        else:
            at = tl.where(big[:, None], _floyd(deg, k, big, v, b, hop, seed, stream, C, W), at)
    _visit(start[:, None] + at, first + col, got[:, None] & (col < k[:, None]), b[:, None], v[:, None],
           hop[:, None], indices, state, queue, records, edges, lo, cap, ctr, N, Q_CAP, R_CAP, E_STRIDE, L)
    if WIDE:  # a fanout above W: take-all rows may be longer than one tile
        rest = got & (big == 0) & (k > W)
        longest = tl.max(tl.where(rest, k, 0), axis=0)
        # A while loop, not range(W, longest, TW): Triton 3.6's interpreter turns a tensor bound into
        # a Python int with int(array), which numpy >= 2.4 refuses for its 1-element arrays.
        c0 = longest * 0 + W
        while c0 < longest:
            wide = c0 + tl.arange(0, TW)[None, :]
            _visit(start[:, None] + wide, first + wide, rest[:, None] & (wide < k[:, None]), b[:, None],
                   v[:, None], hop[:, None], indices, state, queue, records, edges, lo, cap, ctr,
                   N, Q_CAP, R_CAP, E_STRIDE, L)
            c0 += TW


@triton.jit
def _all_done(ctr, Q_CAP):
    """True when no task is queued or running (see `_drain_queue`); uniform: from two atomics."""
    completed = tl.atomic_add(ctr + COMPLETED, 0, sem="acquire")
    pushed = tl.atomic_add(ctr + Q_TAIL, 0, sem="relaxed")
    return completed == tl.minimum(pushed, Q_CAP)


@triton.jit
def _drain_queue(indptr, indices, wkeys, fanouts, state, queue, records, edges, eoff, ctr,
                 N, B, Q_CAP, R_CAP, E_STRIDE, seed, stream,
                 L: tl.constexpr, W: tl.constexpr, TW: tl.constexpr, C: tl.constexpr,
                 EBINS: tl.constexpr, WIDE: tl.constexpr, WEIGHTED: tl.constexpr):
    """Phase 1. Every condition is uniform: `slots` comes from a scalar atomic, `task` from a
    vector exchange (both broadcast to every thread), `todo` and `got` from those alone, and the
    termination test from two atomics.

    Termination. Let T be the tail (tasks pushed, stored or dropped past Q_CAP) and D
    `completed`. Every task stored is in a slot below min(T, Q_CAP), and counts in D only after
    it ran to the end, its pushes included. `_all_done` reads D (acquire) and then T. Say it reads
    d, then t, with d == min(t, Q_CAP). Each of the d tasks was reserved before its completion
    (the exchange that published it depended on the reservation, and the release/acquire pair on
    the slot orders the two), so all d hold distinct slots below min(t, Q_CAP): they are all
    the tasks stored there. A task still running, or still queued, would have a stored slot below
    min(t, Q_CAP) and not be complete; so there is none, and a task pushed later would need a
    running task to push it. Hence once the test holds it holds for good, and every task's writes
    are visible to this program (the acquire read of D synchronises with every completion).
    """
    lane = tl.arange(0, C)
    active = 1
    while active != 0:
        slots = tl.atomic_add(ctr + Q_HEAD, C, sem="relaxed") + lane
        todo = slots < Q_CAP
        while tl.max(todo.to(tl.int32), axis=0) > 0:
            # Take whatever the claimed slots hold (an empty slot stays -1 and stays claimed).
            task = tl.atomic_xchg(queue + slots, tl.full([C], -1, tl.int64), mask=todo, sem="acquire")
            got = todo & (task >= 0)
            if tl.max(got.to(tl.int32), axis=0) > 0:
                _sample_tasks(task, got, indptr, indices, wkeys, fanouts, state, queue, records, edges, eoff,
                              ctr, N, B, Q_CAP, R_CAP, E_STRIDE, seed, stream, L, W, TW, C, EBINS, WIDE, WEIGHTED)
                tl.debug_barrier()  # every thread's writes of these tasks come before the release
                tl.atomic_add(ctr + COMPLETED, tl.sum(got.to(tl.int64), axis=0), sem="release")
                todo = todo & (got == 0)
            elif _all_done(ctr, Q_CAP):
                todo = lane < 0  # nothing queued or running: these slots stay empty for good
        if _all_done(ctr, Q_CAP):
            active = 0
    tl.debug_barrier()


@triton.jit
def _slot_records(c, records, state, ctr, N, R, L: tl.constexpr, CH: tl.constexpr, LBINS: tl.constexpr):
    i = c * CH + tl.arange(0, CH)
    m = i < R
    vb = tl.load(records + i, mask=m, other=0, cache_modifier=".cg")
    level = tl.load(state + vb, mask=m, other=0, cache_modifier=".cg")
    bins = ((vb // N) * (L + 1) + level).to(tl.int32)
    slot = _reserve_binned(ctr + FIXED, bins, m.to(tl.int64), LBINS)
    tl.store(state + vb, ((slot << 4) | level).to(tl.int32), mask=m)


@triton.jit
def _seed_positions(c, seeds, seed_batch, seed_off, N, S, CH: tl.constexpr):
    i = c * CH + tl.arange(0, CH)
    m = i < S
    s = tl.load(seeds + i, mask=m, other=0)
    b = tl.load(seed_batch + i, mask=m, other=0)
    return i - tl.load(seed_off + b), b * N + s, m


@triton.jit
def _relabel_edges(c, state, edges, eoff, ctr, seed_off, N, B, E_STRIDE, L: tl.constexpr, CH: tl.constexpr):
    """Chunk c of the edge buffer [B, 3, E_STRIDE] (hop h of batch b at eoff[h-1]..eoff[h]): its
    neighbours and targets (rows 0 and 1) to local ids; the CSC positions (row 2) stay as they are."""
    p = c * CH + tl.arange(0, CH)
    inside = p < B.to(tl.int64) * E_STRIDE  # sizes bind as i32 where they fit: their product may not
    p = tl.where(inside, p, 0)  # keep every address computed below in bounds
    b = p // E_STRIDE
    at = p - b * E_STRIDE
    hop0 = tl.zeros_like(p)  # hop - 1
    for h in tl.static_range(1, L):
        hop0 += (at >= tl.load(eoff + h)).to(p.dtype)
    fill = tl.load(ctr + FIXED + B * (L + 1) + b * L + hop0, cache_modifier=".cg")
    m = inside & (at - tl.load(eoff + hop0) < fill)
    addr = edges + b * 3 * E_STRIDE + at
    src = tl.load(addr, mask=m, other=0, cache_modifier=".cg")
    dst = tl.load(addr + E_STRIDE, mask=m, other=0, cache_modifier=".cg")
    tl.store(addr, _local_id(state, ctr, seed_off, b * N + src, b, m, L), mask=m)
    tl.store(addr + E_STRIDE, _local_id(state, ctr, seed_off, b * N + dst, b, m, L), mask=m)


@triton.jit
def _write_n_id(c, records, state, n_id, ctr, seed_off, N, R, N_CAP, L: tl.constexpr, CH: tl.constexpr):
    i = c * CH + tl.arange(0, CH)
    m = i < R
    vb = tl.load(records + i, mask=m, other=0, cache_modifier=".cg")
    b = vb // N
    local = _local_id(state, ctr, seed_off, vb, b, m, L)
    tl.store(n_id + b * N_CAP + local, vb - b * N, mask=m & (local < N_CAP))


# -- the kernel --------------------------------------------------------------------------------

# Sizes change from call to call: do not compile a variant per value (== 1, multiple of 16).
@triton.jit(do_not_specialize=["N", "B", "Q_CAP", "R_CAP", "E_STRIDE", "N_CAP", "seed", "stream"])
def fused_sample_kernel(indptr, indices, wkeys, fanouts, seeds, seed_batch, seed_off, state, queue, records, edges,
                        eoff, n_id, ctr, N, B, Q_CAP, R_CAP, E_STRIDE, N_CAP, seed, stream,
                        L: tl.constexpr, W: tl.constexpr, TW: tl.constexpr, C: tl.constexpr, CH: tl.constexpr,
                        EBINS: tl.constexpr, LBINS: tl.constexpr, WIDE: tl.constexpr, WEIGHTED: tl.constexpr):
    S = tl.load(seed_off + B)  # written by the host: the same in every warp
    seed_chunks = tl.cdiv(S, CH)

    # 0. seeds: level 0, n_id, and their tasks for hops 1..L. (Loop conditions here and below:
    # chunk numbers from scalar atomics against counts every warp computes alike: uniform.)
    c = tl.atomic_add(ctr + SEED_CLAIM, 1, sem="relaxed")
    while c < seed_chunks:
        _install_seeds(c, seeds, seed_batch, seed_off, state, queue, n_id, ctr, N, S, Q_CAP, N_CAP, L, CH)
        _finish_chunk(ctr + SEED_DONE)
        c = tl.atomic_add(ctr + SEED_CLAIM, 1, sem="relaxed")
    _wait_until(ctr + SEED_DONE, seed_chunks)

    # 1. every hop at once, from the task queue, until no task is queued or running.
    _drain_queue(indptr, indices, wkeys, fanouts, state, queue, records, edges, eoff, ctr,
                 N, B, Q_CAP, R_CAP, E_STRIDE, seed, stream, L, W, TW, C, EBINS, WIDE, WEIGHTED)

    # 2. slots within each (batch, level); seeds keep their position. The record count is final
    # (every record was reserved before its task completed) and read by an atomic: uniform.
    R = tl.minimum(tl.atomic_add(ctr + R_TAIL, 0, sem="relaxed"), R_CAP)
    record_chunks = tl.cdiv(R, CH)
    c = tl.atomic_add(ctr + SLOT_CLAIM, 1, sem="relaxed")
    while c < record_chunks + seed_chunks:
        if c < record_chunks:
            _slot_records(c, records, state, ctr, N, R, L, CH, LBINS)
        else:
            idx, vb, m = _seed_positions(c - record_chunks, seeds, seed_batch, seed_off, N, S, CH)
            tl.store(state + vb, (idx << 4).to(tl.int32), mask=m)
        _finish_chunk(ctr + SLOT_DONE)
        c = tl.atomic_add(ctr + SLOT_CLAIM, 1, sem="relaxed")
    _wait_until(ctr + SLOT_DONE, record_chunks + seed_chunks)

    # 3. local ids: edges in place, and n_id of the non-seed nodes.
    edge_chunks = tl.cdiv(B.to(tl.int64) * E_STRIDE, CH)  # (i32 * i32 could wrap)
    c = tl.atomic_add(ctr + LABEL_CLAIM, 1, sem="relaxed")
    while c < edge_chunks + record_chunks:
        if c < edge_chunks:
            _relabel_edges(c, state, edges, eoff, ctr, seed_off, N, B, E_STRIDE, L, CH)
        else:
            _write_n_id(c - edge_chunks, records, state, n_id, ctr, seed_off, N, R, N_CAP, L, CH)
        _finish_chunk(ctr + LABEL_DONE)
        c = tl.atomic_add(ctr + LABEL_CLAIM, 1, sem="relaxed")
    _wait_until(ctr + LABEL_DONE, edge_chunks + record_chunks)

    # 4. cleanup: only the nodes this launch touched (the kernel's end publishes it to the host).
    c = tl.atomic_add(ctr + RESET_CLAIM, 1, sem="relaxed")
    while c < record_chunks + seed_chunks:
        if c < record_chunks:
            i = c * CH + tl.arange(0, CH)
            vb = tl.load(records + i, mask=i < R, other=0, cache_modifier=".cg")
            tl.store(state + vb, tl.full([CH], EMPTY, tl.int32), mask=i < R)
        else:
            idx, vb, m = _seed_positions(c - record_chunks, seeds, seed_batch, seed_off, N, S, CH)
            tl.store(state + vb, tl.full([CH], EMPTY, tl.int32), mask=m)
        c = tl.atomic_add(ctr + RESET_CLAIM, 1, sem="relaxed")
