"""Checks of what a user's arrays hold (custom.py reads them): the values, not just the shapes.

Each would otherwise train silently on garbage: a NaN feature makes every loss NaN, a stray label
99 makes 3 classes into 100, a node in both train and val makes validation accuracy meaningless.
Every message names the file and the fix. Nodes labelled -1 (unlabelled) are left out of the
val and test splits, so that accuracy counts only nodes that have a label to score.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Dict, Optional

import torch
from torch import Tensor

from conveyor.core.errors import ConveyorError

log = logging.getLogger("conveyor")
UNLABELLED = -1


def _first(mask: Tensor) -> str:
    """Where the first True of a mask is, as the user would look it up."""
    at = [int(i) for i in mask.nonzero()[0]]
    return f"row {at[0]}" + (f", column {at[1]}" if len(at) > 1 else "")


def _unused(used: Tensor, top: int, most: int = 5) -> str:
    """The first few and the last of the labels 0..top missing from the sorted `used`, without
    listing all of 0..top (a stray label may be huge)."""
    head = torch.arange(min(top + 1, used.numel() + most))
    head = head[~torch.isin(head, used)][:most].tolist()
    tail = torch.arange(max(0, top - used.numel()), top + 1)
    last = int(tail[~torch.isin(tail, used)][-1])
    return ", ".join(map(str, head)) + (f", ... {last}" if last not in head else "")


def check_features(x: Tensor, path: Path) -> Tensor:
    """`x` as float32, refused when empty or not finite (in the file, or once cast to float32)."""
    if x.size(0) == 0 or x.size(1) == 0:
        raise ConveyorError(f"{path} holds no features (shape {tuple(x.shape)}): x needs one row "
                            f"per node and at least one column; give a node without features a "
                            f"constant column, e.g. np.ones((N, 1)).")
    if x.dtype.is_floating_point and not torch.isfinite(x).all():
        bad = ~torch.isfinite(x)
        raise ConveyorError(f"{path} holds {int(bad.sum())} non-finite feature values (NaN or "
                            f"inf), the first at {_first(bad)}; they make every loss NaN. Replace "
                            f"them (impute, or np.nan_to_num) and save the file again.")
    x32 = x.to(torch.float32)
    if not torch.isfinite(x32).all():
        raise ConveyorError(f"{path} holds feature values beyond float32's range (about 3.4e38), "
                            f"the first at {_first(~torch.isfinite(x32))}; the features are "
                            f"trained in float32: rescale or standardise them.")
    return x32


def check_labels(y: Tensor, num_classes: Optional[int], path: Path) -> int:
    """The number of classes: `num_classes` if given, else max(y) + 1 with every class used."""
    if (y < UNLABELLED).any():
        raise ConveyorError(f"{path} holds label {int(y.min())}; labels are 0..C-1, with -1 for "
                            f"an unlabelled node.")
    used = torch.unique(y[y >= 0])
    if used.numel() == 0:
        raise ConveyorError(f"{path} labels no node (every label is -1); training needs labels.")
    top = int(used[-1])
    if num_classes is not None:
        if num_classes <= top:
            raise ConveyorError(f"data.num_classes={num_classes} but {path} holds label {top}; "
                                f"raise data.num_classes to at least {top + 1}.")
        return num_classes
    if used.numel() < top + 1:
        raise ConveyorError(
            f"{path} holds labels up to {top}, so {top + 1} classes, but {top + 1 - used.numel()} "
            f"of them never occur ({_unused(used, top)}); a stray label makes a model with "
            f"classes no node has. Renumber the labels 0..C-1 (np.unique(y, return_inverse=True)), or set "
            f"data.num_classes={top + 1} if those classes are real but absent here.")
    return top + 1


def check_splits(splits: Dict[str, Tensor], y: Tensor, paths: Dict[str, Path]) -> Dict[str, Tensor]:
    """Refuse repeated ids in a split and nodes in two splits; drop unlabelled val/test nodes."""
    for name, ids in splits.items():
        unique = torch.unique(ids)
        if unique.numel() != ids.numel():
            counts = torch.bincount(ids)
            raise ConveyorError(f"{paths[name]} lists {int((counts > 1).sum())} node(s) more than "
                                f"once (e.g. node {int(counts.argmax())}, {int(counts.max())} "
                                f"times); list each node once (np.unique).")
    names = list(splits)
    for i, first in enumerate(names):
        for second in names[i + 1:]:
            shared = _shared(splits[first], splits[second])
            if shared.numel():
                raise ConveyorError(
                    f"{first} ({paths[first]}) and {second} ({paths[second]}) share "
                    f"{shared.numel()} node(s) (e.g. node {int(shared[0])}); a node scored in the "
                    f"split it was trained or tuned on inflates its accuracy. Make the splits "
                    f"disjoint.")
    return {name: _labelled(name, ids, y, paths[name]) for name, ids in splits.items()}


def _shared(a: Tensor, b: Tensor) -> Tensor:
    return a[torch.isin(a, b)]


def _labelled(name: str, ids: Tensor, y: Tensor, path: Path) -> Tensor:
    unlabelled = y[ids] < 0
    if not unlabelled.any():
        return ids
    if name == "train_idx":
        raise ConveyorError(f"{path} includes {int(unlabelled.sum())} unlabelled node(s) "
                            f"(y = -1, e.g. node {int(ids[unlabelled][0])}); train only on "
                            f"labelled nodes.")
    log.info("%s: %d unlabelled node(s) (y = -1) left out of its accuracy", name,
             int(unlabelled.sum()))
    return ids[~unlabelled]
