"""`Part` and its folder on disk: partitions are made once, offline, and memory-mapped by each rank.

```
<dir>/partition.json        what was partitioned and how (fingerprint, num_parts, num_hops, method,
                            seed, splits) and the report; written last, so its presence means
                            every part is complete
<dir>/part<k>/graph.pt      the local Graph (`Graph.save`: CSC, x, y, owned train/val/test ids)
<dir>/part<k>/meta.json
<dir>/part<k>/node_ids.pt   global id of each local node
<dir>/part<k>/degree_ranking.pt  local ids by local out-degree, highest first
<dir>/part<k>/info.json     the part's sizes
```
Everything is written into a hidden sibling folder that is renamed into place, so a crash never
leaves a half-written partitioning behind a valid `partition.json`.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterable, List, Optional

import torch
from torch import Tensor

from conveyor.core.errors import ConveyorError
from conveyor.core.leftovers import sweep_dead
from conveyor.core.symlink_safety import refuse_link
from conveyor.partition.graph import Graph, load_saved

FORMAT_VERSION = 1
PARTITIONS_ELSEWHERE = "give the partitions another folder"  # the fix a refused link's paragraph names


@dataclass
class Part:
    """One rank's self-reliant share of the graph, in local ids."""
    graph: Graph  # local CSC graph; train/val/test_idx: the local ids of the nodes this part owns
    node_ids: Tensor  # global id of each local node, ascending
    degree_ranking: Tensor  # local ids by local out-degree, highest first (the cache's order)
    info: Dict = field(default_factory=dict)  # rank, num_parts, num_hops, method, sizes, ...

    @property
    def rank(self) -> int:
        return int(self.info["rank"])


def save_part(part: Part, directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    part.graph.save(directory)
    torch.save(part.node_ids.contiguous(), directory / "node_ids.pt")
    torch.save(part.degree_ranking.contiguous(), directory / "degree_ranking.pt")
    (directory / "info.json").write_text(json.dumps(part.info, indent=1))


COMMON_INFO = ("num_parts", "num_hops", "method", "seed", "splits", "graph", "graph_nodes",
               "graph_edges", "fingerprint")


def check_parts_folder(directory) -> None:
    """Refuse, before the graph is read, a partitions folder that cannot be made: its nearest
    existing ancestor must take a new folder (probed: /proc, a read-only mount, a file)."""
    directory = Path(directory).expanduser().absolute()
    existing = next(p for p in (directory, *directory.parents) if p.exists() or p.is_symlink())
    if existing == directory and directory.is_dir():
        return
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".conveyor-probe-", dir=existing))
    except OSError as error:
        raise ConveyorError(f"cannot make the partitions folder {directory}: {existing} "
                            f"{'is not a folder' if not existing.is_dir() else 'takes no new folder'} "
                            f"({error.strerror}); set partition.dir to a folder you can write to.") from None


def save_parts(parts: Iterable[Part], directory) -> Dict:
    """Save parts (a list, or a generator so that one part at a time is in memory), then
    `partition.json`; replaces an earlier partitioning in `directory`. Returns the header."""
    directory = Path(directory).expanduser()
    refuse_link(directory, PARTITIONS_ELSEWHERE)
    if directory.exists() and any(directory.iterdir()) and not (directory / "partition.json").exists():
        raise ConveyorError(f"{directory} exists and is not a partition folder (no partition.json); "
                            f"choose an empty or new folder for the partitions.")
    directory.parent.mkdir(parents=True, exist_ok=True)
    sweep_killed_saves(directory)
    # A fresh side folder of a name nobody could plant ahead (mkdtemp), where the parts are built.
    tmp = Path(tempfile.mkdtemp(prefix=f".{directory.name}.tmp-{os.getpid()}.", dir=directory.parent))
    tmp.chmod(0o755)  # mkdtemp makes it private; the parts are for everyone who reads the folder
    try:
        infos = []
        for part in parts:
            save_part(part, tmp / f"part{part.rank}")
            infos.append(part.info)
        if not infos:
            raise ConveyorError("save_parts needs at least one part.")
        header = {k: infos[0][k] for k in COMMON_INFO if k in infos[0]}
        header.update(version=FORMAT_VERSION, seconds=infos[0].get("seconds", {}), parts=infos)
        (tmp / "partition.json").write_text(json.dumps(header, indent=1))
        put_in_place(tmp, directory)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return header


def put_in_place(tmp: Path, directory: Path) -> None:
    """`tmp` renamed to `directory`. An earlier partitioning there is first renamed aside and
    removed after: the folder is missing only between two renames, not while one is deleted (a
    builder finishing meanwhile, or a reader, once found no partitioning there)."""
    aside = directory.parent / f".{directory.name}.old-{os.getpid()}.{os.urandom(4).hex()}"
    try:
        os.rename(directory, aside)
    except FileNotFoundError:
        aside = None
    os.replace(tmp, directory)
    if aside is not None:
        shutil.rmtree(aside, ignore_errors=True)


def sweep_killed_saves(directory) -> None:
    """Delete the side folders of partitionings into `directory` killed before they finished,
    and the earlier partitionings they had put aside (named after their process; a live one's stay)."""
    directory = Path(directory).expanduser()
    for side in (".tmp-", ".old-"):
        sweep_dead(directory.parent, f".{directory.name}{side}")


def read_header(directory) -> Optional[Dict]:
    """The folder's partition.json, or None when there is no complete partitioning there."""
    path = Path(directory).expanduser() / "partition.json"
    if not path.exists():
        return None
    header = load_saved(path, path.parent)
    return header if header.get("version") == FORMAT_VERSION else None


def load_part(directory, rank: int, mmap: bool = True) -> Part:
    """Part `rank` of a saved partitioning, memory-mapped (what one data-parallel rank loads)."""
    directory = Path(directory).expanduser()
    header = read_header(directory)
    if header is None:
        raise ConveyorError(f"no complete partitioning in {directory} (partition.json missing); "
                            f"make one with `conveyor partition ...` or load_or_partition().")
    if not 0 <= int(rank) < header["num_parts"]:
        raise ConveyorError(f"{directory} has {header['num_parts']} parts (ranks 0.."
                            f"{header['num_parts'] - 1}), not rank {rank}; partition again for "
                            f"this run.world_size.")
    where = directory / f"part{int(rank)}"
    load = lambda name: load_saved(where / name, directory, mmap)  # noqa: E731
    return Part(Graph.load(where, mmap=mmap, rebuilt_from=directory), load("node_ids.pt"),
                load("degree_ranking.pt"), load("info.json"))


def load_parts(directory, mmap: bool = True) -> List[Part]:
    header = read_header(directory)
    if header is None:
        raise ConveyorError(f"no complete partitioning in {directory} (partition.json missing).")
    return [load_part(directory, k, mmap) for k in range(header["num_parts"])]
