"""A typed graph shaped like ogbn-mag, of any size, deterministic by (scale, seed): `data=synthetic_mag`.

Four node types and ogbn-mag's four relations, each with its reverse (`rev_<relation>`, as PyG's
`ToUndirected` names them), so every type receives messages:

    author -writes-> paper, paper -cites-> paper, paper -has_topic-> field_of_study,
    author -affiliated_with-> institution   (+ the four reverses: 8 relations)

`scale=1.0` has ogbn-mag's node and edge counts (736,389 papers, 1,134,649 authors, 8,740
institutions, 59,965 fields; 7,145,660 writes, 5,416,271 cites, 7,505,078 has_topic, 1,043,998
affiliated_with edges). Smaller scales keep the proportions.

The model, vectorised numpy, one generator drawn in a fixed order:
- a paper's class (its venue, the label) is drawn with imbalanced probabilities ~ (c + 1)^-1;
  every author, field and institution has a home class, drawn alike;
- every relation's endpoints are drawn by power-law popularity (Chung-Lu: weight ~ (rank +
  10)^-0.8 over the nodes of the type, ranks in random order), so in-degrees are skewed as in mag
  (a few prolific authors, hub fields, highly cited papers); with probability `HOMOPHILY` the
  popular end is drawn among the nodes whose class is the other end's, else among all; repeated
  edges are merged;
- features: each type its own width (papers `num_features`, authors 64, institutions 16, fields
  32; ogbn-mag's featureless types get such features from metapath2vec in PyG's examples), a
  class centroid plus Gaussian noise strong enough that a paper's own features classify it only
  moderately (a linear classifier: ~1/3 of the test papers at scale 0.02), while its authors',
  topics' and citations' features, mostly of its class, carry much of the signal (the same
  classifier on the paper's and its in-neighbours' mean features per relation: ~2/3): a typed
  GNN clearly beats an MLP.
- split: 60% train, 15% val, 25% test of the papers (a larger test set than mag's 5.7%, so that
  accuracies compare within a point).
"""
from __future__ import annotations

from pathlib import Path
from typing import Dict

import numpy as np
import torch

from conveyor.core.errors import ConveyorError
from conveyor.core.memory import check_memory
from conveyor.partition.datasets.common import cached
from conveyor.partition.hetero import TypedGraph, typed_graph, with_target

MAG_NODES = {"paper": 736_389, "author": 1_134_649, "institution": 8_740, "field_of_study": 59_965}
MAG_EDGES = {("author", "writes", "paper"): 7_145_660, ("paper", "cites", "paper"): 5_416_271,
             ("paper", "has_topic", "field_of_study"): 7_505_078,
             ("author", "affiliated_with", "institution"): 1_043_998}
WIDTHS = {"author": 64, "institution": 16, "field_of_study": 32}  # papers: num_features
HOMOPHILY, NOISE, WEIGHT_EXPONENT, WEIGHT_OFFSET = 0.5, 12.0, 0.8, 10.0
SPLIT = (0.60, 0.15)  # train, val; the rest test
VERSION = "synthetic_mag-v2"  # change whenever the model above changes: old caches are then rebuilt


def popular(rng: np.random.Generator, size: int, draws: int) -> np.ndarray:
    """`draws` node indices in 0..size-1 by power-law popularity (ranks in random order: a fixed
    permutation per call site, drawn first)."""
    order = rng.permutation(size)
    weight = (np.arange(size) + WEIGHT_OFFSET) ** -WEIGHT_EXPONENT
    return order[np.minimum(np.searchsorted(np.cumsum(weight) / weight.sum(), rng.random(draws)), size - 1)]


def homophilous_ends(rng: np.random.Generator, classes: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """For each entry of `wanted` (a class), a node drawn by popularity among the nodes of that
    class with probability HOMOPHILY, else among all nodes (`classes`: each node's class)."""
    n, draws = classes.size, wanted.size
    anywhere = popular(rng, n, draws)
    by_class = np.argsort(classes, kind="stable")
    size = np.bincount(classes, minlength=int(wanted.max(initial=0)) + 1)
    begin = np.cumsum(size) - size
    pick = popular(rng, n, draws) * size[wanted] // max(n, 1)  # a rank within the class, by weight
    same = by_class[np.minimum(begin[wanted] + pick, n - 1)]
    has_class = size[wanted] > 0
    return np.where((rng.random(draws) < HOMOPHILY) & has_class, same, anywhere)


def relation_edges(rng, classes: Dict[str, np.ndarray], edge_type, count: int) -> np.ndarray:
    """`count` (or a few fewer: repeats merged) edges of `edge_type`: a source by popularity, a
    destination by popularity and, mostly, of the source's class."""
    src_type, _, dst_type = edge_type
    src = popular(rng, classes[src_type].size, count)
    dst = homophilous_ends(rng, classes[dst_type], classes[src_type][src])
    keys = np.unique(src * classes[dst_type].size + dst)
    return np.stack([keys // classes[dst_type].size, keys % classes[dst_type].size])


def features(rng, classes: np.ndarray, width: int, num_classes: int) -> torch.Tensor:
    centroids = rng.standard_normal((num_classes, width), dtype=np.float32)
    x = rng.standard_normal((classes.size, width), dtype=np.float32) * NOISE
    return torch.from_numpy(x + centroids[classes])


def check_mag_room(scale: float, num_features: int, num_classes: int) -> None:
    """Refuse, before anything is allocated, a graph the machine cannot hold while generating it:
    each type's float32 features three times over (drawn, noised, shifted by the centroids) and
    each relation's edges, forward and reverse, a few int64 copies each (drawn, keyed, unique)."""
    counts = {t: max(round(n * scale), num_classes) for t, n in MAG_NODES.items()}
    widths = {"paper": num_features, **WIDTHS}
    need = {"for the node features": 3 * 4 * sum(counts[t] * widths[t] for t in counts),
            "for the edges": 6 * 8 * 2 * sum(max(round(c * scale), 1) for c in MAG_EDGES.values())}
    check_memory(f"data=synthetic_mag at scale {scale:g} ({sum(counts.values()):,} nodes) with {num_features:,} "
                 f"paper features", need, "cpu", "Lower data.scale or data.num_features.")


def check_synthetic_mag_room(root, scale: float, seed: int, num_features: int, num_classes: int) -> Path:
    """The graph's cache folder, once the machine was found to hold what generating it takes
    (when it is not cached yet)."""
    name = f"scale{float(scale)}_seed{int(seed)}" + ("" if (num_features, num_classes) == (128, 20)
                                                     else f"_f{num_features}_c{num_classes}")
    folder = Path(root) / "synthetic_mag" / name
    if not folder.is_dir():
        check_mag_room(float(scale), int(num_features), int(num_classes))
    return folder


def generate(scale: float = 0.02, seed: int = 0, num_features: int = 128, num_classes: int = 20) -> TypedGraph:
    """Build the graph in memory (see `load_synthetic_mag` for the cached version)."""
    rng = np.random.default_rng(seed)
    counts = {t: max(round(n * scale), num_classes) for t, n in MAG_NODES.items()}
    class_p = 1.0 / (np.arange(num_classes) + 1.0)
    classes = {t: rng.choice(num_classes, size=n, p=class_p / class_p.sum()) for t, n in counts.items()}
    edges = {}
    for edge_type, count in MAG_EDGES.items():
        src_type, relation, dst_type = edge_type
        forward = relation_edges(rng, classes, (dst_type, relation, src_type), max(round(count * scale), 1))[::-1]
        edges[edge_type] = torch.from_numpy(np.ascontiguousarray(forward))
        edges[(dst_type, f"rev_{relation}", src_type)] = edges[edge_type].flip(0)
    widths = {"paper": num_features, **WIDTHS}
    x = {t: features(rng, classes[t], widths[t], num_classes) for t in counts}
    graph = typed_graph(counts, edges, x=x, name="synthetic_mag")
    order = rng.permutation(counts["paper"])
    cut = np.cumsum([round(counts["paper"] * f) for f in SPLIT])
    splits = dict(zip(("train", "val", "test"), (torch.from_numpy(np.sort(s)) for s in np.split(order, cut))))
    return with_target(graph, "paper", torch.from_numpy(classes["paper"]), num_classes, splits)


def load_synthetic_mag(root: str | Path, scale: float = 0.02, seed: int = 0, num_features: int = 128,
                       num_classes: int = 20) -> TypedGraph:
    """The graph for (scale, seed, ...), generated once into `<root>/synthetic_mag/` and
    memory-mapped after."""
    scale, seed, num_features, num_classes = float(scale), int(seed), int(num_features), int(num_classes)
    if not 0 < scale <= 4:
        raise ConveyorError(f"synthetic_mag scale must be in (0, 4], got {scale}; 1.0 is ogbn-mag-sized.")
    if num_features < 1 or num_classes < 2:
        raise ConveyorError(f"synthetic_mag needs num_features >= 1 and num_classes >= 2, got {num_features} and "
                            f"{num_classes}.")
    if round(MAG_NODES["paper"] * scale) < 10 * num_classes:
        raise ConveyorError(f"synthetic_mag scale={scale} gives too few papers for {num_classes} classes; use "
                            f"scale >= {10 * num_classes / MAG_NODES['paper']:.5f}.")
    folder = check_synthetic_mag_room(root, scale, seed, num_features, num_classes)
    return cached(folder, lambda: generate(scale, seed, num_features, num_classes),
                  stamp=VERSION)


def check_settings(data) -> None:
    """Before any work (its registry entry's check): a graph of these sizes is generated, refused if it cannot fit."""
    check_synthetic_mag_room(data.root_folder(), data.scale, data.seed, data.num_features, data.num_classes)
