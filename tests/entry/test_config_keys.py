"""Every key is declared once, in its stage's settings (default, meaning, accepted values), and
conf/'s YAML holds only what each option changes: every option composes into settings, every
option is described, no option file restates a default, and `--help` shows every key with the
meaning its declaration gives (the same declarations the config check reads)."""
import inspect

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from conveyor.compose import CONF
from conveyor.core.fields import REQUIRED, declared, default_of
from conveyor.partition import Graph
from conveyor.partition.datasets import DATASETS, load_configured
from conveyor.partition.datasets.custom import load_custom
from conveyor.partition.datasets.synthetic import load_synthetic
from conveyor.partition.datasets.synthetic_mag import load_synthetic_mag
from conveyor.partition.datasets.synthetic_movielens import load_synthetic_movielens
from conveyor.partition.datasets.synthetic_papers import load_synthetic_papers
from conveyor.partition.settings import DATA_SETTINGS, dataset_options
from conveyor.settings import Settings
from conveyor.usage import help_text, option_files, sections
from tests.helpers import make_config, write_custom_dataset

OWN_DATA = "data._target_=conveyor.partition.datasets.synthetic_papers.load_synthetic_papers"  # any registered loader
EVERY_OPTION = [(group, option) for group, options in option_files().items() for option in options]


def settings_classes(cls=Settings):
    """Every settings class a run is built from, the datasets' own included."""
    found = [cls]
    for f in declared(cls):
        if f.metadata.get("section"):
            found += settings_classes(f.default_factory)
    return found + (list(DATA_SETTINGS.values()) if cls is Settings else [])


def test_each_datasets_options_are_what_its_loader_takes():
    loaders = {"synthetic": load_synthetic, "custom": load_custom, "synthetic_mag": load_synthetic_mag,
               "synthetic_papers": load_synthetic_papers, "synthetic_movielens": load_synthetic_movielens}
    for name in DATASETS:
        own = set(dataset_options(name))
        if name in loaders:
            assert own <= set(inspect.signature(loaders[name]).parameters), name
        else:
            assert own == set(), name
    assert set(make_config("data=synthetic").data.options()) == {"scale", "seed", "num_features", "num_classes"}
    assert make_config("data=synthetic_papers", "data.scale=0.001").data.options() == {"scale": 0.001, "seed": 0}


def test_custom_takes_undirected_without_a_plus(tmp_path):
    directory = write_custom_dataset(tmp_path / "g", num_nodes=40, train_idx=range(10))
    settings = make_config("data=custom", f"data.path={directory}", "data.undirected=true",
                           f"run.out_dir={tmp_path / 'run'}")
    graph = load_configured(settings.data)
    edges = torch.as_tensor(np.load(directory / "edge_index.npy"))
    both_ways = Graph.from_edge_index(torch.cat([edges, edges.flip(0)], dim=1), 40)
    assert torch.equal(graph.indptr, both_ways.indptr) and torch.equal(graph.indices, both_ways.indices)
    one_way = load_configured(make_config("data=custom", f"data.path={directory}").data)
    assert one_way.num_edges < graph.num_edges


@pytest.mark.parametrize("group, option", EVERY_OPTION)
def test_every_option_builds_its_settings(tmp_path, group, option):
    extra = {("data", "custom"): [f"data.path={tmp_path}"],  # your own: any registered loader serves
             ("data", "own"): [OWN_DATA]}.get((group, option), [])
    settings = make_config(f"{group}={option}", f"run.out_dir={tmp_path / 'run'}", *extra)
    naming = {"data": "name", "model": "name", "sampler": "name", "cache": "policy", "partition": "method",
              "pipeline": "name", "task": "name"}[group]
    assert getattr(getattr(settings, group), naming) == option


def test_every_option_is_described_and_every_description_is_an_option():
    for group, options in option_files().items():
        assert sorted(sections()[group].OPTIONS) == options, group


@pytest.mark.parametrize("cls", settings_classes(), ids=lambda cls: cls.__name__)
def test_every_key_is_declared_with_a_meaning_and_what_it_accepts(cls):
    for f in declared(cls):
        assert f.metadata["help"].strip() or f.metadata.get("section"), f"{cls.__name__}.{f.name}"
        assert f.metadata.get("rule") or f.metadata.get("section"), f"{cls.__name__}.{f.name}"


def flat(tree: dict, prefix: str = "") -> dict:
    values = {}
    for key, value in tree.items():
        values.update(flat(value, f"{prefix}{key}.") if isinstance(value, dict) else {prefix + key: value})
    return values


def declared_defaults() -> dict:
    """dotted key -> its declared default, for every key of every section and dataset."""
    defaults = {}
    for cls in settings_classes():
        prefix = f"{cls.SECTION}." if cls.SECTION else ""
        defaults.update({prefix + f.name: default_of(f) for f in declared(cls) if not f.metadata.get("section")})
    return defaults


@pytest.mark.parametrize("group, option", EVERY_OPTION)
def test_no_option_file_restates_a_default(group, option):
    """A default is stated once, in its declaration: an option file sets only what it changes."""
    path = CONF / group / f"{option}.yaml"
    values = OmegaConf.to_container(OmegaConf.load(path))
    values.pop("defaults", None)
    if "# @package _global_" not in path.read_text():
        values = {group: values}
    defaults = declared_defaults()
    restated = [key for key, value in flat(values).items()
                if key in defaults and defaults[key] != REQUIRED and defaults[key] == value]
    assert restated == [], f"{path.name} restates the default of {restated}"


@pytest.mark.parametrize("group, option", EVERY_OPTION)
def test_help_shows_every_key_with_its_declared_meaning(group, option):
    extra = {"custom": ["data.path=/tmp"], "own": [OWN_DATA]}.get(option, [])
    shown = help_text([f"{group}={option}", *extra]).splitlines()
    settings = make_config(f"{group}={option}", *extra)
    for key in flat(settings.to_dict()):
        line = next((i for i, text in enumerate(shown) if text.startswith(f"  {key}=")), None)
        assert line is not None, key
        following = " ".join(text.strip() for text in shown[line:line + 8])
        assert len(following) > len(shown[line].split()[0]) + 3, f"{key} has no meaning in --help"


def test_help_reads_the_declarations():
    shown = " ".join(help_text(["partition=metis"]).split())  # the wrapped lines as one text
    assert "batches between reads of the loss from the device (progress bar" in shown
    assert "the epoch's figures are exact whatever it is" in shown
    assert "METIS (pymetis, the `metis` extra)" in shown
    assert "Sampler, feature loader and trainer in three processes" in shown
    assert "A fraction of the nodes in [0, 1]" in shown
