"""The data a run trains on, as each checkpoint records it, so that a resumed run refuses other
data: a custom dataset replaced under the same path, a regenerated cache, another partitioning's
graph, one feature row changed. The config check (trainer/outputs/resume.py) sees only the
options; this sees the data.

A fingerprint is the whole graph's shapes (nodes, edges, feature width and dtype, classes) and a
digest of every row of every array the graph holds (`contents_digest`: the CSC, features, labels,
splits, edge ids and every node and edge attribute, each with its name, dtype and shape): streamed
through hashlib in chunks, so a memory-mapped graph is read a piece at a time and never copied, its
pieces hashed on every core (hashlib releases the GIL) and the pieces' digests hashed together. On
the products-scale graph (1.53 GB of arrays) it took 3.2 s on 2 cores under a load of 6, 2.5x the
sampled digest it replaced (`python -m benchmarks.fingerprint`). Its value starts with
`DIGEST_VERSION`: a checkpoint written before it (whose digest sampled 65,536 feature rows) resumes
on matching shapes, with a warning that its contents cannot be compared. Under DDP a rank holds
only its part, so the whole graph's shapes and digest come from the partitioning's header
(`partition.store.graph_fingerprint`, the digest the partitioning was checked with).
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch
from torch import Tensor

from conveyor.core import ConveyorError
from conveyor.partition import Graph

log = logging.getLogger("conveyor")

SHAPES = ("nodes", "edges", "feature_width", "feature_dtype", "classes")
DIGEST_VERSION = "rows-v1:"  # every row of every array (a digest without it sampled x's rows)
PIECE_BYTES = 1 << 26  # hashed by one thread: 64 MiB of rows. Part of the digest: a change needs a new version
CHUNK_BYTES = 1 << 22  # fed to hashlib at once (a contiguous copy only of a non-contiguous chunk)


def data_fingerprint(graph: Graph, whole: dict | None = None) -> dict:
    """`graph`'s fingerprint; `whole`: the partitioning's header (graph_nodes, graph_edges,
    fingerprint) when `graph` is one rank's part of it."""
    x = graph.x
    shapes = {"feature_width": None if x is None else int(x.size(1)),
              "feature_dtype": None if x is None else str(x.dtype).replace("torch.", ""),
              "classes": int(graph.num_classes)}
    if whole is not None:
        return {"nodes": int(whole["graph_nodes"]), "edges": int(whole["graph_edges"]), **shapes,
                "digest": whole["fingerprint"]}
    return {"nodes": graph.num_nodes, "edges": graph.num_edges, **shapes, "digest": contents_digest(graph)}


def contents_digest(graph: Graph, threads: int | None = None) -> str:
    """A digest of every row of every tensor of `graph` (with its name, dtype and shape), and of
    its node, edge and class counts. `threads`: how many pieces are hashed at once (default: the
    cores this process may use)."""
    tensors = sorted(graph.tensors().items())
    pieces = [(t, start, stop) for _, t in tensors for start, stop in row_pieces(t)]
    with ThreadPoolExecutor(threads or len(os.sched_getaffinity(0))) as pool:
        digests = iter(pool.map(lambda piece: piece_digest(*piece), pieces))
    whole = hashlib.blake2b(digest_size=16)
    whole.update(json.dumps([graph.num_nodes, graph.num_edges, graph.num_classes]).encode())
    for name, t in tensors:
        whole.update(f"{name} {str(t.dtype)} {list(t.shape)};".encode())
        for _ in row_pieces(t):
            whole.update(next(digests))
    return DIGEST_VERSION + whole.hexdigest()


def row_pieces(tensor: Tensor) -> list:
    """(start, stop) row ranges of about PIECE_BYTES each (one for an empty or 0-d tensor)."""
    rows = tensor.size(0) if tensor.dim() else 1
    step = max(1, PIECE_BYTES // max(_row_bytes(tensor), 1))
    return [(start, min(start + step, rows)) for start in range(0, rows, step)] or [(0, 0)]


def piece_digest(tensor: Tensor, start: int, stop: int) -> bytes:
    """The digest of rows start..stop of `tensor`, fed CHUNK_BYTES at a time."""
    digest = hashlib.blake2b(digest_size=16)
    tensor = tensor.reshape(1) if tensor.dim() == 0 else tensor
    step = max(1, CHUNK_BYTES // max(_row_bytes(tensor), 1))
    for first in range(start, stop, step):
        chunk = tensor[first:min(first + step, stop)].detach().cpu().contiguous()
        digest.update(chunk.reshape(-1).view(torch.uint8).numpy())
    return digest.digest()


def _row_bytes(tensor: Tensor) -> int:
    return (tensor[0].numel() if tensor.dim() and tensor.size(0) else 1) * tensor.element_size()


def check_same_data(saved: dict | None, now: dict, path: Path) -> None:
    """Refuse (ConveyorError) to resume the checkpoint at `path` on data other than its own;
    a checkpoint from before fingerprints, or before every row was hashed, resumes with a warning."""
    if not isinstance(saved, dict):
        log.warning("the checkpoint %s records no data fingerprint (written by an earlier conveyor): "
                    "cannot check that the data is the one it was trained on", path)
        return
    shapes = [f"{key} {saved.get(key)} in the checkpoint, {now[key]} now" for key in SHAPES
              if saved.get(key) != now[key]]
    digests = (str(saved.get("digest")), str(now["digest"]))
    comparable = digests[0].startswith(DIGEST_VERSION) == digests[1].startswith(DIGEST_VERSION)
    if not shapes and not comparable:
        log.warning("the checkpoint %s records its data's digest in an earlier form (a sample of the feature "
                    "rows): the shapes match, its contents cannot be compared", path)
        return
    if not shapes and digests[0] == digests[1]:
        return
    what = ("; ".join(shapes) if shapes else
            f"the same shapes, but other contents: digest {digests[0]} in the checkpoint, "
            f"{digests[1]} now (its edges, splits, labels or features changed)")
    raise ConveyorError(
        f"run.resume=true, but the checkpoint {path} was trained on other data than the data "
        f"loaded now ({what}). Resuming would continue that training on a different graph. Give "
        f"the data it was trained on (the same data.path or dataset files), or start a new run in "
        f"another run.out_dir.")
