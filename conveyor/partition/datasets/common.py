"""Helpers the loaders share: the final dtype/validation pass, a reachability probe, the disk cache."""
from __future__ import annotations

import logging
import os
import shutil
import tempfile
import threading
import urllib.request
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from conveyor.core.errors import ConveyorError
from conveyor.core.leftovers import sweep_dead
from conveyor.partition.digest import contents_digest, same_contents
from conveyor.partition.graph import Graph

log = logging.getLogger("conveyor")
STAMP, FINGERPRINT = "stamp.txt", "fingerprint.txt"
STAGING_PREFIX = ".staging-"  # + "<pid>.<cache name>.<random>": a cache being built (see `cached`)


def finish(graph: Graph, name: str, num_classes: int) -> Graph:
    """Cast to the dtypes every stage expects (x float32, y and splits int64) and validate."""
    if graph.x is not None:
        graph.x = graph.x.to(torch.float32)
    if graph.y is not None:
        graph.y = graph.y.reshape(-1).to(torch.long)
    for split in ("train_idx", "val_idx", "test_idx"):
        idx = getattr(graph, split)
        if idx is not None:
            setattr(graph, split, idx.reshape(-1).to(torch.long))
    graph.name, graph.num_classes = name, int(num_classes)
    return graph.validate()


def as_tensor(array) -> torch.Tensor:
    """A torch tensor from a numpy array or tensor, without copying when the dtype allows it."""
    if isinstance(array, torch.Tensor):
        return array
    return torch.from_numpy(np.require(array, requirements=["C", "W"]))  # copies only if needed


def symmetrise(edge_index: torch.Tensor) -> torch.Tensor:
    """Both directions of every edge; `Graph.from_edge_index` drops the duplicates this makes."""
    return torch.cat([edge_index, edge_index.flip(0)], dim=1)


def reachable(url: str, timeout: float = 3.0) -> bool:
    """True when `url` answers within `timeout` seconds (a HEAD request).

    Run in a daemon thread because a DNS lookup ignores socket timeouts and can hang for far
    longer than a user should wait to learn that the machine is offline.
    """
    answer = []

    def probe():
        try:
            with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=timeout):
                answer.append(True)
        except Exception:  # any failure (DNS, refused, HTTP error, proxy) means "do not try"
            answer.append(False)

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    thread.join(timeout + 1.0)
    return bool(answer and answer[0])


def check_options(name: str, options: dict, allowed: tuple[str, ...]) -> None:
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        takes = ", ".join(allowed) if allowed else "no options"
        raise ConveyorError(f"dataset {name!r} does not take option(s) {', '.join(unknown)}; it takes: "
                            f"{takes}. Remove the extra keys from the data config.")


def cached(directory: Path, build: Callable[[], Graph], stamp: str = "") -> Graph:
    """`Graph.load(directory, mmap=True)`, building and saving the graph first if it is not there.

    `stamp` names what built the graph (e.g. a generator version): a cache with another stamp is
    rebuilt. The graph is written to a side folder that is renamed into place once complete, so a
    crash never leaves half a cache, and two processes building at once both end with a whole one;
    side folders of killed builds are swept on every call, before the load: a cache that exists is
    never rebuilt, so a sweep only at build time would leave them forever. The graph's fingerprint
    is stored beside it and checked on every load: a cache that was truncated or overwritten since
    is rebuilt.
    """
    sweep_staging(directory)
    graph = _load_intact(directory, stamp)
    if graph is not None:
        return graph

    def write(staging: Path) -> None:
        built = build()
        built.save(staging)
        (staging / FINGERPRINT).write_text(contents_digest(built))
        (staging / STAMP).write_text(stamp)

    build_in_staging(directory, write, lambda: _load_intact(directory, stamp))
    return Graph.load(directory, mmap=True)


def build_in_staging(directory: Path, write: Callable[[Path], None], intact: Callable[[], object]) -> None:
    """Replace `directory` by what `write(staging)` writes into a side folder beside it, renamed
    into place once complete (a killed build leaves only the side folder, which `sweep_staging`
    deletes later). `intact()`: the cache another process may have put there first, or None."""
    shutil.rmtree(directory, ignore_errors=True)  # incomplete, stale or damaged: not a cache
    directory.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f"{STAGING_PREFIX}{os.getpid()}.{directory.name}.",
                                    dir=directory.parent))
    staging.chmod(0o755)  # mkdtemp makes it private; the cache is for everyone who reads root
    try:
        write(staging)
        os.rename(staging, directory)
    except OSError:
        if intact() is None:  # not just another process winning the race
            raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def sweep_staging(directory: Path) -> None:
    """Delete the staging folders beside the cache `directory` of builds whose process is gone,
    whichever cache they were building (another scale's too), and never a live build's."""
    sweep_dead(directory.parent, STAGING_PREFIX)
    sweep_dead(directory.parent, f".{directory.name}.")  # the name they had before STAGING_PREFIX


def _load_intact(directory: Path, stamp: str) -> Graph | None:
    """The cached graph if it is complete, of this `stamp`, and has its fingerprint; else None."""
    stamp_file, fingerprint_file = directory / STAMP, directory / FINGERPRINT
    if not (stamp_file.exists() and fingerprint_file.exists() and stamp_file.read_text() == stamp):
        return None
    try:
        graph = Graph.load(directory, mmap=True)
        intact = same_contents(graph, fingerprint_file.read_text())
    except ConveyorError as error:  # truncated, or not a graph at all
        log.warning("the cached graph in %s is damaged: rebuilding it (%s)", directory, error)
        return None
    if not intact:
        log.warning("the cached graph in %s changed since it was written: rebuilding it", directory)
        return None
    return graph
