"""The one device resolver every stage uses: `auto`, `cpu`, `cuda` or `cuda:N`, checked against
what torch sees here, each failure a message that names the fix."""
from __future__ import annotations

import torch

from conveyor.core.errors import ConveyorError


def resolve_device(name, key: str = "run.device") -> torch.device:
    """`name` (a string or torch.device) as a torch.device: `auto` (or None) is CUDA if torch
    sees a GPU, else the CPU. `key`: what the caller calls it in messages (`device` in Python)."""
    if name is None or str(name) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except (RuntimeError, TypeError):
        device = None
    if device is None or device.type not in ("cpu", "cuda"):
        raise ConveyorError(f"{key} must be auto, cpu, cuda or cuda:N, got {str(name)!r}.")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConveyorError(f"{key}={device} but no CUDA device is visible; use {key}=cpu "
                            f"(or auto), or check CUDA_VISIBLE_DEVICES and the driver.")
    count = torch.cuda.device_count() if device.type == "cuda" else 0
    if device.type == "cuda" and (device.index or 0) >= count:
        raise ConveyorError(f"{key}={device} but this machine shows {count} CUDA device(s), "
                            f"cuda:0 to cuda:{count - 1}; pick one of them (or check CUDA_VISIBLE_DEVICES).")
    return device


def use_device(device: torch.device) -> torch.device:
    """Make `device` this process's current GPU (Triton launches on the current device, and a
    process that never sets it opens a context on GPU 0 as well); returns it with its index, so
    the stage processes it is handed to use the same GPU."""
    if device.type != "cuda":
        return device
    if device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    torch.cuda.set_device(device)
    return device
