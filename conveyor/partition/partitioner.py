"""Self-reliant partitions for data-parallel training (PaGraph §3.2): one `Part` per rank.

Each rank owns a share of the training nodes (counts differ by at most one, so every rank runs the
same number of batches) and of the validation and test nodes (each owned by exactly one part),
and its part holds their whole L-hop in-neighbourhood (see `expansion.py` for the exact rule), so
a rank samples from its own part exactly as it would from the full graph and never reads another.

How training, validation and test nodes are assigned to parts: assignment.py (`method`:
`pagraph`, `random`, `metis`). This module plans, builds, reports and stores the parts.
Local ids follow global ids (`Part.node_ids` is ascending), so a local in-neighbour list is the
global one relabelled in the same order: the `bsp` sampler, seeded alike, draws the same batch.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import torch
from torch import Tensor

from conveyor.core.errors import ConveyorError
from conveyor.partition.assignment import assign_metis, assign_nearest, assign_pagraph, membership, round_robin
from conveyor.partition.digest import contents_digest, same_contents
from conveyor.partition.expansion import Adjacency, closure_subgraph, hop_distances
from conveyor.partition.graph import Graph
from conveyor.partition.store import Part, load_parts, read_header, save_parts, sweep_killed_saves

METHODS = ("pagraph", "random", "metis")
SPLITS = ("train", "val", "test")


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
    # The cache's degree order, counted a chunk at a time (Graph.out_degree): no int64 copy of indices.
    ranking = torch.sort(local.out_degree(), descending=True, stable=True).indices
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
            "graph_edges": graph.num_edges, "fingerprint": contents_digest(graph)}


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


def matches(header: Optional[Dict], wanted: Dict, graph: Graph) -> bool:
    """Whether the partitioning `header` describes is `wanted`'s, made from `graph` (its digest
    in whichever form it was recorded: partition/digest.py)."""
    return (header is not None and same_contents(graph, str(header.get("fingerprint")), wanted["fingerprint"])
            and all(header.get(k) == wanted[k] for k in ("num_parts", "num_hops", "method", "seed", "splits")))


def ensure_partitioned(graph: Graph, num_parts: int, num_hops: int, method: str, directory,
                       seed: int = 0, splits: Sequence[str] = SPLITS,
                       force: bool = False) -> Tuple[Dict, bool]:
    """Partition into `directory` unless it already holds parts made from this graph (same
    fingerprint) with these settings (and not `force`). Returns (report, reused)."""
    if directory is None:
        raise ConveyorError("partitions need a directory to be kept in.")
    check_request(graph, num_parts, num_hops, method, splits)
    wanted = partition_info(graph, num_parts, num_hops, method, seed, splits)
    sweep_killed_saves(directory)  # here too: a partitioning that is reused is never saved again
    header = read_header(directory)
    if not force and matches(header, wanted, graph):
        return partition_report(header["parts"]), True
    return partition_to_disk(graph, num_parts, num_hops, method, directory, seed, splits,
                             info=wanted), False


def load_or_partition(graph: Graph, num_parts: int, num_hops: int, method: str = "pagraph",
                      directory=None, seed: int = 0, splits: Sequence[str] = SPLITS) -> List[Part]:
    """`ensure_partitioned`, then the parts, memory-mapped."""
    ensure_partitioned(graph, num_parts, num_hops, method, directory, seed, splits)
    return load_parts(directory)
