"""Synthetic graphs shaped like ogbn-products, of any size, deterministic by (scale, seed).

`scale=1.0` has products' sizes: 2,449,029 nodes, 61,859,140 undirected edges (123,718,280
directed), 100 features, 47 classes, and its split proportions (8.03% train, 1.61% val, the rest
test). Smaller scales keep the proportions and the mean degree (~50.5).

The model, all vectorised numpy:
- classes: imbalanced like products, P(class c) ~ (c + 1)^-1.2 (largest ~30%, smallest ~0.3%);
- edges: Chung-Lu with power-law weights w_r ~ (r + 31)^-0.6 by rank r, ranks given to the nodes
  in random order, so the expected degree of a node is proportional to its weight. At scale 1
  (seed 0) the in-degree has mean 50.5, median 32, p99 323 and max 18,060, with 34 hubs above
  10,000 neighbours (products: mean 50.5, max 17,481). With probability `HOMOPHILY` an edge's
  second endpoint is drawn from the first one's class (by weight), otherwise from all nodes: a
  planted partition, so ~80% of the edges join nodes of one class;
- features: the class centroid plus Gaussian noise strong enough that a node's own features
  classify it only moderately (an MLP: ~45% at scale 0.01), while the mean over its (mostly
  same-class) neighbours is far cleaner: neighbourhood aggregation (SAGE) clearly beats an MLP,
  as on products.
Duplicate edges and self loops are dropped and resampled until the undirected edge count is exact.

The random numbers are drawn in one fixed order from one generator, so the graph depends on
(scale, seed) only; the work on them (transforms, sorts, the CSC layout: most of the time at
scale 1) runs on every core in threads (numpy releases the GIL), with results identical to the
single-threaded computation.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch

from conveyor.core.errors import ConveyorError
from conveyor.core.memory import check_memory
from conveyor.partition.datasets.common import cached, finish
from conveyor.partition.datasets.parallel import merge_sorted, num_threads, thread_map
from conveyor.partition.graph import Graph

PRODUCTS_NODES, PRODUCTS_EDGES = 2_449_029, 61_859_140  # undirected edges
TRAIN_FRACTION, VAL_FRACTION = 196_615 / PRODUCTS_NODES, 39_323 / PRODUCTS_NODES
WEIGHT_EXPONENT, WEIGHT_OFFSET = 0.6, 31.0  # degree tail and hub size (see the module docstring)
CLASS_EXPONENT = 1.2
HOMOPHILY = 0.8
NOISE = 5.0  # feature noise per dimension; class centroids are N(0, 1) per dimension
CHUNK = 1 << 22  # edges sampled per step, to bound memory at scale 1
EDGE_PHASE = 6  # the edge keys' peak, in copies of one int64 per undirected edge (6.5 measured at scale 1)
VERSION = "synthetic-v2"  # change whenever the model above changes: old caches are then rebuilt


def _ranks(uniform: np.ndarray, n: int) -> np.ndarray:
    """Ranks in 0..n-1 with P(r) ~ (r + WEIGHT_OFFSET)^-WEIGHT_EXPONENT, from uniform draws.

    The inverse CDF of the continuous power law, floored: O(1) per draw, where a binary search
    over the cumulative weights of 2.4M nodes would cost a cache miss per step.
    """
    beta = 1.0 - WEIGHT_EXPONENT
    lo, hi = WEIGHT_OFFSET ** beta, (n + WEIGHT_OFFSET) ** beta
    ranks = (lo + uniform * (hi - lo)) ** (1.0 / beta) - WEIGHT_OFFSET
    return np.clip(ranks, 0, n - 1).astype(np.int64)


def _edges(rng: np.random.Generator, rank_y: np.ndarray, node_of_rank: np.ndarray,
           num_edges: int) -> np.ndarray:
    """`num_edges` distinct undirected edges (no self loops) as sorted keys `u * n + v`, u < v.

    Chung-Lu in rank space: an edge joins a rank drawn by weight to either another rank drawn by
    weight or, with probability HOMOPHILY, a member of the first one's class drawn by weight.
    This thread draws each chunk's uniforms in order; the threads turn them into sorted keys.
    """
    n = len(rank_y)
    by_class = np.argsort(rank_y, kind="stable")  # ranks grouped by class, ascending inside one
    size = np.bincount(rank_y)
    begin = np.cumsum(size) - size

    def chunk_keys(draws):
        u_draw, v_any_draw, v_same_draw, coin = draws
        u, v_any = _ranks(u_draw, n), _ranks(v_any_draw, n)
        # Classes are independent of rank, so the k-th member of class c has rank ~k*n/size[c]:
        # a rank drawn by weight over all nodes, scaled by size[c]/n, picks a member by weight.
        c = rank_y[u]
        v_same = by_class[begin[c] + _ranks(v_same_draw, n) * size[c] // n]
        v = np.where(coin < HOMOPHILY, v_same, v_any)
        a, b = node_of_rank[u], node_of_rank[v]
        a, b = np.minimum(a, b), np.maximum(a, b)
        keys = (a * n + b)[a != b]
        keys.sort()
        return keys

    keys = np.empty(0, dtype=np.int64)
    while len(keys) < num_edges:  # each round draws what duplicates and self loops cost the last
        want = int((num_edges - len(keys)) * 1.05) + 16
        draws = ([rng.random(m) for _ in range(4)]  # u, v_any, v_same, coin: the serial order
                 for m in (min(CHUNK, want - start) for start in range(0, want, CHUNK)))
        keys = merge_sorted([keys, *thread_map(chunk_keys, draws)], unique=True)
    drop = rng.choice(len(keys), len(keys) - num_edges, replace=False)  # trim the overshoot
    return np.delete(keys, drop)


def _csc(keys: np.ndarray, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Both directions of each undirected edge key, in CSC form (in-neighbours sorted by id)."""
    def reversed_keys(part):  # keys of (dst, src) for (src, dst): (b <- a) for (a <- b)
        a, b = np.divmod(part, n)
        rev = b * n + a
        rev.sort()
        return rev

    directed = merge_sorted([keys, *thread_map(reversed_keys, _slices(keys))])
    starts = np.arange(n + 1, dtype=np.int64) * n
    indptr = np.concatenate(thread_map(lambda s: np.searchsorted(directed, s), _slices(starts)))
    indices = np.concatenate(thread_map(lambda d: (d % n).astype(np.int32), _slices(directed)))
    return torch.from_numpy(indptr.astype(np.int64)), torch.from_numpy(indices)


def _slices(array: np.ndarray) -> list[np.ndarray]:
    """`array` cut into one view per thread."""
    return np.array_split(array, num_threads())


def generator_bytes(n: int, num_edges: int, num_features: int, num_classes: int) -> dict:
    """The memory generating takes at least, by phase: drawing the edges (their sorted keys, the
    merge, both directions: EDGE_PHASE int64 copies an edge) and then the graph itself (the
    features, the CSC, labels and splits; the class centroids)."""
    graph = 4 * n * num_features + 4 * 2 * num_edges + 8 * 4 * n + 4 * num_classes * (num_features + 4)
    return {"for drawing its edges": 8 * EDGE_PHASE * num_edges, "for the graph itself": graph}


def check_generator_memory(n: int, num_edges: int, num_features: int, num_classes: int) -> None:
    """Refuse, before anything is allocated, a graph the machine cannot hold (the phases follow
    each other: the larger counts)."""
    phases = generator_bytes(n, num_edges, num_features, num_classes)
    largest = max(phases, key=phases.get)
    check_memory(f"the synthetic graph of {n:,} nodes, {num_edges:,} edges, {num_features:,} features and "
                 f"{num_classes:,} classes", {largest: phases[largest]}, "cpu",
                 "Lower data.scale or data.num_features (or data.num_classes).")


def generate(scale: float = 0.01, seed: int = 0, num_features: int = 100,
             num_classes: int = 47) -> Graph:
    """Build the graph in memory (see `load_synthetic` for the cached version)."""
    n = round(PRODUCTS_NODES * scale)
    num_edges = round(PRODUCTS_EDGES * scale)
    check_generator_memory(n, num_edges, num_features, num_classes)
    rng = np.random.default_rng(seed)

    class_p = (np.arange(num_classes) + 1.0) ** -CLASS_EXPONENT
    rank_y = rng.choice(num_classes, size=n, p=class_p / class_p.sum())  # the class of each rank
    node_of_rank = rng.permutation(n)  # hubs get random ids
    y = np.empty(n, dtype=np.int64)
    y[node_of_rank] = rank_y
    indptr, indices = _csc(_edges(rng, rank_y, node_of_rank, num_edges), n)

    centroids = rng.standard_normal((num_classes, num_features), dtype=np.float32)
    x = rng.standard_normal((n, num_features), dtype=np.float32)

    def add_signal(rows: slice):  # in place, one block of rows per thread
        x[rows] *= NOISE
        x[rows] += centroids[y[rows]]

    cuts = np.linspace(0, n, num_threads() + 1).astype(np.int64)
    thread_map(add_signal, [slice(lo, hi) for lo, hi in zip(cuts[:-1], cuts[1:])])

    order = rng.permutation(n)
    n_train, n_val = round(n * TRAIN_FRACTION), round(n * VAL_FRACTION)
    train, val, test = np.split(order, [n_train, n_train + n_val])
    graph = Graph(indptr=indptr, indices=indices, x=torch.from_numpy(x), y=torch.from_numpy(y),
                  train_idx=torch.from_numpy(np.sort(train)), val_idx=torch.from_numpy(np.sort(val)),
                  test_idx=torch.from_numpy(np.sort(test)))
    return finish(graph, "synthetic", num_classes)


def load_synthetic(root: str | Path, scale: float = 0.01, seed: int = 0, num_features: int = 100,
                   num_classes: int = 47) -> Graph:
    """The graph for (scale, seed), generated once into `<root>/synthetic/` and memory-mapped after."""
    scale, seed = float(scale), int(seed)
    num_features, num_classes = int(num_features), int(num_classes)
    n = round(PRODUCTS_NODES * scale)
    if not 0 < scale <= 64:
        raise ConveyorError(f"synthetic scale must be in (0, 64], got {scale}; 1.0 is products-sized.")
    if num_features < 1 or num_classes < 2:
        raise ConveyorError(f"synthetic needs num_features >= 1 and num_classes >= 2, got "
                            f"{num_features} and {num_classes}.")
    if n < 10 * num_classes:
        least = math.ceil(10 * num_classes / PRODUCTS_NODES * 1e5) / 1e5
        raise ConveyorError(f"synthetic scale={scale} gives only {n} nodes, too few for "
                            f"{num_classes} classes; use scale >= {least:g}.")
    folder = check_synthetic_room(root, scale, seed, num_features, num_classes)
    return cached(folder, lambda: generate(scale, seed, num_features, num_classes), stamp=VERSION)


def check_synthetic_room(root: str | Path, scale: float, seed: int, num_features: int, num_classes: int) -> Path:
    """The graph's cache folder, once the machine was found to hold what generating it takes
    (when it is not cached yet), before any folder is made for it (no .staging is left)."""
    name = f"scale{float(scale)}_seed{int(seed)}"
    if (num_features, num_classes) != (100, 47):
        name += f"_f{num_features}_c{num_classes}"
    folder = Path(root) / "synthetic" / name
    if not folder.is_dir():
        check_generator_memory(round(PRODUCTS_NODES * scale), round(PRODUCTS_EDGES * scale), num_features,
                               num_classes)
    return folder


def check_settings(data) -> None:
    """Before any work (its registry entry's check): a graph of these sizes is generated, refused if it cannot fit."""
    check_synthetic_room(data.root_folder(), data.scale, data.seed, data.num_features, data.num_classes)
