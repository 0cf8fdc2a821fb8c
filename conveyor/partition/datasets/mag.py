"""ogbn-mag through the `ogb` package, with the official split: a typed graph (partition/hetero.py).

Papers (736,389; 128 features, the venue as label of 349 classes, a `year`), authors (1,134,649),
institutions (8,740) and fields of study (59,965), without features but the papers' (the models
give the others a learned embedding per node, as OGB's R-GCN example does); the relations
`author -affiliated_with-> institution`, `author -writes-> paper`, `paper -cites-> paper`,
`paper -has_topic-> field_of_study`, each with its reverse (`rev_<relation>`, PyG's ToUndirected
names), so every node type receives messages. The split is by year (train before 2018, valid
2018, test 2019), on the papers.

`root` holds the copy as ogb lays it out (`<root>/ogbn_mag/{raw,processed,split}/...`); the first
load converts it into a typed graph saved at `<root>/ogbn_mag/conveyor/`, which later loads
memory-map without ogb. Offline, a ConveyorError says where to put the archive.
"""
from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import torch

from conveyor.core.errors import ConveyorError
from conveyor.partition.datasets.common import as_tensor, cached, reachable
from conveyor.partition.datasets.ogbn import _meta, _unattended_ogb
from conveyor.partition.hetero import TypedGraph, typed_graph, with_target

OGB_NAME = "ogbn-mag"


def _dataset(root: Path, folder: Path):
    """ogb's NodePropPredDataset of ogbn-mag, unattended and loading nothing but arrays."""
    processed = folder / "processed" / "data_processed"
    if (folder / "raw").is_dir():  # ogb saves its processed copy there without creating it
        (folder / "processed").mkdir(exist_ok=True)
    with _unattended_ogb() as NodePropPredDataset:
        try:
            dataset = NodePropPredDataset(name=OGB_NAME, root=str(root))
            return dataset, dataset.get_idx_split()
        except (pickle.UnpicklingError, RuntimeError, EOFError) as err:
            if not processed.exists():
                raise
            raise ConveyorError(f"cannot read ogb's processed copy {processed} ({str(err).splitlines()[0]}): it is "
                                f"damaged or holds more than arrays, and nothing in it was run. Delete it to rebuild "
                                f"it from {folder / 'raw'}.") from err
        except FileNotFoundError as err:
            raise ConveyorError(f"the {OGB_NAME} copy in {folder} has no split files ({err.filename}); unzip the "
                                f"complete archive again.") from err


def build_mag(dataset, split: dict) -> TypedGraph:
    """ogb's arrays of ogbn-mag as a typed graph labelled on the papers (module doc)."""
    data, labels = dataset.graph, dataset.labels
    counts = {t: int(n) for t, n in data["num_nodes_dict"].items()}
    edges = {}
    for (src, relation, dst), edge_index in data["edge_index_dict"].items():
        edges[(src, relation, dst)] = as_tensor(np.asarray(edge_index)).long()
        edges[(dst, f"rev_{relation}", src)] = edges[(src, relation, dst)].flip(0)
    paper = data["node_feat_dict"]["paper"]
    year = {("paper", "year"): as_tensor(np.asarray(data["node_year"]["paper"]).reshape(-1).astype(np.int64))}
    graph = typed_graph(counts, edges, x={"paper": as_tensor(np.asarray(paper, dtype=np.float32))}, node=year,
                        name="mag")
    splits = {name: as_tensor(np.asarray(split[key]["paper"])) for name, key in
              (("train", "train"), ("val", "valid"), ("test", "test"))}
    y = torch.from_numpy(np.asarray(labels["paper"]).reshape(-1).astype(np.int64))
    return with_target(graph, "paper", y, dataset.num_classes, splits)


def load_mag(root: str | Path) -> TypedGraph:
    meta = _meta(OGB_NAME)
    folder = Path(root) / "ogbn_mag"  # ogb's own folder name
    # what ogb looks for before it decides to download
    has_copy = any((folder / p).exists() for p in ("processed/data_processed", "raw/triplet-type-list.csv.gz"))
    if not (folder / "conveyor" / "stamp.txt").exists() and not has_copy:
        if not reachable(meta["url"]):
            raise ConveyorError(
                f"{OGB_NAME} is not in {folder} and {meta['url']} is unreachable (offline?). Download that zip "
                f"elsewhere, unzip it into {Path(root)} and rename the folder it makes ('{meta['download_name']}') to "
                f"{folder.name}, so that {folder / 'raw'} and {folder / 'split'} exist; or point data.root at a "
                f"directory that holds it. Offline, data=synthetic_mag is an ogbn-mag-shaped graph to train on.")
    return cached(folder / "conveyor", lambda: build_mag(*_dataset(Path(root), folder)), stamp=OGB_NAME)
