"""`data=synthetic_papers`: a graph shaped like ogbn-papers100M, built out of core (larger than memory).

`scale=1.0` has papers100M's sizes: 111,059,956 nodes, ~1,615.7M edges (papers100M's directed
citation count; mean in-degree 14.55), 128 features stored as float16, 172 classes, and its split
sizes (train 1.087%, val 0.113%, test 0.193% of the nodes; every other node unlabelled, y = -1).
`scale` shrinks the node count (0.001: ~111K nodes) and keeps the mean in-degree.

The edges are stored once, as drawn: a directed graph of ~1.6B CSC entries (int32 sources, 6.5 GB
at scale 1), not symmetrised as PyG users symmetrise the real one (`ToUndirected`, 3.2B entries):
that would double the disk and the build for the same sampling shape (a node's in-neighbours are
drawn at most `fanout` at a time, so the cost of a batch follows the capped in-degrees, which this
draws with papers100M's skew). The real dataset (`data=papers100m`, papers100m.py) is symmetrised.

The model, per block of BLOCK destination nodes, each block from its own generator seeded by
(seed, what, block), so the graph depends on (scale, seed) only, not on how blocks are grouped into
chunks or spread over threads:
- classes as synthetic.py's, P(class c) ~ (c + 1)^-1.2; features the class centroid plus Gaussian
  noise (NOISE), rounded to float16: a node's own features classify it only moderately, the mean
  over its mostly same-class in-neighbours far better (SAGE beats an MLP, as on papers100M);
- in-degrees: floor of a Lomax (Pareto II) draw, P(deg >= k) = (1 + k / lam)^-DEGREE_TAIL, lam set
  so that the mean is papers100M's 14.55 (`in_degree_tail`): ~12% of the nodes are never cited, a
  power-law tail of hubs (max ~150K at scale 1), capped at num_nodes / 20;
- sources: drawn by power-law weight as synthetic.py's Chung-Lu ranks (hot rows for the feature
  cache), with probability HOMOPHILY from the destination's own class; self loops and repeats are
  redrawn (uniformly after a few rounds), so every node has exactly its drawn in-degree;
- splits: 1,546,782 * scale nodes drawn at random, dealt to train, val and test; `node.year` as
  papers100M's (val 2018, test 2019, train before 2018).
Built streaming: the in-degrees give indptr (and the file sizes), then every block's sorted sources,
features, labels and years are written straight into the mapped layout (partition/mapped.py), the
blocks in threads; the whole edge list or feature matrix is never in memory (~28 bytes a node).
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from conveyor.core.errors import ConveyorError
from conveyor.core.memory import check_memory
from conveyor.partition.datasets.out_of_core import cached_mapped, check_disk, progress
from conveyor.partition.datasets.parallel import num_threads, thread_map
from conveyor.partition.datasets.synthetic import CLASS_EXPONENT, HOMOPHILY, _ranks
from conveyor.partition.graph import Graph
from conveyor.partition.mapped import MappedWriter

PAPERS_NODES, PAPERS_EDGES = 111_059_956, 1_615_685_872
SPLIT_SIZES = {"train": 1_207_179, "val": 125_265, "test": 214_338}  # papers100M's, at scale 1
NUM_FEATURES, NUM_CLASSES = 128, 172
BLOCK = 1 << 14  # destination nodes drawn from one generator (part of the model: fixed)
CHUNK_BLOCKS = 4  # blocks a thread takes at once (any value gives the same graph)
DEGREE_TAIL, DEGREE_CAP = 2.0, 20  # Lomax tail index; in-degrees at most num_nodes / DEGREE_CAP
NOISE = 5.0
EXACT_ROUNDS = 8  # redraw rounds by weight before repeats are redrawn uniformly
NODE_BYTES = 28  # memory a node takes while building (classes, ranks, degrees, indptr, splits)
CLASSES, PERMUTATION, DEGREES, SPLITS, CENTROIDS, EDGES, FEATURES, YEARS = range(8)  # generator streams
VERSION = "synthetic_papers-v1"  # change whenever the model above changes: old builds are then rebuilt


def in_degree_tail(mean: float, cap: int) -> float:
    """The Lomax scale lam for which E[min(floor(X), cap)] = mean (bisection; the sum of
    P(X >= k) exact to k = 10^5, then its integral)."""
    head = np.arange(1, min(cap, 100_000) + 1, dtype=np.float64)

    def expected(lam: float) -> float:
        tail = lam / (DEGREE_TAIL - 1) * ((1 + (head[-1] + 0.5) / lam) ** (1 - DEGREE_TAIL)
                                         - (1 + (cap + 0.5) / lam) ** (1 - DEGREE_TAIL))
        return float(((1 + head / lam) ** -DEGREE_TAIL).sum()) + max(tail, 0.0)

    lo, hi = 1e-3, 1e3
    for _ in range(60):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if expected(mid) < mean else (lo, mid)
    return lo


def sizes(scale: float) -> dict:
    """Nodes, expected edges and split sizes at `scale`."""
    n = round(PAPERS_NODES * scale)
    return {"nodes": n, "edges": round(PAPERS_EDGES * scale),
            **{split: max(1, round(size * scale)) for split, size in SPLIT_SIZES.items()}}


class PapersModel:
    """The node-level draws every block reads (classes, source ranks, in-degrees, splits), made
    once in memory (~NODE_BYTES a node), and the blocks' own draws (`block_*`)."""

    def __init__(self, scale: float, seed: int):
        size = sizes(scale)
        self.n, self.seed = n, seed = size["nodes"], seed
        self.starts = np.arange(0, n, BLOCK)
        class_p = (np.arange(NUM_CLASSES) + 1.0) ** -CLASS_EXPONENT
        self.class_p = class_p / class_p.sum()
        self.node_class = np.concatenate([self.rng(CLASSES, b).choice(NUM_CLASSES, self.block_size(b), p=self.class_p)
                                          .astype(np.int16) for b in range(len(self.starts))])
        self.node_of_rank = np.random.default_rng([seed, PERMUTATION]).permutation(n).astype(np.int32)
        rank_class = self.node_class[self.node_of_rank]
        self.by_class = np.argsort(rank_class, kind="stable").astype(np.int32)  # ranks grouped by class
        self.class_size = np.bincount(rank_class, minlength=NUM_CLASSES)
        self.class_begin = np.cumsum(self.class_size) - self.class_size
        del rank_class
        self.degree_cap = max(1, n // DEGREE_CAP)
        self.lam = in_degree_tail(PAPERS_EDGES / PAPERS_NODES, self.degree_cap)
        degrees = np.concatenate([self.block_degrees(b) for b in range(len(self.starts))])
        self.indptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(degrees, out=self.indptr[1:])
        self.split = np.zeros(n, dtype=np.int8)  # 0 unlabelled, 1 train, 2 val, 3 test
        chosen = np.random.default_rng([seed, SPLITS]).choice(n, size["train"] + size["val"] + size["test"],
                                                              replace=False)
        self.split[chosen] = np.repeat([1, 2, 3], [size["train"], size["val"], size["test"]])
        self.centroids = np.random.default_rng([seed, CENTROIDS]).standard_normal(
            (NUM_CLASSES, NUM_FEATURES), dtype=np.float32)

    @property
    def num_edges(self) -> int:
        return int(self.indptr[-1])

    def rng(self, stream: int, block: int) -> np.random.Generator:
        return np.random.default_rng([self.seed, stream, block])

    def block_size(self, block: int) -> int:
        return min(BLOCK, self.n - int(self.starts[block]))

    def block_degrees(self, block: int) -> np.ndarray:
        """Lomax in-degrees of the block's nodes, floored and capped (int32)."""
        u = self.rng(DEGREES, block).random(self.block_size(block))
        x = self.lam * ((1.0 - u) ** (-1.0 / DEGREE_TAIL) - 1.0)
        return np.minimum(np.floor(x), self.degree_cap).astype(np.int32)

    def draw_sources(self, rng: np.random.Generator, dst: np.ndarray, uniform: bool) -> np.ndarray:
        """A source for each destination in `dst`: by weight, from its class with probability
        HOMOPHILY (as synthetic.py), or uniformly."""
        if uniform:
            return rng.integers(0, self.n, dst.size)
        same = rng.random(dst.size) < HOMOPHILY
        rank = _ranks(rng.random(dst.size), self.n)
        c = self.node_class[dst[same]]
        rank[same] = self.by_class[self.class_begin[c] + rank[same] * self.class_size[c] // self.n]
        return self.node_of_rank[rank].astype(np.int64)

    def block_sources(self, block: int) -> np.ndarray:
        """The block's in-neighbours in CSC order (by destination, then source), int32: each
        destination exactly its in-degree, distinct, no self loop. Repeats and self loops are
        redrawn: each round draws only those, checked against the edges kept so far."""
        lo, rng = int(self.starts[block]), self.rng(EDGES, block)
        hi = lo + self.block_size(block)
        degrees = np.diff(self.indptr[lo:hi + 1])
        pending = np.repeat(np.arange(lo, hi), degrees)
        kept, rounds = np.empty(0, dtype=np.int64), 0
        while pending.size:  # ends: in-degrees are capped well below the node count
            src = self.draw_sources(rng, pending, uniform=rounds >= EXACT_ROUNDS)
            loops = src == pending
            fresh = np.sort(((pending - lo) * self.n + src)[~loops])  # keys: by destination, then source
            bad = np.zeros(fresh.size, dtype=bool)
            bad[1:] = fresh[1:] == fresh[:-1]
            if kept.size:
                bad |= kept[np.minimum(np.searchsorted(kept, fresh), kept.size - 1)] == fresh
            kept = np.sort(np.concatenate([kept, fresh[~bad]]), kind="stable")  # two sorted runs: a merge
            pending, rounds = np.concatenate([pending[loops], fresh[bad] // self.n + lo]), rounds + 1
        return (kept - np.repeat(np.arange(hi - lo) * self.n, degrees)).astype(np.int32)

    def block_rows(self, block: int):
        """The block's features (float16), labels (-1 unlabelled) and years."""
        lo = int(self.starts[block])
        rows = slice(lo, lo + self.block_size(block))
        c, split = self.node_class[rows], self.split[rows]
        x = self.rng(FEATURES, block).standard_normal((c.size, NUM_FEATURES), dtype=np.float32)
        x *= NOISE
        x += self.centroids[c]
        y = np.where(split > 0, c, -1).astype(np.int64)
        year = (2020 - np.minimum(self.rng(YEARS, block).exponential(8.0, c.size), 70)).astype(np.int16)
        year[split == 1] = np.minimum(year[split == 1], 2017)
        year[split == 2], year[split == 3] = 2018, 2019
        return x.astype(np.float16), y, year


def write_graph(writer: MappedWriter, model: PapersModel, chunk_blocks: int = CHUNK_BLOCKS) -> dict:
    """Every file of the graph, streaming (blocks in threads, `chunk_blocks` at a time); returns
    meta.json's entries."""
    n = model.n
    writer.save("indptr", model.indptr)
    writer.create("indices", (model.num_edges,), np.int32)
    writer.create("x", (n, NUM_FEATURES), np.float16)
    writer.create("y", (n,), np.int64)
    writer.create("node.year", (n,), np.int16)
    for code, split in enumerate(("train", "val", "test"), start=1):
        writer.save(f"{split}_idx", np.flatnonzero(model.split == code).astype(np.int64))
    blocks = range(len(model.starts))
    chunks = [blocks[i:i + chunk_blocks] for i in range(0, len(blocks), chunk_blocks)]
    with progress(n, "synthetic_papers") as bar:
        def chunk_work(chunk):
            for b in chunk:
                lo = int(model.starts[b])
                writer.put("indices", int(model.indptr[lo]), model.block_sources(b))
                x, y, year = model.block_rows(b)
                writer.put("x", lo, x)
                writer.put("y", lo, y)
                writer.put("node.year", lo, year)
                bar.update(model.block_size(b))
        thread_map(chunk_work, chunks)
    return {"kind": "Graph", "name": "synthetic_papers", "num_nodes": n, "num_edges": model.num_edges,
            "num_classes": NUM_CLASSES}


def build_bytes(scale: float) -> dict:
    """What building at `scale` takes: memory (the node-level draws, a block of work per thread)
    and disk (every file)."""
    size = sizes(scale)
    n, edges, labelled = size["nodes"], size["edges"], size["train"] + size["val"] + size["test"]
    per_block = BLOCK * (NUM_FEATURES * 6 + 40 * edges / max(n, 1))  # float32 rows, float16 copy; keys, sorts
    memory = {"for the node-level draws": NODE_BYTES * n + 8 * n,  # + the permutation's int64 moment
              "for the blocks in work": num_threads() * per_block + 32 * 2**20}  # a thread works a block at a time
    disk = 4 * edges + 8 * (n + 1) + 2 * NUM_FEATURES * n + 8 * n + 2 * n + 8 * labelled
    return {"memory": memory, "disk": int(disk * 1.02)}  # the drawn edge count varies by ~0.1%


def load_synthetic_papers(root: str | Path, scale: float = 0.01, seed: int = 0) -> Graph:
    """The graph for (scale, seed), built once into `<root>/synthetic_papers/` and mapped after."""
    scale, seed = float(scale), int(seed)
    if not 0 < scale <= 4:
        raise ConveyorError(f"synthetic_papers scale must be in (0, 4], got {scale}; 1.0 is papers100M-sized "
                            f"(111M nodes, 1.6B edges, ~36 GB on disk).")
    if sizes(scale)["nodes"] < 10 * NUM_CLASSES:
        raise ConveyorError(f"synthetic_papers scale={scale} gives too few nodes for {NUM_CLASSES} classes; "
                            f"use scale >= {math.ceil(10 * NUM_CLASSES / PAPERS_NODES * 1e5) / 1e5:g}.")
    folder = Path(root) / "synthetic_papers" / f"scale{scale}_seed{seed}"
    return cached_mapped(folder, lambda writer: build(writer, scale, seed, Path(root)), stamp=VERSION)


def build(writer: MappedWriter, scale: float, seed: int, root: Path, chunk_blocks: int = CHUNK_BLOCKS) -> dict:
    """Check the machine's memory and the data root's disk, then write the graph."""
    need, what = build_bytes(scale), f"building synthetic_papers at scale {scale:g}"
    check_disk(root, need["disk"], what, "Lower data.scale, free disk space, or point data.root at a larger disk.")
    check_memory(what, need["memory"], "cpu", "Lower data.scale, or build on a machine with more memory.")
    return write_graph(writer, PapersModel(scale, seed), chunk_blocks)
