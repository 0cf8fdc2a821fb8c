"""A digest of a graph's contents: every row of every array it holds (the CSC, features, labels,
splits, edge ids and every node and edge attribute, each with its name, dtype and shape), streamed
through hashlib in chunks, so a memory-mapped graph is read a piece at a time and never copied, its
pieces hashed on every core (hashlib releases the GIL) and the pieces' digests hashed together. On
the products-scale graph (1.53 GB of arrays) it takes 3.2 s on 2 cores under a load of 6, 2.5x
the sampled digest it replaced (`python -m benchmarks.fingerprint`).

It identifies a graph wherever one must be recognised: a dataset's cache (partition/datasets/
common.py), a partitioning (partition/partitioner.py) and a checkpoint's data (trainer/outputs/
fingerprint.py). Its value starts with `DIGEST_VERSION`; one recorded without it is the earlier
digest (`sampled_digest`: every edge, 65,536 evenly spaced feature rows), which `same_contents`
still reads, so caches and partitionings written before stay valid and are not rebuilt. A graph
that is exactly the files of a mapped build (a graph larger than memory, partition/mapped.py) is
identified by the build's own id instead (`MAPPED_VERSION`): a rebuild gets another id, and a run
does not read tens of GB to start.
"""
from __future__ import annotations

import hashlib
import json
import os
from concurrent.futures import ThreadPoolExecutor

import torch
from torch import Tensor

from conveyor.partition.graph import Graph
from conveyor.partition.mapped import build_of

DIGEST_VERSION = "rows-v1:"  # every row of every array (a digest without it sampled x's rows)
MAPPED_VERSION = "mapped-build-v1:"  # a mapped build's identity (its folder and build id), not its rows
PIECE_BYTES = 1 << 26  # hashed by one thread: 64 MiB of rows. Part of the digest: a change needs a new version
CHUNK_BYTES = 1 << 22  # fed to hashlib at once (a contiguous copy only of a non-contiguous chunk)
X_ROWS_SAMPLED = 1 << 16  # the earlier digest's feature rows (evenly spaced)


def same_contents(graph: Graph, recorded: str, digest: str | None = None) -> bool:
    """Whether `recorded` (a digest written with a cache, partitioning or checkpoint) is `graph`'s,
    in whichever form it was written; `digest`: graph's `contents_digest`, if already taken."""
    if recorded.startswith((DIGEST_VERSION, MAPPED_VERSION)):
        return (digest or contents_digest(graph)) == recorded
    return sampled_digest(graph) == recorded


def contents_digest(graph: Graph, threads: int | None = None) -> str:
    """A digest of every row of every tensor of `graph` (with its name, dtype and shape), and of
    its node, edge and class counts. `threads`: how many pieces are hashed at once (default: the
    cores this process may use). A graph that is exactly the files of a mapped build (mapped.py)
    is identified by that build instead: hashing tens of GB would take minutes."""
    build = build_of(graph.tensors())
    if build is not None:
        return MAPPED_VERSION + hashlib.blake2b(build.encode(), digest_size=16).hexdigest()
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



def sampled_digest(graph: Graph) -> str:
    """The earlier digest, read only to recognise what was recorded with it: the structure,
    splits and labels, and a sample of x's rows."""
    digest = hashlib.blake2b(digest_size=16)
    digest.update(json.dumps([graph.num_nodes, graph.num_edges, graph.num_classes]).encode())
    arrays = [graph.indptr, graph.indices, graph.train_idx, graph.val_idx, graph.test_idx, graph.y]
    if graph.x is not None:
        step = max(1, graph.x.size(0) // X_ROWS_SAMPLED)
        arrays += [torch.tensor(graph.x.shape), graph.x[::step]]
    for array in arrays:
        if array is None:
            digest.update(b"none")
            continue
        array = array.contiguous()
        digest.update(str(array.dtype).encode())
        digest.update(array.view(torch.uint8).numpy() if array.numel() else b"")
    return digest.hexdigest()
