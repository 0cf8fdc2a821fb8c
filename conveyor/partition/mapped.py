"""The mapped graph layout: a folder of `.npy` files, one per tensor, opened as memory maps.

For graphs larger than memory (docs/design.md §2.1): `meta.json` carries the format tag
(`FORMAT`), the graph's kind, node, edge and class counts, its name and, per tensor, its dtype and
shape; each tensor `Graph.tensors()` names (`indptr`, `indices`, `x`, `y`, `train_idx`, ...,
`node.year`) is `<name>.npy`. `read_mapped` maps every file read-only (numpy's mode "r", a shared
read-only map): nothing is copied, the page cache holds one copy for every process, and the files
are never written. Not copy-on-write: the kernel counts a private writable map against its commit
limit and refuses one larger than memory (ENOMEM for papers100M's 28 GB of features). A tensor of
it must not be written in place (the process would die on the write, as on any read-only page).

`MappedWriter` writes one streaming: each file is created at its full size with its `.npy` header,
then filled piece by piece with `pwrite` (no map of it in the writer, so a build's resident memory
stays what it computes, not the gigabytes it wrote); `commit` writes `meta.json` last. Builders
write into a staging folder renamed into place once committed (datasets/out_of_core.py), so a
killed build leaves no folder a later run accepts.
"""
from __future__ import annotations

import io
import json
import os
import uuid
import warnings
from pathlib import Path
from typing import Dict, Optional, Tuple

import numpy as np
import torch

from conveyor.core.file_maps import file_maps, file_offset

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

    def mapped(self, name: str) -> np.memmap:
        """`name`'s rows as a writable map, for a pass that scatters into it (papers100m.py)."""
        spec, (_, offset, _) = self.fields[name], self._files[name]
        return np.memmap(self.folder / f"{name}.npy", dtype=spec["dtype"], mode="r+", offset=offset,
                         shape=tuple(spec["shape"]))

    def shrink(self, name: str, rows: int) -> None:
        """Keep only the first `rows` rows of `name` (its header rewritten, the file cut)."""
        fd, offset, row = self._files[name]
        spec = self.fields[name]
        header = io.BytesIO()
        np.lib.format.write_array_header_1_0(header, {"descr": np.lib.format.dtype_to_descr(np.dtype(spec["dtype"])),
                                                      "fortran_order": False, "shape": (rows, *spec["shape"][1:])})
        assert header.tell() == offset, "the header of a smaller shape is never longer"
        os.pwrite(fd, header.getvalue(), 0)
        os.ftruncate(fd, offset + rows * row)
        spec["shape"][0] = rows

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
        # "build": this build's identity, which the data fingerprint of a run reads instead of
        # hashing tens of GB (digest.py); a rebuilt folder gets another one.
        text = json.dumps({"format": FORMAT, **meta, "build": uuid.uuid4().hex, "fields": self.fields}, indent=1)
        (self.folder / META).write_text(text)
        return self.folder

    def close(self) -> None:
        """Close the files of a build that is abandoned."""
        for fd, _, _ in self._files.values():
            os.close(fd)
        self._files.clear()


def read_mapped(folder: str | os.PathLike) -> Tuple[Dict[str, torch.Tensor], dict]:
    """(tensors by name, the rest of meta.json) of the mapped graph in `folder`: each tensor a
    read-only map of its file. A file missing, or not of the dtype and shape meta.json gives
    (truncated, replaced), raises ValueError naming it."""
    folder = Path(folder)
    meta = json.loads((folder / META).read_text())
    tensors = {}
    for name, spec in meta.pop("fields").items():
        path = folder / f"{name}.npy"
        try:
            array = np.load(path, mmap_mode="r" if int(np.prod(spec["shape"])) else None, allow_pickle=False)
        except (OSError, ValueError) as error:
            raise ValueError(f"{path.name}: {error}") from error
        if array.dtype.name != spec["dtype"] or list(array.shape) != spec["shape"]:
            raise ValueError(f"{path.name} holds {array.dtype.name} {list(array.shape)}, "
                             f"meta.json says {spec['dtype']} {spec['shape']}")
        tensors[name] = read_only_tensor(array)
    return tensors, meta


def read_only_tensor(array: np.ndarray) -> torch.Tensor:
    """torch's view of a read-only map (torch has no read-only tensors: it warns, once, that
    writing would be undefined; here that is the contract)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        return torch.from_numpy(array)


def build_of(tensors: Dict[str, torch.Tensor]) -> Optional[str]:
    """The build identity of the mapped folder every one of `tensors` is the whole file of (as
    `read_mapped` maps them, unchanged), or None: some tensor is not, or the folder has none."""
    maps, folders = file_maps(), set()
    for name, tensor in tensors.items():
        where = file_offset(maps, tensor) if tensor.numel() else None
        if where is None or Path(where[0]).name != f"{name}.npy" or not tensor.is_contiguous():
            return None
        folders.add(Path(where[0]).parent)
    if len(folders) != 1:
        return None
    folder = folders.pop()
    try:
        meta = json.loads((folder / META).read_text())
    except (OSError, ValueError):
        return None
    fields = meta.get("fields", {})
    same = set(fields) == set(tensors) and all(list(t.shape) == fields[k]["shape"] for k, t in tensors.items())
    return str(meta["build"]) if same and meta.get("format") == FORMAT and "build" in meta else None
