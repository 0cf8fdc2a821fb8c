"""What the entry points run once the settings are built and checked: the mode dispatch, above the
modes so that imports run one way (modes -> compare, distributed -> run)."""
from __future__ import annotations

import os

from conveyor.compare.comparison import compare
from conveyor.settings import Settings
from conveyor.trainer.distributed.ranks import train_distributed
from conveyor.trainer.run import train


def run(settings: Settings):
    """One training run, data-parallel ranks (run.world_size > 1, or under torchrun), or the
    side-by-side comparison with PyG (mode=compare). The entry point locked run.out_dir already
    (conveyor/cli.py's `checked`, before it saved the config there)."""
    if settings.mode == "compare":
        return compare(settings, settings.compare)
    if settings.run.world_size > 1 or int(os.environ.get("WORLD_SIZE", 1)) > 1:  # or torchrun's
        return train_distributed(settings)
    return train(settings)
