"""`fused`: every hop of a mini-batch -- or of several, a super-batch -- in ONE persistent Triton
kernel launch (samplers/fused_kernel.py explains the kernel). Same output as `bsp` (docs/design.md).

This wrapper sizes the kernel's buffers from the fanouts and the batch sizes (worst-case bounds:
|N_h| <= |N_{h-1}| * (1 + fanout), capped by the graph; times `buffer_scale`), keeps them across
calls, launches the kernel once per `sample`/`sample_many` call, reads its counters back once (the
only host sync) and copies the batches out with one `cat` (the batches of a call are views of one
exact-size tensor), each edge with its CSC position (`edge_pos_per_hop`). If a buffer was too
small, the kernel says so through its counters and the call runs again with bigger buffers,
which are kept: the random numbers are a function of (seed, stream position, node, hop), so the
rerun draws the same batch.

Randomness: Philox keyed by the sampler's seed; each mini-batch takes the next position of the
stream, so `sample_many([a, b])` draws exactly what `sample(a); sample(b)` would, and
`manual_seed(s)` rewinds the stream (a seed reproduces its batches). On CUDA the *order* of ids
within a hop (and of edges) depends on thread timing while the sampled subgraph does not; so by
default (`deterministic=True`, `sampler.deterministic` in the config) each batch is put in a
canonical order (ids within a hop by global id, as bsp; edges by target, then neighbour): the
same seed gives bit-identical batches, and so the same losses and an exact resume, at the cost of
a few sorts per batch. `deterministic=False` skips them.

`weight_attr` draws by weight as PyG does (samplers/weights.py): a second compiled variant of the
kernel (constexpr WEIGHTED) reads each edge's float32 weight key, computed once here.

Host path: one pinned host-to-device copy of the seeds per call (each part 16-byte aligned, so
Triton never compiles a new variant for a batch size), the launch under the tensors' own device,
and one copy of the counters back (the only sync).

It runs on CUDA tensors, and on CPU tensors under TRITON_INTERPRET=1 (Triton's interpreter: slow,
for tests).
"""
from __future__ import annotations

import contextlib
import itertools
import math
from collections import Counter

import torch
from torch import Tensor

from conveyor.core import ConveyorError
from conveyor.core.cores import sampler_threads, torch_threads
from conveyor.partition import Graph
from conveyor.partition.graph import max_gap
from conveyor.samplers import fused_kernel
from conveyor.samplers.batch import SampledBatch
from conveyor.samplers.validation import cap_fanouts, check_fanouts, check_seeds
from conveyor.samplers.weights import edge_weights, weight_keys

INTERPRETED = type(fused_kernel.fused_sample_kernel).__name__ == "InterpretedFunction"
MAX_NODES = 2**27  # a node's slot lives in the 27 high bits of an int32 state word
MAX_PICKS = 128  # Floyd keeps a [tasks, fanout, fanout] tile per chunk
MAX_SUPER_BATCH = 64
# Registers per thread the compiled kernel may use. Left to itself, ptxas holds a kernel of 128
# threads to 128 registers (4 programs per SM) and, under Triton 3.6, spills 8-16 bytes to reach
# that; with this cap it takes ~150 and spills nothing (3 programs per SM: 65536 / (168 * 128)).
# Newer Triton needs ~118 and keeps 4 programs per SM. `python -m conveyor.samplers.fused_compile`
# checks it (tests/samplers/test_fused_compile.py).
MAX_REGISTERS = 168


def _pow2(x: int) -> int:
    return 1 << max(0, int(x) - 1).bit_length()


def _even(x: int) -> int:
    """x rounded up to whole 16-byte units of int64: Triton specialises a pointer on whether it
    is 16-byte aligned, so unaligned views would compile new kernel variants."""
    return x + (x & 1)


def floyd_width(fanouts, max_degree: int) -> int:
    """The pick tile's width: Floyd draws a fanout's worth of picks at once, in a [width, width]
    tile per task; it is only needed where some node has more in-neighbours than the fanout."""
    floyd = max([f for f in fanouts if f < max_degree], default=1)
    if floyd > MAX_PICKS:
        raise ConveyorError(f"the fused sampler draws at most {MAX_PICKS} of a node's in-neighbours per hop, "
                            f"but fanouts {list(fanouts)} ask for {floyd} on a graph with in-degrees up to "
                            f"{max_degree}; lower the fanouts or use sampler=bsp.")
    return max(2, _pow2(floyd))


def launch_config(width: int, picks, num_batches: int, interpreted: bool = INTERPRETED,
                  weighted: bool = False) -> dict:
    """The kernel's constexprs and warps for a launch of `num_batches` batches; `width` is the
    Floyd tile width and `picks` the most picks per hop, `weighted` whether it draws by weight.
    The same for every batch size, so batch sizes never cause recompilation; only the number of
    batches in a super-batch does, rounded up to a power of two (the counter bins): 7 variants
    for super-batches of 1 to 64 batches (of each of the unweighted and weighted kernels)."""
    L, batches = len(picks), _pow2(num_batches)
    ebins, lbins = _pow2(batches * L), _pow2(batches * (L + 1))
    # Tiles: [tasks, width, width] in Floyd, [chunk, lbins] when counting levels. The
    # interpreter pays per operation, not per element: give it big chunks.
    if interpreted:  # (and at most 2**20 elements per tile)
        tasks = min(256, max(1, 2**20 // width**2), 2**20 // ebins)
        chunk, take_all = min(1024, 2**20 // lbins), max(width, 128)
    else:
        # [8, 16, 16] Floyd tiles; a [tasks, width] pick tile of 128 lanes, one per thread.
        tasks, chunk = min(16, max(1, 2048 // width**2)), max(16, min(256, 2048 // lbins))
        take_all = max(width, 32)
    meta = dict(L=L, W=width, TW=take_all, C=tasks, CH=chunk, EBINS=ebins, LBINS=lbins,
                WIDE=max(picks) > width, WEIGHTED=bool(weighted), num_warps=4)
    return meta if interpreted else {**meta, "maxnreg": MAX_REGISTERS}


class FusedSampler:
    name = "fused"

    def __init__(self, graph: Graph, fanouts, device="cpu", seed: int = 0, buffer_scale: float = 1.0,
                 deterministic: bool = True, num_programs: int | None = None, weight_attr: str | None = None,
                 threads="auto"):
        self.fanouts = check_fanouts(fanouts)
        self.threads = sampler_threads(threads)  # the host's ops (core/cores.py)
        weights = edge_weights(graph, weight_attr)
        self.device = torch.device(device)
        self._check_device()
        if self.device.type == "cuda" and self.device.index is None:  # pin "cuda" to one GPU
            self.device = torch.device("cuda", torch.cuda.current_device())
        if len(self.fanouts) > fused_kernel.MAX_HOPS:
            raise ConveyorError(f"the fused sampler supports up to {fused_kernel.MAX_HOPS} hops, got "
                                f"{len(self.fanouts)} fanouts; use sampler=bsp for deeper models.")
        self.num_nodes = graph.num_nodes
        if self.num_nodes >= MAX_NODES:
            raise ConveyorError(f"the fused sampler supports graphs below {MAX_NODES:,} nodes, this one has "
                                f"{self.num_nodes:,}; use sampler=bsp.")
        self.num_edges = graph.num_edges
        max_degree = max_gap(graph.indptr)  # a chunk at a time: no node-long copy
        self.fanouts = cap_fanouts(self.fanouts, max_degree)  # the same sample; fits the int32 fanouts_dev
        # A task never draws more than min(fanout, its degree) neighbours.
        self.picks = [min(f, max_degree) for f in self.fanouts]
        self.width = floyd_width(self.fanouts, max_degree)
        if not buffer_scale > 0:
            raise ConveyorError(f"buffer_scale must be > 0 (a fraction of the worst-case buffer sizes), "
                                f"got {buffer_scale}.")
        self.deterministic = deterministic
        self._take_graph(graph, weights)
        self.fanouts_dev = torch.tensor(self.fanouts, dtype=torch.int32, device=self.device)
        self.num_programs = num_programs  # None: as many as fit on the GPU at once
        self._grid: dict[tuple, int] = {}
        self.compiled: dict[tuple, dict] = {}  # per compiled variant: registers, spills, shared memory
        # Capacities: buffer_scale times the worst case, or more where an overflow showed the need.
        self.buffer_scale = buffer_scale
        self._learned = {"queue": 0, "records": 0, "nodes": 0, "edges": [0] * len(self.fanouts)}
        self._buf: dict[str, Tensor] = {}
        self._eoff: tuple = (None, None)
        self._dirty = False  # state may hold marks of an interrupted launch
        self.num_launches = 0  # kernel launches so far, reruns after an overflow included
        self.manual_seed(seed)

    def _take_graph(self, graph: Graph, weights: Tensor | None) -> None:
        """What the kernel reads of the graph, on the device: its CSC arrays and, to draw by weight,
        each edge's float32 weight key (samplers/weights.py; unweighted launches get a stand-in)."""
        self.indptr = graph.indptr.to(self.device)
        self.indices = graph.indices.to(self.device)
        self.weighted = weights is not None
        self.wkeys = (weight_keys(weights, torch.float32) if self.weighted else torch.zeros(1)).to(self.device)
        # Parallel edges tie in canonical_order's sort by (target, neighbour): their positions break it.
        self.parallel_edges = has_parallel_edges(graph)

    def _check_device(self):
        if self.device.type == "cuda":
            if not torch.cuda.is_available():
                raise ConveyorError("the fused sampler was asked to run on CUDA, but CUDA is not available; "
                                    "use device=cpu with TRITON_INTERPRET=1, or sampler=bsp.")
        elif not (self.device.type == "cpu" and INTERPRETED):
            raise ConveyorError(f"fused needs CUDA or TRITON_INTERPRET=1 (Triton's CPU interpreter, set before "
                                f"samplers.fused is imported), got device {self.device}; on CPU use "
                                f"sampler=bsp.")

    def manual_seed(self, seed: int) -> None:
        """Restart the random stream: the batches that follow are a function of `seed` alone."""
        self.seed = int(seed) % 2**63
        self.stream = 0

    def sample(self, seeds) -> SampledBatch:
        return self.sample_many([seeds])[0]

    def sample_many(self, seed_list) -> list[SampledBatch]:
        """Sample several mini-batches in one launch (a super-batch); each is independent.
        Up to MAX_SUPER_BATCH batches per launch (the kernel keeps counters per batch)."""
        seeds = [check_seeds(s, self.num_nodes).cpu() for s in seed_list]
        with torch_threads(self.threads):
            return [batch for i in range(0, len(seeds), MAX_SUPER_BATCH)
                    for batch in self._super_batch(seeds[i: i + MAX_SUPER_BATCH])]

    def _super_batch(self, seeds: list[Tensor]) -> list[SampledBatch]:
        stream = self.stream  # batch b draws from stream position stream + b
        self.stream += len(seeds)
        sizes = [s.numel() for s in seeds]
        if sum(sizes) == 0:
            return [self._empty_batch() for _ in seeds]
        flat_seeds, seed_batch, seed_off = self._upload(seeds, sizes)
        for _ in range(32):
            caps = self._capacities(sizes)
            counters = self._launch(caps, flat_seeds, seed_batch, seed_off, len(seeds), stream)
            needs = self._needs(counters, caps, sizes)
            if not needs:
                break
            self._grow(needs, caps)
        else:
            raise RuntimeError(f"fused sampler: buffers still overflow after 32 launches ({needs}); this is a bug.")
        batches = self._assemble(counters, caps, sizes)
        if self.deterministic:
            batches = [canonical_order(b, self.num_nodes, self.parallel_edges) for b in batches]
        return batches

    def _upload(self, seeds: list[Tensor], sizes: list[int]):
        """One copy to the device, from pinned memory on CUDA: the seeds, each seed's batch, and
        the batch offsets, each part starting 16 bytes aligned."""
        B, S = len(sizes), sum(sizes)
        at_owner, at_offsets = _even(S), 2 * _even(S)
        host = torch.empty(at_offsets + B + 1, dtype=torch.long, pin_memory=self.device.type == "cuda")
        torch.cat(seeds, out=host[:S])
        if B == 1:
            host[at_owner: at_owner + S].zero_()
        else:
            host[at_owner: at_owner + S] = torch.repeat_interleave(torch.arange(B), torch.tensor(sizes))
        host[at_offsets: at_offsets + B + 1] = torch.tensor(list(itertools.accumulate(sizes, initial=0)))
        dev = self._buffer("upload", host.numel(), torch.long)
        dev[: host.numel()].copy_(host, non_blocking=True)
        return dev[:S], dev[at_owner: at_owner + S], dev[at_offsets: at_offsets + B + 1]

    # -- buffers --------------------------------------------------------------------------------
    def _worst_case(self, sizes) -> dict:
        """Upper bounds for one launch: tasks and records over all batches, nodes and edges per hop
        of the largest batch. |N_h| <= |N_{h-1}| * (1 + picks), and no more than the graph has."""
        bound = {"queue": 0, "records": 0, "nodes": 0, "edges": [0] * len(self.picks)}
        for size, times in Counter(sizes).items():
            nodes = [size]
            for f in self.picks:
                nodes.append(min(self.num_nodes, nodes[-1] * (1 + f)))
            bound["queue"] += times * sum(nodes[:-1])
            bound["records"] += times * (nodes[-1] - size)
            bound["nodes"] = max(bound["nodes"], nodes[-1])
            bound["edges"] = [max(e, min(n * f, self.num_edges))
                              for e, n, f in zip(bound["edges"], nodes, self.picks)]
        return bound

    def _capacities(self, sizes) -> dict:
        bound, learned = self._worst_case(sizes), self._learned
        scaled = {name: max(1, math.ceil(bound[name] * self.buffer_scale), learned[name])
                  for name in ("queue", "records", "nodes")}
        scaled["nodes"] = max(scaled["nodes"], max(sizes))
        ecap = [max(math.ceil(e * self.buffer_scale), m) for e, m in zip(bound["edges"], learned["edges"])]
        scaled["eoff"] = list(itertools.accumulate(ecap, initial=0))
        return scaled

    def _buffer(self, name: str, size: int, dtype, fill=None) -> Tensor:
        """A reused buffer of at least `size` elements; new ones start at `fill`."""
        buf = self._buf.get(name)
        if buf is None or buf.numel() < size:
            buf = torch.empty(max(size, 1), dtype=dtype, device=self.device)
            if fill is not None:
                buf.fill_(fill)
            self._buf[name] = buf
        return buf

    def _launch(self, caps, flat_seeds, seed_batch, seed_off, num_batches, stream) -> list[int]:
        args, meta = self._launch_args(caps, flat_seeds, seed_batch, seed_off, num_batches, stream)
        self._dirty = True
        with self._on_device():  # Triton launches on the current device: make it ours
            fused_kernel.fused_sample_kernel[(self._programs(args, meta),)](*args, **meta)
        self.num_launches += 1
        ctr = self._buf["counters"][: fused_kernel.num_counters(num_batches, len(self.fanouts))]
        counters = self._read_back(ctr)  # the one host sync
        self._dirty = False
        return counters

    def _launch_args(self, caps, flat_seeds, seed_batch, seed_off, num_batches, stream) -> tuple[tuple, dict]:
        """The kernel's arguments (buffers sized by `caps`, counters zeroed) and constexprs."""
        L, B, N = len(self.fanouts), num_batches, self.num_nodes
        if self._dirty:  # an interrupted launch may have left marks: start from a clean slate
            self._buf.pop("state", None)
            self._buf.pop("queue", None)
        state = self._buffer("state", B * N, torch.int32, fill=fused_kernel.EMPTY.value)
        queue = self._buffer("queue", caps["queue"], torch.int64, fill=-1)
        records = self._buffer("records", caps["records"], torch.int64)
        e_stride = caps["eoff"][-1]
        edges = self._buffer("edges", B * 3 * e_stride, torch.int64)  # neighbours, targets, CSC positions
        n_id = self._buffer("n_id", B * caps["nodes"], torch.int64)
        ctr = self._buffer("counters", fused_kernel.num_counters(B, L), torch.int64)
        ctr.zero_()
        if self._eoff[0] != caps["eoff"]:  # hop offsets in the edge buffer: copied when they change
            self._eoff = (caps["eoff"], torch.tensor(caps["eoff"], dtype=torch.int64, device=self.device))
        eoff = self._eoff[1]
        args = (self.indptr, self.indices, self.wkeys, self.fanouts_dev, flat_seeds, seed_batch, seed_off, state,
                queue, records, edges, eoff, n_id, ctr, N, B, caps["queue"], caps["records"], e_stride, caps["nodes"],
                self.seed, stream)
        return args, launch_config(self.width, self.picks, B, interpreted=INTERPRETED, weighted=self.weighted)

    def compile(self, num_batches: int = 1) -> dict:
        """Compile, without launching, the kernel variant that super-batches of `num_batches`
        batches run, and say what the compiler made of it: registers and spilled bytes per thread,
        shared memory, and the persistent grid's programs (on CUDA; under the interpreter only
        the programs). The launches that follow reuse it."""
        sizes = [1] * num_batches
        seeds = [torch.zeros(1, dtype=torch.long)] * num_batches
        args, meta = self._launch_args(self._capacities(sizes), *self._upload(seeds, sizes), num_batches, self.stream)
        with self._on_device():
            programs = self._programs(args, meta)
        return {**self.compiled.get(tuple(sorted(meta.items())), {}), "programs": programs, "meta": meta}

    def _on_device(self):
        return torch.cuda.device(self.device) if self.device.type == "cuda" else contextlib.nullcontext()

    def _read_back(self, counters: Tensor) -> list[int]:
        if self.device.type != "cuda":
            return counters.tolist()
        host = torch.empty(counters.numel(), dtype=counters.dtype, pin_memory=True)
        host.copy_(counters, non_blocking=True)
        torch.cuda.current_stream(self.device).synchronize()
        return host.tolist()

    def _programs(self, args, meta) -> int:
        """A persistent grid: as many programs as can be resident on the GPU at once (registers,
        threads and shared memory per SM); 2 in the interpreter, where they run in turn."""
        if self.num_programs is not None:
            return int(self.num_programs)
        if INTERPRETED:
            return 2
        key = tuple(sorted(meta.items()))
        if key not in self._grid:
            kernel = fused_kernel.fused_sample_kernel.warmup(*args, grid=(1,), **meta)
            kernel._init_handles()
            props = torch.cuda.get_device_properties(self.device)
            threads = 32 * meta["num_warps"]
            per_sm = min(getattr(props, "regs_per_multiprocessor", 65536) // max(1, kernel.n_regs * threads),
                         getattr(props, "max_threads_per_multi_processor", 2048) // threads)
            if kernel.metadata.shared:
                smem = getattr(props, "shared_memory_per_multiprocessor", 0) or 100 * 1024
                per_sm = min(per_sm, smem // kernel.metadata.shared)
            self._grid[key] = max(1, per_sm) * props.multi_processor_count
            self.compiled[key] = {"registers": kernel.n_regs, "spilled_bytes": kernel.n_spills,
                                  "shared_bytes": kernel.metadata.shared, "programs_per_sm": per_sm}
        return self._grid[key]

    def _split(self, counters, num_batches):
        L = len(self.fanouts)
        base = fused_kernel.FIXED.value
        per_level = torch.tensor(counters[base: base + num_batches * (L + 1)]).view(num_batches, L + 1)
        fills = torch.tensor(counters[base + num_batches * (L + 1):][: num_batches * L]).view(num_batches, L)
        return per_level, fills

    def _needs(self, counters, caps, sizes) -> dict:
        """What overflowed, and how much the launch asked for (a lower bound if a task was dropped)."""
        per_level, fills = self._split(counters, len(sizes))
        needs = {}
        if counters[fused_kernel.Q_TAIL.value] > caps["queue"]:
            needs["queue"] = counters[fused_kernel.Q_TAIL.value]
        if counters[fused_kernel.R_TAIL.value] > caps["records"]:
            needs["records"] = counters[fused_kernel.R_TAIL.value]
        nodes = int((torch.tensor(sizes) + per_level[:, 1:].sum(1)).max())
        if nodes > caps["nodes"]:
            needs["nodes"] = nodes
        ecap = torch.tensor(caps["eoff"]).diff()
        if (fills > ecap).any():
            needs["edges"] = fills.max(0).values.tolist()
        return needs

    def _grow(self, needs, caps):
        """At least double what overflowed, and cover what the launch asked for."""
        for name in ("queue", "records", "nodes"):
            if name in needs:
                self._learned[name] = max(2 * caps[name], math.ceil(1.25 * needs[name]))
        if "edges" in needs:
            ecap = torch.tensor(caps["eoff"]).diff().tolist()
            self._learned["edges"] = [max(m, 2 * cap, math.ceil(1.25 * need)) if need > cap else m
                                      for m, need, cap in zip(self._learned["edges"], needs["edges"], ecap)]
        # Nodes whose record was dropped kept their marks: clear the whole state (rare path).
        self._buf.pop("state", None)

    # -- results --------------------------------------------------------------------------------
    def _assemble(self, counters, caps, sizes) -> list[SampledBatch]:
        """Copy every batch's n_id, edges and edge positions out of the work buffers with one `cat`."""
        per_level, fills = self._split(counters, len(sizes))
        L, e_stride, ncap = len(self.fanouts), caps["eoff"][-1], caps["nodes"]
        n_id = self._buf["n_id"][: len(sizes) * ncap].view(len(sizes), ncap)
        edges = self._buf["edges"][: len(sizes) * 3 * e_stride].view(len(sizes), 3, e_stride)
        pieces, layout = [], []
        for b, size in enumerate(sizes):
            counts = torch.tensor([size] + per_level[b, 1:].tolist()).cumsum(0)
            pieces.append(n_id[b, : int(counts[-1])])
            hops = []
            for h in range(L):
                lo, e = caps["eoff"][h], int(fills[b, h])
                pieces += [edges[b, row, lo: lo + e] for row in range(3)]  # neighbours, targets, positions
                hops.append(e)
            layout.append((counts, hops))
        flat = torch.cat(pieces)
        batches, at = [], 0
        for counts, hops in layout:
            total = int(counts[-1])
            batch_n_id, at = flat[at: at + total], at + total
            edge_index, positions = [], []
            for e in hops:
                edge_index.append(flat[at: at + 2 * e].view(2, e))
                positions.append(flat[at + 2 * e: at + 3 * e])
                at += 3 * e
            batches.append(SampledBatch(batch_n_id, counts, edge_index, positions))
        return batches

    def _empty_batch(self) -> SampledBatch:
        empty = torch.empty(0, dtype=torch.long, device=self.device)
        return SampledBatch(empty, torch.zeros(len(self.fanouts) + 1, dtype=torch.long),
                            [torch.empty(2, 0, dtype=torch.long, device=self.device) for _ in self.fanouts],
                            [empty for _ in self.fanouts])


def has_parallel_edges(graph: Graph, chunk: int = 1 << 24) -> bool:
    """Whether some node has two in-edges from the same source (a graph built with dedup=False):
    CSC rows are sorted by source, so they sit side by side within a row. A chunk of positions at
    a time: no edge-long temporary for a memory-mapped graph."""
    for start in range(0, max(graph.num_edges - 1, 0), chunk):
        stop = min(start + chunk, graph.num_edges - 1)
        same = graph.indices[start + 1:stop + 1] == graph.indices[start:stop]  # positions p and p + 1
        first, last = (int(torch.searchsorted(graph.indptr, v, right=r)) for v, r in ((start + 1, False), (stop, True)))
        same[graph.indptr[first:last] - 1 - start] = False  # p + 1 opens another row
        if bool(same.any()):
            return True
    return False


def canonical_order(batch: SampledBatch, num_nodes: int, parallel_edges: bool = False) -> SampledBatch:
    """The same batch with ids within each hop sorted by global id (seeds stay first, in order)
    and each hop's edges sorted by (target, neighbour), their CSC positions with them: a form that
    does not depend on timing. `parallel_edges` (the graph has some): edges that tie, the same
    neighbour and target, are ordered by CSC position (distinct within a hop)."""
    counts = batch.num_nodes_per_hop.to(batch.n_id.device)
    n = batch.n_id.numel()
    local = torch.arange(n, device=batch.n_id.device)
    level = torch.bucketize(local, counts, right=True)
    key = torch.where(level == 0, local, level * num_nodes + batch.n_id)
    order = torch.argsort(key)
    new_id = torch.empty_like(order)
    new_id[order] = local
    edges, positions = [], None if batch.edge_pos_per_hop is None else []
    for h, edge_index in enumerate(batch.edge_index_per_hop):
        relabelled = new_id[edge_index]
        key = relabelled[1] * max(n, 1) + relabelled[0]
        if parallel_edges and positions is not None:  # by position, then (stable) by (target, neighbour)
            by_position = torch.argsort(batch.edge_pos_per_hop[h])
            perm = by_position[torch.argsort(key[by_position], stable=True)]
        else:
            perm = torch.argsort(key)
        edges.append(relabelled[:, perm])
        if positions is not None:
            positions.append(batch.edge_pos_per_hop[h][perm])
    return SampledBatch(batch.n_id[order], batch.num_nodes_per_hop, edges, positions)
