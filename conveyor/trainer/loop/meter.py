"""Running loss and accuracy kept on the training device, read back only when asked.

A host read of a device tensor (`float(loss)`, `int(correct)`) waits for every kernel queued
before it, so reading per batch keeps the host from running ahead of the GPU. `DeviceMeter` adds
each batch's seed-weighted loss and correct count to one float64 device tensor instead, and
`read()` copies it back in one transfer: once per `trainer.log_every` batches and once per epoch.
float64 keeps the sum exactly what per-batch reads summed on the host gave (a float32 loss times
an integer batch size, added in double precision); counts stay exact below 2**53.
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch import Tensor

from conveyor.trainer.loop.loss import correct


class DeviceMeter:
    def __init__(self):
        self.sums = None  # [loss * seeds, correct] on the device of the first batch
        self.seen = 0  # seeds so far: batch sizes are known on the host, no read needed
        self._last = (0.0, 0.0, 0)  # sums and seen at the previous read

    def add(self, out: Tensor, y: Tensor, loss: Optional[Tensor] = None) -> None:
        """Add one batch: the logits `out`, the labels `y` and the mean loss over its seeds."""
        n = y.numel()
        if self.sums is None:
            self.sums = torch.zeros(2, dtype=torch.float64, device=y.device)
        if loss is not None:
            self.sums[0] += loss.detach().double() * n
        self.sums[1] += correct(out.detach(), y)
        self.seen += n

    def read(self) -> Tuple[float, float]:
        """(mean loss, accuracy) since the previous read: the one host sync."""
        loss_sum, correct = self.sums.tolist() if self.sums is not None else (0.0, 0.0)
        last_loss, last_correct, last_seen = self._last
        self._last = (loss_sum, correct, self.seen)
        seen = max(self.seen - last_seen, 1)
        return (loss_sum - last_loss) / seen, (correct - last_correct) / seen

    def totals(self) -> Tuple[float, float]:
        """(mean loss, accuracy) over everything added (reads the device only if a batch came
        after the last read)."""
        if self._last[2] != self.seen:
            self.read()
        loss_sum, correct, seen = self._last
        return loss_sum / max(seen, 1), correct / max(seen, 1)
