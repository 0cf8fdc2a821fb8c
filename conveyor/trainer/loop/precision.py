"""`trainer.precision`: how the matrix products of training and evaluation are computed.

- `32`: full float32 products, anywhere.
- `tf32`: float32 storage, TF32 tensor-core products (10-bit mantissa inputs, float32 sums); CUDA
  (Ampere or later). On CPU the same as `32`.
- `bf16-mixed`: `torch.autocast` to bfloat16 around the forward pass and the loss: products in
  bf16; the loss, softmax and reductions in float32; weights and the optimizer stay float32. CUDA
  with bf16 support, and CPU.
- `auto` (the default): `tf32` on CUDA, `32` on CPU.

No gradient scaler is needed: bf16 has float32's exponent range.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from conveyor.core import ConveyorError
from conveyor.trainer.settings import PRECISIONS


@dataclass(frozen=True)
class Precision:
    name: str  # resolved: "32" | "tf32" | "bf16-mixed"
    device_type: str  # "cpu" | "cuda"

    def apply(self) -> None:
        """Set the process-wide TF32 switches (on for `tf32` only: a run never inherits them)."""
        tf32 = self.name == "tf32"
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32

    def autocast(self):
        """The context the forward pass and the loss run in."""
        if self.name == "bf16-mixed":
            return torch.autocast(self.device_type, dtype=torch.bfloat16)
        return contextlib.nullcontext()


def resolve_precision(value, device: torch.device) -> Precision:
    """`trainer.precision` (`32` may arrive as an int from the command line) on `device`."""
    name = str(value)
    if name not in PRECISIONS:
        raise ConveyorError(f"trainer.precision must be one of {', '.join(PRECISIONS)}, got {value!r}.")
    if name == "auto":
        name = "tf32" if device.type == "cuda" else "32"
    if name == "bf16-mixed" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise ConveyorError("trainer.precision=bf16-mixed needs a GPU with bfloat16 support "
                            "(compute capability 8.0 or later); use tf32 or 32.")
    return Precision(name, device.type)
