"""Turn the user-facing cache options (YAML values, CLI overrides) into numbers and dtypes.

capacity: a fraction of the nodes in [0, 1], a byte size ("512MB", "2GiB"), or "auto".
reserve / prefetch: byte sizes (a string with a unit, or a plain int meaning bytes).
dtype: None (keep graph.x's dtype) or float32 / float16 / bfloat16 (names or torch dtypes).
"""
from __future__ import annotations

import math
import re
from typing import Union

import torch

from conveyor.core import ConveyorError

UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
         "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
BYTES_RE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-z]+)\s*$", re.IGNORECASE)

DTYPES = {"float32": torch.float32, "float": torch.float32, "fp32": torch.float32,
          "float16": torch.float16, "half": torch.float16, "fp16": torch.float16,
          "bfloat16": torch.bfloat16, "bf16": torch.bfloat16}


def parse_bytes(value, what: str = "size") -> int:
    """'512MB' -> 512_000_000, '2GiB' -> 2 * 2**30, 4096 -> 4096 (a plain int is bytes)."""
    if isinstance(value, bool):
        raise ConveyorError(f"{what} must be a byte size such as '512MB' or '2GiB', got {value!r}.")
    if isinstance(value, int):
        if value < 0:
            raise ConveyorError(f"{what} must be >= 0 bytes, got {value}.")
        return value
    match = BYTES_RE.match(value) if isinstance(value, str) else None
    if match is None or match.group(2).lower() not in UNITS:
        raise ConveyorError(
            f"{what} must be a byte size: a non-negative number with a unit (B, KB, MB, GB, TB "
            f"in powers of 1000, or KiB, MiB, GiB, TiB in powers of 1024), e.g. '512MB' or "
            f"'2GiB'; got {value!r}.")
    return int(float(match.group(1)) * UNITS[match.group(2).lower()])


Capacity = Union[float, int, str]


def parse_capacity(capacity: Capacity, what: str = "cache.capacity") -> tuple[str, float]:
    """('auto', 0) | ('fraction', f in [0, 1]) | ('bytes', n); `what`: the setting, for the error."""
    if isinstance(capacity, str):
        text = capacity.strip().lower()
        if text == "auto":
            return "auto", 0.0
        try:
            capacity = float(text)  # "0.2" from a command line
        except ValueError:
            return "bytes", float(parse_bytes(capacity, what))
    if isinstance(capacity, bool) or not isinstance(capacity, (int, float)):
        raise ConveyorError(f"{what} must be a fraction of the nodes in [0, 1], a byte size "
                            f"such as '2GiB', or 'auto'; got {capacity!r}.")
    if not (0.0 <= capacity <= 1.0):  # also rejects NaN
        raise ConveyorError(
            f"{what}={capacity!r} is outside [0, 1]: a number is the fraction of the nodes "
            f"whose features are cached (0.2 = 20%). For a size in bytes write it with a unit, e.g. "
            f"{what}=2GiB, or use {what}=auto to fill the free memory.")
    return "fraction", float(capacity)


def capacity_to_nodes(kind: str, value: float, num_nodes: int, row_bytes: int) -> int:
    """Number of feature rows a fraction or byte budget buys, capped at every node."""
    if kind == "fraction":
        return min(num_nodes, int(math.floor(value * num_nodes + 0.5)))  # 0.29*100 -> 29, not 28
    if kind == "bytes":
        return min(num_nodes, int(value) // max(row_bytes, 1))
    raise ValueError(kind)


def parse_dtype(dtype, default: torch.dtype) -> torch.dtype:
    if dtype is None:
        return default
    if isinstance(dtype, torch.dtype):
        resolved = dtype
    else:
        resolved = DTYPES.get(str(dtype).strip().lower().removeprefix("torch."))
    if resolved not in (torch.float32, torch.float16, torch.bfloat16):
        raise ConveyorError(f"cache.dtype must be null (keep the features' dtype), float32, float16 "
                            f"or bfloat16; got {dtype!r}.")
    return resolved
