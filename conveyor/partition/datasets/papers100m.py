"""`data=papers100m`: ogbn-papers100M converted from OGB's raw files, streaming, into the mapped layout.

OGB's files (ogb/nodeproppred/master.csv: binary, split "time"), under `<root>/ogbn_papers100M/`:
- `raw/data.npz`: `edge_index` [2, E] int64 (E = 1,615,685,872 citations), `node_feat` [N, 128],
  `node_year` [N, 1], `num_nodes_list` [1] (N = 111,059,956), `num_edges_list` [1];
- `raw/node-label.npz`: `node_label` [N, 1] float, NaN for the unlabelled nodes (-1 here);
- `split/time/{train,valid,test}.csv.gz`: node ids, one a line.
ogb's own loader reads all of it into memory and PyG's symmetrisation then sorts 3.2B int64 keys
(~200-250 GB). Here every npz member is read as a stream (a zip member read after its .npy header,
a chunk at a time), so the graph is converted within a few GiB (`convert_bytes`):
1. a counting pass over the edges: each node's in-degree in the symmetrised graph (both
   directions of every citation, as PyG's `ToUndirected` and OGB's examples train it);
2. a scatter pass: each edge's source written at its destination's next free slot of a mapped
   `indices` file of 2E int32 entries;
3. per segment of destinations (SEGMENT entries at most), their sources sorted and repeats (and
   the doubled self loops) dropped, written back compacted in place; `indices` is then cut to the
   distinct edges and `indptr` written from the counts.
One int64 array a node lives through all three (the counts, summed in place into the slots'
starts, which serve as the scatter's cursors and become `indptr`): 0.9 GB for papers100M, plus
a transient one while counting, plus fixed chunk buffers (benchmarks/papers100m_convert.py
measures the peak).
Features are stored as float16 (28 GB instead of 57 GB; the loader converts per gather), the year
as int16, labels as int64 with -1 for NaN, the splits as given.
"""
from __future__ import annotations

import contextlib
import gzip
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Iterator, Tuple

import numpy as np

from conveyor.core.errors import ConveyorError
from conveyor.core.memory import check_memory
from conveyor.partition.datasets.out_of_core import cached_mapped, check_disk, progress
from conveyor.partition.graph import Graph
from conveyor.partition.mapped import MappedWriter

DATA, LABELS, SPLIT = Path("raw") / "data.npz", Path("raw") / "node-label.npz", Path("split") / "time"
SPLIT_FILES = {"train": "train.csv.gz", "val": "valid.csv.gz", "test": "test.csv.gz"}
CHUNK = 1 << 24  # values read from a member at once
SEGMENT = 1 << 25  # CSC entries sorted at once in the compaction pass
NUM_CLASSES = 172  # ogb's master.csv
VERSION = "ogbn-papers100M-mapped-v1"


@dataclass
class Member:
    """An .npy member of an .npz archive, open as a stream after its header."""
    stream: IO[bytes]
    shape: Tuple[int, ...]
    fortran: bool
    dtype: np.dtype
    where: str

    def read(self, count: int) -> np.ndarray:
        """The next `count` values (flat), or a ConveyorError if the member ends before."""
        data = self.stream.read(count * self.dtype.itemsize)
        if len(data) != count * self.dtype.itemsize:
            raise ConveyorError(f"{self.where} ends early (shape {list(self.shape)} in its header): the archive "
                                f"is truncated. Download and unzip it again.")
        return np.frombuffer(data, dtype=self.dtype)

    def rows(self, row_values: int) -> Iterator[Tuple[int, np.ndarray]]:
        """(first row, rows) a chunk of rows at a time, each row `row_values` values."""
        step = max(1, CHUNK // max(row_values, 1))
        for start in range(0, self.shape[0], step):
            count = min(step, self.shape[0] - start)
            yield start, self.read(count * row_values).reshape(count, row_values)


@contextlib.contextmanager
def open_member(archive: Path, key: str) -> Iterator[Member]:
    """`key` of the .npz `archive`, as a stream (a ConveyorError naming what is missing)."""
    try:
        with zipfile.ZipFile(archive) as zf, zf.open(f"{key}.npy") as stream:
            version = np.lib.format.read_magic(stream)
            read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            shape, fortran, dtype = read(stream)
            yield Member(stream, tuple(shape), fortran, dtype, f"{archive}:{key}")
    except (KeyError, FileNotFoundError, zipfile.BadZipFile) as error:
        raise ConveyorError(f"cannot read {key!r} of {archive} ({error}): ogbn-papers100M's raw files are "
                            f"incomplete. Download and unzip papers100M-bin.zip again.") from error


def edge_chunks(archive: Path) -> Iterator[Tuple[np.ndarray, np.ndarray]]:
    """edge_index's (sources, destinations), CHUNK edges at a time: two streams of the member,
    the second one row ahead (C order), or one stream of pairs (Fortran order)."""
    with open_member(archive, "edge_index") as sources, open_member(archive, "edge_index") as targets:
        num_edges = sources.shape[1]
        if not sources.fortran:
            targets.stream.seek(targets.stream.tell() + num_edges * targets.dtype.itemsize)
        for start in range(0, num_edges, CHUNK):
            count = min(CHUNK, num_edges - start)
            if sources.fortran:
                pairs = sources.read(2 * count).reshape(count, 2)
                yield pairs[:, 0].astype(np.int64), pairs[:, 1].astype(np.int64)
            else:
                yield sources.read(count).astype(np.int64), targets.read(count).astype(np.int64)


def count_degrees(archive: Path, n: int) -> np.ndarray:
    """Each node's in-degree in the symmetrised graph, repeats counted (the counting pass), at
    [1:] of an array of n + 1 (its cumulative sum, in place, is then the slots' starts)."""
    degrees = np.zeros(n + 1, dtype=np.int64)
    for src, dst in edge_chunks(archive):
        if src.size and (min(src.min(), dst.min()) < 0 or max(src.max(), dst.max()) >= n):
            raise ConveyorError(f"{archive}'s edge_index holds node ids outside 0..{n - 1} (num_nodes_list "
                                f"says {n} nodes): the file is damaged. Download and unzip it again.")
        degrees[1:] += np.bincount(dst, minlength=n)
        degrees[1:] += np.bincount(src, minlength=n)
    return degrees


def scatter(archive: Path, slots: np.memmap, starts: np.ndarray) -> None:
    """Write every edge's source (both directions) at its destination's next free slot. `starts`
    serves as the cursors (no second node-sized array): once every edge is placed, entry i holds
    node i + 1's start, and the array is shifted back."""
    cursor = starts[:-1]  # a view: advanced in place
    for src, dst in edge_chunks(archive):
        into, value = np.concatenate([dst, src]), np.concatenate([src, dst])
        del src, dst
        order = np.argsort(into, kind="stable")
        into, value = into[order], value[order]
        del order
        first = np.flatnonzero(np.concatenate([[True], into[1:] != into[:-1]]))  # runs of one destination
        counts = np.diff(np.append(first, into.size))
        rank = np.arange(into.size) - np.repeat(first, counts)
        slots[cursor[into] + rank] = value
        cursor[into[first]] += counts
    shift_right(starts)


def shift_right(starts: np.ndarray) -> None:
    """starts[1:] = starts[:-1] and starts[0] = 0, a chunk at a time from the end (numpy would
    copy the whole overlapping source first)."""
    for stop in range(starts.size - 1, 0, -CHUNK):
        begin = max(stop - CHUNK, 0)
        starts[begin + 1:stop + 1] = starts[begin:stop]
    starts[0] = 0


def compact(slots: np.memmap, starts: np.ndarray, n: int) -> np.ndarray:
    """Sort each node's sources and drop repeats, segment by segment, writing them back packed
    from the front (never past what is still to be read); `starts` becomes the new indptr, in
    place (each segment's bounds read before they are overwritten)."""
    written, a, begin = 0, 0, 0  # begin: node a's first slot, as it was before starts[a] was rewritten
    while a < n:
        b = min(max(a + 1, a + int(np.searchsorted(starts[a + 1:], begin + SEGMENT, side="right"))), n)
        ends = starts[a + 1:b + 1]
        local = np.repeat(np.arange(b - a, dtype=np.int64), np.diff(ends, prepend=begin))
        keys = np.unique(local * n + np.asarray(slots[begin:ends[-1]], dtype=np.int64))
        del local
        owner = keys // n
        slots[written:written + keys.size] = keys - owner * n
        begin = int(ends[-1])
        ends[:] = written + np.cumsum(np.bincount(owner, minlength=b - a))
        written, a = written + keys.size, b
    return starts


def write_structure(writer: MappedWriter, archive: Path, n: int) -> int:
    """indptr and indices of the symmetrised, deduplicated graph; returns its edge count. One
    int64 array a node throughout (counts, then slot starts and cursors, then indptr)."""
    starts = count_degrees(archive, n)
    np.cumsum(starts, out=starts)
    writer.create("indices", (int(starts[-1]),), np.int32)
    slots = writer.mapped("indices")
    scatter(archive, slots, starts)
    indptr = compact(slots, starts, n)
    slots.flush()
    del slots
    writer.shrink("indices", int(indptr[-1]))
    writer.save("indptr", indptr)
    return int(indptr[-1])


def write_nodes(writer: MappedWriter, folder: Path, n: int) -> None:
    """x (float16), node.year (int16), y (-1 for NaN) and the splits."""
    with open_member(folder / DATA, "node_feat") as feat:
        writer.create("x", (n, feat.shape[1]), np.float16)
        with progress(n, "papers100m features") as bar:
            for start, rows in feat.rows(feat.shape[1]):
                writer.put("x", start, rows.astype(np.float16))
                bar.update(len(rows))
    with open_member(folder / DATA, "node_year") as year:
        writer.create("node.year", (n,), np.int16)
        for start, rows in year.rows(1):
            writer.put("node.year", start, rows[:, 0].astype(np.int16))
    with open_member(folder / LABELS, "node_label") as label:
        writer.create("y", (n,), np.int64)
        for start, rows in label.rows(1):
            y = np.where(np.isnan(rows[:, 0]), -1, rows[:, 0]).astype(np.int64)
            if y.size and not -1 <= y.min() <= y.max() < NUM_CLASSES:
                raise ConveyorError(f"{label.where} holds labels outside 0..{NUM_CLASSES - 1} (and NaN for "
                                    f"unlabelled nodes): the file is damaged. Download and unzip it again.")
            writer.put("y", start, y)
    for split, name in SPLIT_FILES.items():
        writer.save(f"{split}_idx", read_split(folder / SPLIT / name))


def read_split(path: Path) -> np.ndarray:
    try:
        with gzip.open(path, "rt") as f:
            return np.loadtxt(f, dtype=np.int64, ndmin=1)
    except (OSError, ValueError) as error:
        raise ConveyorError(f"cannot read the split file {path} ({error}): unzip papers100M-bin.zip "
                            f"completely again.") from error


def node_count(archive: Path) -> int:
    with open_member(archive, "num_nodes_list") as member:
        return int(member.read(int(np.prod(member.shape))).sum())


def convert_bytes(archive: Path, n: int) -> dict:
    """What the conversion takes: memory (an int64 array a node and, while counting, a chunk's
    counts; a chunk of edges sorted; a segment's sort) and disk (2E int32 slots before the
    repeats are dropped, float16 features, the rest)."""
    with open_member(archive, "edge_index") as edges, open_member(archive, "node_feat") as feat:
        num_edges, features = edges.shape[1], feat.shape[1]
    memory = {"for the degree counts and slot cursors": 2 * 8 * n, "for a segment's sort": 4 * 8 * SEGMENT,
              "for a chunk of edges": 14 * 8 * CHUNK}
    return {"memory": memory, "disk": 8 * num_edges + 2 * features * n + 8 * (n + 1) + 8 * n + 2 * n}


def convert(writer: MappedWriter, folder: Path) -> dict:
    """Check memory and disk, then write the mapped graph from OGB's raw files in `folder`."""
    archive = folder / DATA
    n = node_count(archive)
    need, what = convert_bytes(archive, n), f"converting ogbn-papers100M ({n:,} nodes) from {archive}"
    check_disk(folder, need["disk"], what, "Free disk space, or point data.root at a larger disk.")
    check_memory(what, need["memory"], "cpu", "Convert it on a machine with more memory.")
    num_edges = write_structure(writer, archive, n)
    write_nodes(writer, folder, n)
    return {"kind": "Graph", "name": "papers100m", "num_nodes": n, "num_edges": num_edges,
            "num_classes": NUM_CLASSES}


def load_papers100m(folder: Path) -> Graph:
    """The mapped graph converted from OGB's files in `folder` (<root>/ogbn_papers100M), once."""
    return cached_mapped(folder / "conveyor", lambda writer: convert(writer, folder), stamp=VERSION)
