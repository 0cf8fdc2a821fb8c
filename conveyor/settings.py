"""`Settings`: every section of a run, as the entry points build it from the composed config
(conveyor/config.py) and check it, once: the training's sections (`conveyor.trainer.settings.
TrainingSettings`), the mode and the comparison's (`conveyor.compare.settings.CompareSettings`).
`conveyor.modes.run` hands the training its sections and `mode=compare` its own."""
from __future__ import annotations

from dataclasses import dataclass

from conveyor.compare.settings import CompareSettings
from conveyor.core.fields import choice, section, setting
from conveyor.trainer.settings import TrainingSettings

MODES = ("train", "compare")


@dataclass(frozen=True, kw_only=True)
class Settings(TrainingSettings):
    """A run's whole settings: `TrainingSettings` and what only the entry point reads."""
    mode: str = setting("train", "train | compare (conveyor beside a plain PyG reference)", choice(MODES))
    compare: CompareSettings = section(CompareSettings)
