"""Partitions for a run's config: where they live and how they are made, shared by training with
`run.world_size=K` and the offline `conveyor partition`, so parts made offline are found."""
from __future__ import annotations

import hashlib
import logging
from pathlib import Path
from typing import Dict, Tuple

from omegaconf import OmegaConf

from .datasets import load_configured
from .partitioner import SPLITS, ensure_partitioned

log = logging.getLogger("conveyor")


def partition_dir(cfg, world_size: int) -> Path:
    """`partition.dir`, or by default
    `<data.root>/partitions/<data><_option value...>_K<k>_L<hops>_<method>`. The saved graph
    fingerprint and settings are checked on reuse, so a stale folder is partitioned again."""
    if cfg.partition.get("dir"):
        return Path(str(cfg.partition.dir)).expanduser()
    options = OmegaConf.to_container(cfg.data, resolve=True)
    root = Path(str(options.pop("root", None) or "~/.cache/conveyor/data")).expanduser()
    name = options.pop("name")
    # An option left off (false or null: normalize_features, undirected, num_classes) adds nothing.
    suffix = "".join(f"_{k}{option_text(v)}" for k, v in sorted(options.items())
                     if v is not False and v is not None)
    return (root / "partitions" /
            f"{name}{suffix}_K{world_size}_L{len(cfg.sampler.fanouts)}_{cfg.partition.method}")


def option_text(value) -> str:
    """A data option as part of one folder name: a path (`data.path` of data=custom) becomes its
    last part and a digest of the whole, so the folder neither nests nor collides."""
    text = str(value)
    if "/" not in text:
        return text
    digest = hashlib.sha1(text.encode()).hexdigest()[:8]
    return f"{Path(text).name}-{digest}"


def make_partitions(cfg, world_size: int, force: bool = False) -> Tuple[Path, Dict, bool]:
    """Partition the configured graph for `world_size` ranks (L = len(sampler.fanouts)) into
    `partition_dir`, unless a matching partitioning is there already (and not `force`).
    Returns (folder, report, reused)."""
    directory = partition_dir(cfg, world_size)
    report, reused = ensure_partitioned(
        load_configured(cfg.data), world_size, len(cfg.sampler.fanouts),
        str(cfg.partition.method), directory, int(cfg.partition.get("seed", 0)),
        list(cfg.partition.get("splits") or SPLITS), force)
    log.info("%d partitions %s %s: training nodes %s", world_size,
             "reused from" if reused else "made in", directory, [row["train"] for row in report["parts"]])
    return directory, report, reused
