"""The datasets: an open set with one registry. Each entry says how its graph is loaded and what it
is (a typed graph, read from data.root or not, its own settings, what is checked before any work,
its class and feature counts where known before loading); every such question is asked of the
entry, by the loader, the machine checks (trainer/config.py) and the comparison alike.

A dataset is a function `load(root, **options) -> Graph` (`root`: data.root's folder; `options`:
its own settings' fields) registered with `register_dataset`, as GraphBolt's `@functional_datapipe`
registers a datapipe:

    @register_dataset("ring", settings="my.module.RingData")   # in your module
    def load_ring(root, size=12): ...                           # data=own data._target_=my.module.load_ring

conveyor's own are registered by name in partition/datasets/__init__.py, their modules imported only
when one is loaded. Every target is a "module.attribute" string, imported when used.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

from conveyor.core.errors import ConveyorError
from conveyor.core.targets import load_target, registered, registrar


@dataclass(frozen=True)
class DatasetEntry:
    """One dataset: `load` its loader; `settings` its own settings class (a DataSettings subclass;
    None: the shared keys only); `typed` a typed graph (partition/hetero.py); `root` whether it keeps
    files under data.root; `by_name` whether its loader takes the name first (a family of datasets:
    load(name, root)); `check` a function of the data settings run before any work (room, extras,
    folders); `widths` one returning (classes, features) known before loading."""
    name: str
    load: Optional[str]  # None: nothing to load (data=memory)
    help: str = ""
    settings: Optional[str] = None
    typed: bool = False
    root: bool = True
    by_name: bool = False
    check: Optional[str] = None
    widths: Optional[str] = None

    def loader(self) -> Callable:
        return load_target(self.load, f"data={self.name}")

    def settings_class(self):
        return load_target(self.settings, f"data={self.name}'s settings") if self.settings else None

    def check_settings(self, data) -> None:
        if self.check is not None:
            load_target(self.check, f"data={self.name}")(data)

    def known_widths(self, data) -> tuple:
        """(classes, features) where known before loading, else None in their place."""
        if self.widths is not None:
            return load_target(self.widths, f"data={self.name}")(data)
        return getattr(data, "num_classes", None), getattr(data, "num_features", None)


REGISTRY: dict = {}


def register_dataset(name: str, load: Optional[str] = None, **entry) -> Callable:
    """Register dataset `name` (`entry`: DatasetEntry's fields). With `load` ("module.function") it
    registers now; without, it is a decorator of the loader."""
    return registrar(REGISTRY, name, load, lambda n, t: DatasetEntry(n, t, **entry), "dataset_entry")


def dataset_entry(name: str, target: Optional[str] = None) -> DatasetEntry:
    """The entry of dataset `name`, or of the loader `target` names (data._target_), which its
    module registered when imported."""
    if target is not None:
        return registered(REGISTRY, target, "load", "dataset_entry", "dataset",
                          "conveyor.partition.datasets.register_dataset")
    key = str(name).lower()
    if key not in REGISTRY:
        raise ConveyorError(f"unknown dataset {name!r}; choose one of: {', '.join(REGISTRY)} (or your own: data=own "
                            f"data._target_=module.load_function).")
    return REGISTRY[key]
