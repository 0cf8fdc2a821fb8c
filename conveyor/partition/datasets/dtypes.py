"""A custom array's dtype: converted when it is a real number, refused by name otherwise.

Any real float or integer in either byte order becomes a tensor torch computes with (big-endian
arrays are swapped, float128 and unsigned ints wider than 8 bits widened); bool stays for split
masks and 0/1 features. Complex numbers, strings, objects, records, dates and `.pt` tensors that
hold no plain values (sparse, meta, quantized) are refused in one paragraph naming the file,
the dtype and what is accepted, instead of a traceback from deep inside torch.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from conveyor.core.errors import ConveyorError

ACCEPTED = ("a dense array of real numbers: a float (float16, bfloat16, float32, float64) or an "
            "integer (int8..int64, uint8..uint64) in either byte order, or bool for a split mask")
WIDE_UNSIGNED = (torch.uint16, torch.uint32, torch.uint64)
INT64_MAX = np.iinfo(np.int64).max


def refuse(path: Path, dtype, why: str = "") -> ConveyorError:
    return ConveyorError(f"{path} holds {why or 'values of dtype'} {dtype}, which conveyor cannot "
                         f"train on; it takes {ACCEPTED}. Convert it (e.g. arr.astype(np.float32) or "
                         f"tensor.to_dense().float()) and save it again.")


def from_numpy(value: np.ndarray, path: Path) -> torch.Tensor:
    kind = value.dtype.kind
    if kind not in "fiub":
        raise refuse(path, value.dtype)
    if not value.dtype.isnative:
        value = value.astype(value.dtype.newbyteorder("="))
    if kind == "f" and value.dtype.itemsize > 8:  # float128: torch has none
        value = value.astype(np.float64)
    if kind == "u" and value.dtype.itemsize > 1:
        if value.size and int(value.max()) > INT64_MAX:
            raise refuse(path, value.dtype, "values beyond int64's range, of dtype")
        value = value.astype(np.int64)
    return torch.from_numpy(np.ascontiguousarray(value))


def from_torch(value: torch.Tensor, path: Path) -> torch.Tensor:
    if value.layout != torch.strided:
        raise refuse(path, value.dtype, f"a {value.layout} tensor of")
    if value.is_meta or value.is_quantized:
        raise refuse(path, value.dtype, f"a {'meta' if value.is_meta else 'quantized'} tensor of")
    if value.dtype.is_complex:
        raise refuse(path, value.dtype)
    if value.dtype in WIDE_UNSIGNED:  # torch computes little on them; uint64 wraps past 2**63
        wide = value.to(torch.int64)
        if (wide < 0).any():
            raise refuse(path, value.dtype, "values beyond int64's range, of dtype")
        value = wide
    if value.dtype.is_floating_point and value.dtype.itemsize == 1:  # float8: too few ops
        value = value.to(torch.float32)
    return value


def as_tensor(value, path: Path) -> torch.Tensor:
    """`value`, as read from `path`, as a tensor of a dtype conveyor trains on."""
    if isinstance(value, np.ndarray):
        return from_numpy(value, path)
    if isinstance(value, torch.Tensor):
        return from_torch(value, path)
    raise ConveyorError(f"{path} holds a {type(value).__name__}, not an array or tensor.")
