"""What `launch.py` calls: the mode dispatch, above the modes so that imports run one way
(modes -> compare, distributed -> run)."""
from __future__ import annotations

import os

from omegaconf import DictConfig

from .compare import compare
from .config import check_config
from .distributed import train_distributed
from .outdir import lock_out_dir, owns_out_dir
from .run import train


def run(cfg: DictConfig):
    """One training run, data-parallel ranks (run.world_size > 1, or under torchrun), or the
    side-by-side comparison with PyG (mode=compare)."""
    check_config(cfg)
    if owns_out_dir():  # taken already when the conveyor command started the run: a no-op then
        lock_out_dir(cfg.run.out_dir)
    if cfg.mode == "compare":
        return compare(cfg)
    if int(cfg.run.world_size) > 1 or int(os.environ.get("WORLD_SIZE", 1)) > 1:  # or torchrun's
        return train_distributed(cfg)
    return train(cfg)
