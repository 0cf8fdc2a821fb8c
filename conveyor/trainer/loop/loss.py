"""The training objective: `loss(out, y) -> scalar tensor` over a batch's seed outputs and labels,
and how many of them the model got right.

The default is cross-entropy on class ids (`y` int, one per node) and BCE-with-logits on float
`[N, C]` targets (multi-label, each column a 0/1 label). `conveyor.fit(loss=...)` replaces it with
any callable of the same signature; it gets class ids as int64, float targets as they are. The
accuracy the run reports stays the same either way: the argmax against the class id, or for
multi-label the share of the C labels whose logit has the target's sign.
"""
from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor


def default_loss(out: Tensor, y: Tensor) -> Tensor:
    if y.is_floating_point():
        return F.binary_cross_entropy_with_logits(out, y)
    return F.cross_entropy(out, y)


def targets(y: Tensor) -> Tensor:
    """The labels a loss reads: class ids widened to int64 (they travel narrow: device_labels)."""
    return y if y.is_floating_point() else y.long()


def correct(out: Tensor, y: Tensor) -> Tensor:
    """How many of the rows the model got right, as a device tensor (multi-label: the share of
    each row's labels, summed)."""
    if y.is_floating_point():
        return ((out > 0) == (y > 0.5)).float().mean(-1).sum()
    return (out.argmax(-1) == y).sum()
