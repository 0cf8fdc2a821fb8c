"""The data's and the partitions' settings (`data.*`, `partition.*`), declared once
(core/fields.py). A dataset with options of its own (synthetic, custom) has its own class,
whose extra fields are exactly the options its loader takes."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import ClassVar, Optional

from conveyor.core.errors import ConveyorError
from conveyor.core.fields import REQUIRED, Section, boolean, choice, declared, integer, number, setting, subset, text
from conveyor.partition.datasets import DATASETS, REGISTRY, dataset_entry
from conveyor.partition.partitioner import METHODS, SPLITS

ROOT_ENV, DEFAULT_ROOT = "CONVEYOR_DATA_ROOT", "~/.cache/conveyor/data"


@dataclass(frozen=True, kw_only=True)
class DataSettings(Section):
    """What every dataset takes; the Planetoid and OGB datasets take nothing else."""
    SECTION: ClassVar[str] = "data"
    OPTIONS: ClassVar[dict] = {  # the config group's options (conf/data/*.yaml), for --help
        "synthetic": "A products-shaped synthetic graph, generated on first use and cached under root (no "
                     "download). scale=1.0 has ogbn-products' sizes (2,449,029 nodes, ~123.7M directed edges, "
                     "100 features, 47 classes).",
        "synthetic_papers": "An ogbn-papers100M-shaped graph built out of core (streaming, into memory-mapped "
                            "files) on first use and cached under root. scale=1.0 has papers100M's sizes "
                            "(111,059,956 nodes, ~1.6B edges, 128 float16 features, 172 classes; ~36 GB on disk).",
        "cora": "Planetoid cora, public split. Offline: conveyor prepare planetoid --root <root>",
        "citeseer": "Planetoid citeseer, public split. Offline: conveyor prepare planetoid --root <root>",
        "pubmed": "Planetoid pubmed, public split. Offline: conveyor prepare planetoid --root <root>",
        "arxiv": "ogbn-arxiv (OGB official split); downloaded by ogb into root when online.",
        "products": "ogbn-products (OGB official split); downloaded by ogb into root when online (~1.4 GB).",
        "papers100m": "ogbn-papers100M (OGB official split); ~57 GB download, converted streaming into memory-mapped "
                      "files (~43 GB; the conversion needs a few GiB of memory).",
        "custom": "Your own graph: data.path=DIR holding edge_index, x, y, train_idx, val_idx, test_idx (.npy "
                  "or .pt). The format: partition/datasets/custom.py.",
        "own": "Your own dataset: data=own data._target_=my.module.load_function, a loader registered with "
               "register_dataset (docs/contributing.md); its own keys as data.KEY=VALUE.",
        "memory": "A graph handed over in Python: conveyor.fit(graph_or_data, ...) (conveyor/fit.py). Nothing "
                  "is loaded; the graph's own x, y and splits are used.",
        "mag": "ogbn-mag (OGB official split), a typed graph: papers (labelled: venue, 349 classes), authors, "
               "institutions, fields, 4 relations plus their reverses; downloaded by ogb into root when online.",
        "synthetic_mag": "An ogbn-mag-shaped typed graph (4 node types, 4 relations plus reverses, skewed degrees, "
                         "learnable labels), generated on first use and cached under root. scale=1.0 has ogbn-mag's "
                         "sizes.",
        "synthetic_movielens": "A MovieLens-shaped typed graph (users, movies with genre and title features, "
                               "timestamped ratings and their reverse; learnable tastes), generated on first use and "
                               "cached under root; for task=link. scale=1.0 has ml-latest-small's sizes."}

    name: str = setting(REQUIRED, "the dataset (the option chosen in group data); own: the one data._target_ "
                                  "names", text())
    root: Optional[str] = setting(None, f"the datasets' folder (and their partitions'); null: ${ROOT_ENV}, "
                                        f"else {DEFAULT_ROOT}", text(nullable=True))
    normalize_features: bool = setting(False, "true: each node's features divided by their sum (PyG's "
                                              "NormalizeFeatures)", boolean())
    _target_: Optional[str] = setting(None, "your own dataset's loader (module.function, registered with "
                                            "register_dataset: docs/contributing.md), with data=own; null: the "
                                            "dataset name", text(nullable=True, hint="e.g. my.module.load_ring"))

    def check(self) -> None:
        if self._target_ is None:
            problem = choice(DATASETS).problem("data.name", self.name)
            if problem:
                raise ConveyorError(problem)

    def root_folder(self) -> str:
        """`root`, or where it points by default: $CONVEYOR_DATA_ROOT, else ~/.cache/conveyor/data."""
        return os.path.expanduser(self.root or os.environ.get(ROOT_ENV) or DEFAULT_ROOT)

    def options(self) -> dict:
        """The options of this dataset's loader (`load_dataset(name, root, **options)`)."""
        return {f.name: getattr(self, f.name) for f in declared(self) if f.name not in COMMON}


COMMON = tuple(f.name for f in declared(DataSettings))


@dataclass(frozen=True, kw_only=True)
class SyntheticData(DataSettings):
    scale: float = setting(0.02, "nodes and edges as a fraction of ogbn-products' (0.02: ~49K nodes)",
                           number(0, 64, low_open=True))
    seed: int = setting(0, "the generator's seed: another seed, another graph (each cached)", integer())
    num_features: int = setting(100, "feature columns (a noisy signal of the class)", integer(1))
    num_classes: int = setting(47, "planted classes, with homophily", integer(2))


@dataclass(frozen=True, kw_only=True)
class SyntheticPapersData(DataSettings):
    scale: float = setting(0.01, "nodes and edges as a fraction of ogbn-papers100M's (0.01: ~1.1M nodes, 16M "
                                 "edges, ~360 MB on disk)", number(0, 4, low_open=True))
    seed: int = setting(0, "the generator's seed: another seed, another graph (each cached)", integer())


@dataclass(frozen=True, kw_only=True)
class CustomData(DataSettings):
    path: str = setting(REQUIRED, "the folder of your arrays (required)", text(hint="the folder of your arrays"))
    undirected: bool = setting(False, "true: add the reverse of every edge (e.g. a citation graph stored one "
                                      "way)", boolean())
    num_classes: Optional[int] = setting(None, "null: one more than the largest label in y",
                                         integer(2, nullable=True, hint="null: one more than the largest label"))


@dataclass(frozen=True, kw_only=True)
class SyntheticMagData(DataSettings):
    scale: float = setting(0.02, "nodes and edges as a fraction of ogbn-mag's (0.02: ~15K papers, ~39K nodes)",
                           number(0, 4, low_open=True))
    seed: int = setting(0, "the generator's seed: another seed, another graph (each cached)", integer())
    num_features: int = setting(128, "the papers' feature columns (authors 64, institutions 16, fields 32)",
                                integer(1))
    num_classes: int = setting(20, "planted classes of the papers (their venues), with homophily", integer(2))


@dataclass(frozen=True, kw_only=True)
class SyntheticMovieLensData(DataSettings):
    scale: float = setting(0.1, "users, movies and ratings as a fraction of MovieLens' (ml-latest-small: 610 users, "
                                "9,742 movies, 100,836 ratings; 0.1: ~10K ratings)", number(0, 4, low_open=True))
    seed: int = setting(0, "the generator's seed: another seed, another graph (each cached)", integer())
    num_features: int = setting(404, "the movies' feature columns: 20 genre flags, then a title-embedding stand-in",
                                integer(21))


def data_settings(name, target: Optional[str] = None) -> type:
    """The settings class of dataset `name` (or of the loader `target` names): its registry
    entry's (partition/datasets/registry.py), DataSettings for one without options of its own."""
    if target is None and name not in REGISTRY:
        return DataSettings  # refused by name as it is built
    return dataset_entry(name, target).settings_class() or DataSettings


# the datasets with options of their own (their registry entries name these classes)
DATA_SETTINGS = {name: entry.settings_class() for name, entry in REGISTRY.items() if entry.settings}


def dataset_options(name: str, target: Optional[str] = None) -> tuple:
    """The options dataset `name`'s loader takes."""
    return tuple(f.name for f in declared(data_settings(name, target)) if f.name not in COMMON)


@dataclass(frozen=True, kw_only=True)
class PartitionSettings(Section):
    SECTION: ClassVar[str] = "partition"
    OPTIONS: ClassVar[dict] = {  # the config group's options (conf/partition/*.yaml), for --help
        "pagraph": "PaGraph's streaming greedy: each training node goes to the part that already holds most of "
                   "its L-hop in-neighbourhood's training nodes, weighed against the part's size; counts "
                   "differ by <= 1.",
        "random": "Training nodes dealt to the parts at random (counts differ by <= 1): the baseline.",
        "metis": "METIS (pymetis, the `metis` extra) balancing nodes and training nodes, then rebalanced so "
                 "that training counts differ by <= 1."}

    method: str = setting(REQUIRED, "how run.world_size > 1 splits the graph into self-reliant parts, one per "
                                    "rank, each holding the L-hop in-neighbourhood (L = len(sampler.fanouts)) "
                                    "of the nodes it owns (the option chosen in group partition)", choice(METHODS))
    dir: Optional[str] = setting(None, "where the parts are kept (null: under data.root)", text(nullable=True))
    seed: int = setting(0, "stream order, tie-breaks and rebalancing", integer())
    splits: list = setting(list(SPLITS), "splits given to the parts with their neighbourhoods; drop test when "
                                         "it is most of the graph (products: 90%) to keep the parts small",
                           subset(SPLITS))
