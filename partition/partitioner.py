"""Self-reliant partitions for data-parallel training (PaGraph §3.2): one `Part` per rank.

Each rank owns a share of the training nodes (counts differ by at most one, so every rank runs the
same number of batches) and of the validation and test nodes (each owned by exactly one part),
and its part holds their whole L-hop in-neighbourhood (see `expansion.py` for the exact rule), so
a rank samples from its own part exactly as it would from the full graph and never reads another.

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
Local ids follow global ids (`Part.node_ids` is ascending), so a local in-neighbour list is the
global one relabelled in the same order: the `bsp` sampler, seeded alike, draws the same batch.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import torch
from torch import Tensor

from .errors import ConveyorError
from .expansion import Adjacency, closure_subgraph, hop_distances, in_neighbour_chunks
from .graph import Graph
from .store import Part, graph_fingerprint, load_parts, read_header, save_parts

METHODS = ("pagraph", "random", "metis")
SPLITS = ("train", "val", "test")
PASSES = 32  # passes over the edges that pagraph's scores may take (sets the chunk size)


@dataclass
class Plan:
    """Which part owns which node, and each part's hop distances from what it owns."""
    owned: Dict[str, List[Tensor]]  # split -> per part, the owned global ids, ascending
    dist: Tensor  # [K, N] int8: hops from each node to the part's owned nodes (L + 1: farther)
    num_hops: int
    train_closure: List[int]  # nodes within L hops of each part's owned training nodes
    seconds: Dict[str, float]


# -- input checks ----------------------------------------------------------------------------------

def check_request(graph: Graph, num_parts, num_hops, method: str, splits: Sequence[str]) -> Tensor:
    """Validate the arguments; return the training nodes."""
    if method not in METHODS:
        raise ConveyorError(f"unknown partition method {method!r}; choose one of "
                            f"{', '.join(METHODS)} (e.g. partition=pagraph).")
    if isinstance(num_parts, bool) or not isinstance(num_parts, int) or num_parts < 1:
        raise ConveyorError(f"num_parts must be an integer >= 1 (one part per data-parallel rank), "
                            f"got {num_parts!r}.")
    if isinstance(num_hops, bool) or not isinstance(num_hops, int) or not 1 <= num_hops <= 100:
        raise ConveyorError(f"num_hops must be an integer >= 1, the number of sampled hops "
                            f"(len(sampler.fanouts)), got {num_hops!r}.")
    bad = sorted(set(splits) - set(SPLITS))
    if bad or "train" not in splits:
        raise ConveyorError(f"splits must include 'train' and may add 'val' and 'test', got "
                            f"{list(splits)}.")
    train = graph.train_idx
    if train is None or train.numel() == 0:
        raise ConveyorError(f"graph {graph.name!r} has no training nodes (train_idx); partitions "
                            f"balance training nodes, so set graph.train_idx first.")
    graph.validate()
    train = train.long()
    if torch.unique(train).numel() != train.numel():
        raise ConveyorError("train_idx lists some nodes more than once; deduplicate it "
                            "(torch.unique) before partitioning.")
    if num_parts > train.numel():
        raise ConveyorError(f"cannot split {train.numel()} training nodes into {num_parts} parts: "
                            f"every rank needs at least one; use run.world_size <= {train.numel()}.")
    return train


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


# -- the plan and the parts ------------------------------------------------------------------------

def plan_partition(graph: Graph, num_parts: int, num_hops: int, method: str = "pagraph",
                   seed: int = 0, splits: Sequence[str] = SPLITS,
                   chunk_size: Optional[int] = None) -> Plan:
    """Decide who owns what (all splits) and each part's node set; builds no part yet."""
    train = check_request(graph, num_parts, num_hops, method, splits)
    generator = torch.Generator().manual_seed(int(seed))
    seconds = {}
    start = time.perf_counter()
    adjacency = Adjacency(graph)
    seconds["adjacency"] = time.perf_counter() - start

    start = time.perf_counter()
    if method == "pagraph":
        owner = assign_pagraph(graph, adjacency, train, num_parts, num_hops, generator, chunk_size)
    elif method == "random":
        owner = round_robin(train.numel(), num_parts, generator)
    else:
        owner = assign_metis(graph, train, num_parts, generator)
    owned = {"train": [train[owner == k].sort().values for k in range(num_parts)]}
    seconds["assign_train"] = time.perf_counter() - start

    # Validation and test nodes go where the training nodes' neighbourhoods already are.
    start = time.perf_counter()
    dist = hop_distances(adjacency, membership(graph.num_nodes, owned["train"]), num_hops)
    train_closure = (dist <= num_hops).sum(1).tolist()
    for split in ("val", "test"):
        idx = getattr(graph, f"{split}_idx")
        if split not in splits or idx is None or idx.numel() == 0:
            owned[split] = [torch.empty(0, dtype=torch.long) for _ in range(num_parts)]
            continue
        idx = torch.unique(idx.long())
        split_owner = assign_nearest(dist, idx, generator)
        owned[split] = [idx[split_owner == k] for k in range(num_parts)]
    seconds["assign_eval"] = time.perf_counter() - start

    start = time.perf_counter()
    everything = [torch.cat([owned[s][k] for s in SPLITS]) for k in range(num_parts)]
    dist = hop_distances(adjacency, membership(graph.num_nodes, everything), num_hops)
    seconds["expand"] = time.perf_counter() - start
    return Plan(owned, dist, num_hops, train_closure, seconds)


def build_part(graph: Graph, plan: Plan, rank: int, info: Optional[Dict] = None) -> Part:
    """Part `rank` of the plan: its local CSC graph, features, labels, owned splits, ranking."""
    node_ids, indptr, indices = closure_subgraph(graph, plan.dist[rank], plan.num_hops)
    to_local = lambda ids: torch.searchsorted(node_ids, ids)  # node_ids is ascending
    local = Graph(indptr=indptr, indices=indices,
                  x=None if graph.x is None else graph.x[node_ids],
                  y=None if graph.y is None else graph.y[node_ids],
                  train_idx=to_local(plan.owned["train"][rank]),
                  val_idx=to_local(plan.owned["val"][rank]),
                  test_idx=to_local(plan.owned["test"][rank]),
                  num_classes=graph.num_classes, name=f"{graph.name}-part{rank}")
    out_degree = torch.bincount(indices.long(), minlength=node_ids.numel())
    ranking = torch.sort(out_degree, descending=True, stable=True).indices
    info = dict(info or {}, rank=rank, nodes=node_ids.numel(), edges=int(indices.numel()),
                train=int(local.train_idx.numel()), val=int(local.val_idx.numel()),
                test=int(local.test_idx.numel()), train_closure_nodes=plan.train_closure[rank],
                share=node_ids.numel() / max(graph.num_nodes, 1))
    return Part(local, node_ids, ranking, info)


def partition_info(graph: Graph, num_parts: int, num_hops: int, method: str, seed: int,
                   splits: Sequence[str]) -> Dict:
    """What identifies a partitioning: saved with it, compared by `load_or_partition`."""
    return {"num_parts": num_parts, "num_hops": num_hops, "method": method, "seed": int(seed),
            "splits": sorted(splits), "graph": graph.name, "graph_nodes": graph.num_nodes,
            "graph_edges": graph.num_edges, "fingerprint": graph_fingerprint(graph)}


def partition_graph(graph: Graph, num_parts: int, num_hops: int, method: str = "pagraph",
                    seed: int = 0, splits: Sequence[str] = SPLITS,
                    chunk_size: Optional[int] = None) -> List[Part]:
    """One self-reliant `Part` per data-parallel rank (see the module docstring).

    `splits`: which splits are distributed with their L-hop neighbourhoods (train always; leave
    out "test" to keep the parts small when the test set is most of the graph, as on products,
    and evaluate it on the full graph instead). `chunk_size`: pagraph's largest stream chunk
    (default: as many chunks as a fixed compute budget allows, at most 1024).
    """
    plan = plan_partition(graph, num_parts, num_hops, method, seed, splits, chunk_size)
    info = partition_info(graph, num_parts, num_hops, method, seed, splits)
    info["seconds"] = plan.seconds
    return [build_part(graph, plan, k, info) for k in range(num_parts)]


def partition_report(parts) -> Dict:
    """Per part: nodes, edges, owned counts, share of the graph; overall: replication factors.
    `parts`: Parts, or their `info` dicts (as saved in partition.json)."""
    infos = [p.info if isinstance(p, Part) else p for p in parts]
    n, e = infos[0]["graph_nodes"], infos[0]["graph_edges"]
    keys = ("rank", "nodes", "edges", "train", "val", "test", "train_closure_nodes", "share")
    rows = [{k: info[k] for k in keys} for info in infos]
    return {
        "graph": infos[0]["graph"], "graph_nodes": n, "graph_edges": e,
        "num_parts": len(rows), "num_hops": infos[0]["num_hops"], "method": infos[0]["method"],
        "replication_factor": sum(r["nodes"] for r in rows) / max(n, 1),
        "edge_replication": sum(r["edges"] for r in rows) / max(e, 1),
        "train_replication": sum(r["train_closure_nodes"] for r in rows) / max(n, 1),
        "seconds": dict(infos[0].get("seconds") or {}),
        "parts": rows,
    }


def format_report(report: Dict) -> str:
    """The report as a plain-text table."""
    head = (f"{report['graph']}: {report['graph_nodes']:,} nodes, {report['graph_edges']:,} edges -> "
            f"{report['num_parts']} parts, method={report['method']}, num_hops={report['num_hops']}")
    cols = ("rank", "nodes", "edges", "train", "val", "test", "train_closure_nodes", "share")
    rows = [[f"{r[c]:.3f}" if c == "share" else f"{r[c]:,}" for c in cols] for r in report["parts"]]
    widths = [max(len(c), *(len(row[i]) for row in rows)) for i, c in enumerate(cols)]
    lines = [head, "  ".join(c.rjust(w) for c, w in zip(cols, widths))]
    lines += ["  ".join(v.rjust(w) for v, w in zip(row, widths)) for row in rows]
    lines.append(f"replication factor {report['replication_factor']:.3f} (nodes), "
                 f"{report['edge_replication']:.3f} (edges), {report['train_replication']:.3f} "
                 f"(nodes within num_hops of training nodes only)")
    if report.get("seconds"):
        lines.append("seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in report["seconds"].items()))
    return "\n".join(lines)


# -- on disk -----------------------------------------------------------------------------------------

def partition_to_disk(graph: Graph, num_parts: int, num_hops: int, method: str, directory,
                      seed: int = 0, splits: Sequence[str] = SPLITS,
                      chunk_size: Optional[int] = None, info: Optional[Dict] = None) -> Dict:
    """`partition_graph` straight into `directory`, one part in memory at a time; the report."""
    plan = plan_partition(graph, num_parts, num_hops, method, seed, splits, chunk_size)
    info = dict(info or partition_info(graph, num_parts, num_hops, method, seed, splits))
    info["seconds"] = plan.seconds
    start = time.perf_counter()
    header = save_parts((build_part(graph, plan, k, info) for k in range(num_parts)), directory)
    report = partition_report(header["parts"])
    report["seconds"]["build_and_save"] = time.perf_counter() - start
    return report


def matches(header: Optional[Dict], wanted: Dict) -> bool:
    return header is not None and all(header.get(k) == wanted[k] for k in
                                      ("fingerprint", "num_parts", "num_hops", "method", "seed",
                                       "splits"))


def ensure_partitioned(graph: Graph, num_parts: int, num_hops: int, method: str, directory,
                       seed: int = 0, splits: Sequence[str] = SPLITS,
                       force: bool = False) -> Tuple[Dict, bool]:
    """Partition into `directory` unless it already holds parts made from this graph (same
    fingerprint) with these settings (and not `force`). Returns (report, reused)."""
    if directory is None:
        raise ConveyorError("partitions need a directory to be kept in.")
    check_request(graph, num_parts, num_hops, method, splits)
    wanted = partition_info(graph, num_parts, num_hops, method, seed, splits)
    header = read_header(directory)
    if not force and matches(header, wanted):
        return partition_report(header["parts"]), True
    return partition_to_disk(graph, num_parts, num_hops, method, directory, seed, splits,
                             info=wanted), False


def load_or_partition(graph: Graph, num_parts: int, num_hops: int, method: str = "pagraph",
                      directory=None, seed: int = 0, splits: Sequence[str] = SPLITS) -> List[Part]:
    """`ensure_partitioned`, then the parts, memory-mapped."""
    ensure_partitioned(graph, num_parts, num_hops, method, directory, seed, splits)
    return load_parts(directory)
