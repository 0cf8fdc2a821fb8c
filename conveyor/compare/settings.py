"""The comparison's own settings (`compare.*`), declared once (core/fields.py)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Optional

from conveyor.core.fields import Rule, Section, integer, number, setting


@dataclass(frozen=True, kw_only=True)
class CompareSettings(Section):
    SECTION: ClassVar[str] = "compare"
    seeds: int = setting(3, "mode=compare: runs per system", integer(1))
    target_val_acc: Optional[float] = setting(
        None, "time-to-accuracy target (task=link: of the val ROC-AUC); null: 0.98 x the reference's best mean val "
              "acc (auc)",
        number(0, 1, low_open=True, nullable=True, hint="null: 0.98 x the reference's best mean val accuracy"))
    pyg_workers: Any = setting(
        "auto", "the reference's NeighborLoader worker processes, kept across epochs (PyG's products example "
        "uses 12); auto: min(12, cores - 2), at least 1; 0: sample in the training process",
        Rule("auto or an integer >= 0", lambda v: v == "auto" or type(v) is int and v >= 0,
             hint="the PyG reference's NeighborLoader worker processes"))
