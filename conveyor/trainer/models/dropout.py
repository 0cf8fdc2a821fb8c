"""Dropout with its keep mask cut from random 64-bit words, four 16-bit slices to a word.

The distribution is torch's: each element is kept with probability 1 - p, independently, and a
kept element is scaled by 1 / (1 - p). `F.dropout` draws one random number per element, serially,
from the CPU generator, and that draw was a third of the trainer's CPU step; one 64-bit word gives
four elements their draws, so the generator runs a quarter as often. The precision is 16 bits: an
element is kept when its slice, as an unsigned number in [0, 65536), is at least round(p * 65536),
so the keep probability is 1 - p with p rounded to a multiple of 1/65536 (off by at most 2^-17).

On CPU only: the draws come from torch's default CPU generator, so `torch.manual_seed` makes a
run reproducible, as with `F.dropout` (but with another stream: `fast=False` gives F.dropout's).
Other devices keep `F.dropout`, one fused kernel there.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

SLICES = 1 << 16  # the values of one 16-bit slice


def random_slices(shape, device="cpu", generator: torch.Generator | None = None) -> Tensor:
    """int16 values of `shape`, uniform over all 65536, four to a random 64-bit word."""
    n = torch.Size(shape).numel()
    words = torch.empty((n + 3) // 4, dtype=torch.int64, device=device)
    words.random_(-(1 << 63), None, generator=generator)  # all 64 bits uniform (random_() leaves the top one 0)
    return words.view(torch.int16)[:n].view(shape)  # signed: slice - 32768 as unsigned, also uniform


def keep_mask(shape, p: float, device="cpu", generator: torch.Generator | None = None) -> Tensor:
    """A boolean mask of `shape`, each element True with probability 1 - round(p * 65536) / 65536."""
    return random_slices(shape, device, generator) >= round(p * SLICES) - SLICES // 2


class RectifiedWordDropout(torch.autograd.Function):
    """relu, then dropout: y = max(x, 0) * keep / (1 - p), the same values from the same draws as
    the two apart, with one tensor of x's size fewer (each new one costs its page faults: on this
    CPU most of an elementwise pass) and nothing but y kept for the backward, where the gradient
    passes exactly where y > 0. The mask multiplies in as bytes (0 or 1): half the time of
    `masked_fill_`, whose CPU kernel is slow."""

    @staticmethod
    def forward(ctx, x: Tensor, p: float) -> Tensor:
        ctx.scale = 1.0 / (1.0 - p)
        keep = keep_mask(x.shape, p, x.device).view(torch.uint8)
        y = x.clamp_min(0.0).mul_(keep).mul_(ctx.scale)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad: Tensor):
        (y,) = ctx.saved_tensors
        return torch.ops.aten.threshold_backward(grad, y, 0.0).mul_(ctx.scale), None


class WordDropout(torch.autograd.Function):
    """y = x * mask / (1 - p); the gradient is the same mask times the same scale. The mask is kept
    as x's dtype, already scaled (4 bytes an element where a bool mask takes 1): multiplying by a
    bool tensor converts it on every use, which made dropout a quarter slower on 1 CPU thread."""

    @staticmethod
    def forward(ctx, x: Tensor, p: float) -> Tensor:
        scaled = keep_mask(x.shape, p, x.device).to(x.dtype).mul_(1.0 / (1.0 - p))
        ctx.save_for_backward(scaled)
        return x * scaled

    @staticmethod
    def backward(ctx, grad: Tensor):
        (scaled,) = ctx.saved_tensors
        return grad * scaled, None


def dropout(x: Tensor, p: float, training: bool = True, fast: bool = True) -> Tensor:
    """`F.dropout(x, p, training)`, by 16-bit slices of random words on CPU when `fast`."""
    if not fast or not training or x.device.type != "cpu" or not x.is_floating_point():
        return F.dropout(x, p=p, training=training)
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if p == 0.0 or p == 1.0:  # as F.dropout: x times ones, or times zeros
        return x * (1.0 - p)
    return WordDropout.apply(x, p)


def relu_dropout(x: Tensor, p: float, training: bool = True, fast: bool = True) -> Tensor:
    """`dropout(F.relu(x), p, training, fast)`, relu and dropout in one on CPU when `fast`."""
    if not fast or not training or x.device.type != "cpu" or not x.is_floating_point() or not 0.0 < p < 1.0:
        return dropout(F.relu(x), p, training, fast)
    return RectifiedWordDropout.apply(x, p)
