"""The mapped graph layout: a folder of `.npy` files, one per tensor, opened as memory maps.

For graphs larger than memory (docs/design.md §2.1): `meta.json` carries the format tag
(`FORMAT`), the graph's kind, node, edge and class counts, its name and, per tensor, its dtype and
shape; each tensor `Graph.tensors()` names (`indptr`, `indices`, `x`, `y`, `train_idx`, ...,
`node.year`) is `<name>.npy`. `read_mapped` maps every file copy-on-write from a read-only open
(numpy's mode "c", as `torch.load(mmap=True)` maps graph.pt): nothing is copied, the page cache
holds one copy for every process, and the files are never written.

`MappedWriter` writes one streaming: each file is created at its full size with its `.npy` header,
then filled piece by piece with `pwrite` (no map of it in the writer, so a build's resident memory
stays what it computes, not the gigabytes it wrote); `commit` writes `meta.json` last. Builders
write into a staging folder renamed into place once committed (datasets/out_of_core.py), so a
killed build leaves no folder a later run accepts.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Dict, Tuple

import numpy as np
import torch

FORMAT = "conveyor-mapped-v1"
META = "meta.json"


def is_mapped(folder: str | os.PathLike) -> bool:
    """Whether `folder` holds a graph in the mapped layout (its meta.json has the format tag)."""
    meta = Path(folder) / META
    try:
        return json.loads(meta.read_text()).get("format") == FORMAT
    except (OSError, ValueError, AttributeError):
        return False


class MappedWriter:
    """Writes a mapped graph's files into `folder` (a staging folder): `create` each array at its
    full size, `put` rows into it (from any thread), `save` small arrays whole, then `commit`."""

    def __init__(self, folder: str | os.PathLike):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.fields: Dict[str, dict] = {}
        self._files: Dict[str, Tuple[int, int, int]] = {}  # name -> (fd, data offset, row bytes)

    def create(self, name: str, shape, dtype) -> None:
        """`<name>.npy` of `shape` and `dtype`, all zeros (a sparse file) until `put` fills it."""
        shape, dtype = tuple(int(s) for s in shape), np.dtype(dtype)
        path = self.folder / f"{name}.npy"
        with open(path, "wb") as f:
            header = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": shape}
            np.lib.format.write_array_header_1_0(f, header)
            offset = f.tell()
            f.truncate(offset + dtype.itemsize * int(np.prod(shape)))
        row = dtype.itemsize * int(np.prod(shape[1:]))
        self._files[name] = (os.open(path, os.O_WRONLY), offset, row)
        self.fields[name] = {"dtype": dtype.name, "shape": list(shape)}

    def put(self, name: str, start: int, rows: np.ndarray) -> None:
        """Write `rows` at row `start` of `name` (in its dtype)."""
        fd, offset, row = self._files[name]
        data = np.ascontiguousarray(rows, dtype=self.fields[name]["dtype"])
        view, at = memoryview(data).cast("B"), offset + start * row
        while len(view):  # pwrite may write less than asked
            done = os.pwrite(fd, view, at)
            view, at = view[done:], at + done

    def save(self, name: str, array: np.ndarray) -> None:
        """A small array, whole."""
        array = np.ascontiguousarray(array)
        self.create(name, array.shape, array.dtype)
        self.put(name, 0, array)

    def commit(self, **meta) -> Path:
        """Flush every file to disk and write meta.json (last: a folder without it is no graph)."""
        for fd, _, _ in self._files.values():
            os.fsync(fd)
            os.close(fd)
        self._files.clear()
        text = json.dumps({"format": FORMAT, **meta, "fields": self.fields}, indent=1)
        (self.folder / META).write_text(text)
        return self.folder

    def close(self) -> None:
        """Close the files of a build that is abandoned."""
        for fd, _, _ in self._files.values():
            os.close(fd)
        self._files.clear()


def read_mapped(folder: str | os.PathLike) -> Tuple[Dict[str, torch.Tensor], dict]:
    """(tensors by name, the rest of meta.json) of the mapped graph in `folder`: each tensor a
    copy-on-write map of its file. A file missing, or not of the dtype and shape meta.json gives
    (truncated, replaced), raises ValueError naming it."""
    folder = Path(folder)
    meta = json.loads((folder / META).read_text())
    tensors = {}
    for name, spec in meta.pop("fields").items():
        path = folder / f"{name}.npy"
        try:
            array = np.load(path, mmap_mode="c" if int(np.prod(spec["shape"])) else None, allow_pickle=False)
        except (OSError, ValueError) as error:
            raise ValueError(f"{path.name}: {error}") from error
        if array.dtype.name != spec["dtype"] or list(array.shape) != spec["shape"]:
            raise ValueError(f"{path.name} holds {array.dtype.name} {list(array.shape)}, "
                             f"meta.json says {spec['dtype']} {spec['shape']}")
        tensors[name] = torch.from_numpy(array)
    return tensors, meta
