"""Building a dataset larger than memory: into the mapped layout (partition/mapped.py), atomically.

`cached_mapped(folder, build, stamp)` returns the graph in `folder`, building it first if it is not
there: `build(writer)` fills a `MappedWriter` on a staging folder beside `folder`, which is renamed
into place only once every file is written and flushed and meta.json is written last. A killed
build leaves a staging folder (swept by the next call once its process is gone) and nothing a later
run accepts. A cache is accepted when its stamp matches and every file has the dtype and shape
meta.json records (a truncated file fails to map); unlike the in-memory caches (common.py's
`cached`) its contents are not digested on every load: reading 36 GB to open a graph would cost
minutes.

`check_disk` refuses, before any work, a build the data root's free disk cannot hold.
"""
from __future__ import annotations

import logging
import shutil
import sys
from pathlib import Path
from typing import Callable

from tqdm import tqdm

from conveyor.core.errors import ConveyorError
from conveyor.core.memory import gib
from conveyor.partition.datasets.common import STAMP, build_in_staging, sweep_staging
from conveyor.partition.graph import Graph
from conveyor.partition.mapped import MappedWriter, is_mapped

log = logging.getLogger("conveyor")


def cached_mapped(folder: Path, build: Callable[[MappedWriter], dict], stamp: str) -> Graph:
    """The mapped graph in `folder`, built by `build(writer)` (which returns meta.json's entries:
    kind, name, num_nodes, num_edges, num_classes) when it is missing, stale or damaged."""
    sweep_staging(folder)
    graph = load_intact(folder, stamp)
    if graph is not None:
        return graph

    def write(staging: Path) -> None:
        writer = MappedWriter(staging)
        try:
            writer.commit(**build(writer))
        finally:
            writer.close()
        (staging / STAMP).write_text(stamp)

    build_in_staging(folder, write, lambda: load_intact(folder, stamp))
    return Graph.load(folder)


def load_intact(folder: Path, stamp: str) -> Graph | None:
    """The mapped graph in `folder` if it is complete and of this `stamp`, else None."""
    stamp_file = folder / STAMP
    if not (is_mapped(folder) and stamp_file.exists() and stamp_file.read_text() == stamp):
        return None
    try:
        return Graph.load(folder)
    except ConveyorError as error:  # a file truncated or replaced since
        log.warning("the graph in %s is damaged: rebuilding it (%s)", folder, error)
        return None


def check_disk(root: Path, need: int, what: str, fix: str) -> None:
    """Refuse, in one paragraph, a build of `need` bytes that the disk holding `root` cannot take."""
    existing = next(p for p in (root, *root.absolute().parents) if p.exists())
    free = shutil.disk_usage(existing).free
    if need > free:
        raise ConveyorError(f"{what} takes {gib(need)} on disk, but {existing} (data.root's disk) has "
                            f"{gib(free)} free: the build would fail part way. {fix}")


def progress(total: int, desc: str, unit: str = "node") -> tqdm:
    """A progress bar, shown only when stderr is a terminal (not in logs or tests)."""
    return tqdm(total=total, desc=desc, unit=unit, unit_scale=True, disable=not sys.stderr.isatty(),
                dynamic_ncols=True, leave=False)
