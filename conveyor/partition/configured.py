"""Partitions for a run's settings: where they live and how they are made, shared by training with
`run.world_size=K` and the offline `conveyor partition`, so parts made offline are found."""
from __future__ import annotations

import hashlib
import logging
from pathlib import Path
from typing import Dict, Tuple

from conveyor.partition.datasets import load_configured
from conveyor.partition.partitioner import ensure_partitioned
from conveyor.partition.settings import DataSettings, PartitionSettings
from conveyor.partition.store import check_parts_folder

log = logging.getLogger("conveyor")


def partition_dir(data: DataSettings, partition: PartitionSettings, num_hops: int, world_size: int) -> Path:
    """`partition.dir`, or by default
    `<data.root>/partitions/<data><_option value...>_K<k>_L<hops>_<method>`. The saved graph
    fingerprint and settings are checked on reuse, so a stale folder is partitioned again."""
    if partition.dir:
        return Path(partition.dir).expanduser()
    options = {**data.options(), "normalize_features": data.normalize_features}
    # An option left off (false or null: normalize_features, undirected, num_classes) adds nothing.
    suffix = "".join(f"_{k}{option_text(v)}" for k, v in sorted(options.items())
                     if v is not False and v is not None)
    return Path(data.root_folder()) / "partitions" / f"{data.name}{suffix}_K{world_size}_L{num_hops}_{partition.method}"


def option_text(value) -> str:
    """A data option as part of one folder name: a path (`data.path` of data=custom) becomes its
    last part and a digest of the whole, so the folder neither nests nor collides."""
    text = str(value)
    if "/" not in text:
        return text
    digest = hashlib.sha1(text.encode()).hexdigest()[:8]
    return f"{Path(text).name}-{digest}"


def make_partitions(data: DataSettings, partition: PartitionSettings, num_hops: int, world_size: int,
                    force: bool = False) -> Tuple[Path, Dict, bool]:
    """Partition the graph `data` describes for `world_size` ranks and `num_hops` hops (a run's
    len(sampler.fanouts)) into `partition_dir`, unless a matching partitioning is there already
    (and not `force`). Returns (folder, report, reused)."""
    directory = partition_dir(data, partition, num_hops, world_size)
    check_parts_folder(directory)  # before the graph is read
    report, reused = ensure_partitioned(load_configured(data), world_size, num_hops, partition.method, directory,
                                        partition.seed, list(partition.splits), force)
    log.info("%d partitions %s %s: training nodes %s", world_size,
             "reused from" if reused else "made in", directory, [row["train"] for row in report["parts"]])
    return directory, report, reused
