"""Every key a component reads is declared in conf/'s YAML (so no `+KEY=` is ever needed),
and every key has a meaning there, which `--help` shows (conveyor/usage.py reads the comments)."""
import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from conveyor.compose import compose_config
from conveyor.partition import Graph
from conveyor.partition.datasets import DATASETS, OPTIONS, load_configured
from conveyor.trainer.config import check_config
from conveyor.trainer.schema import PIPELINE_KEYS, SCHEMA, data_rules, leaf_keys
from conveyor.usage import key_meanings, leaves, option_files
from tests.configs import make_config
from tests.graphs import write_custom_dataset

EVERY_OPTION = [(group, option) for group, options in option_files().items() for option in options]


def composed(group: str, option: str):
    """The config for one option, and the options chosen in every group."""
    cfg = compose_config([f"{group}={option}"], with_hydra=True)
    choices = {g: str(o) for g, o in cfg.hydra.runtime.choices.items() if "/" not in g}
    values = OmegaConf.to_container(cfg, resolve=False)
    values.pop("hydra")
    return values, choices


@pytest.mark.parametrize("name", sorted(set(DATASETS) - {"memory"}))
def test_each_dataset_yaml_declares_every_option_its_loader_reads(name):
    declared = set(make_config(f"data={name}").data.keys())
    assert {"name", "root", "normalize_features", *OPTIONS.get(name, ())} <= declared


def test_custom_takes_undirected_without_a_plus(tmp_path):
    directory = write_custom_dataset(tmp_path / "g", num_nodes=40, train_idx=range(10))
    cfg = make_config("data=custom", f"data.path={directory}", "data.undirected=true",
                      f"run.out_dir={tmp_path / 'run'}")
    check_config(cfg)
    graph = load_configured(cfg.data)
    edges = torch.as_tensor(np.load(directory / "edge_index.npy"))
    both_ways = Graph.from_edge_index(torch.cat([edges, edges.flip(0)], dim=1), 40)
    assert torch.equal(graph.indptr, both_ways.indptr) and torch.equal(graph.indices, both_ways.indices)
    one_way = load_configured(make_config("data=custom", f"data.path={directory}").data)
    assert one_way.num_edges < graph.num_edges


@pytest.mark.parametrize("group, option", EVERY_OPTION)
def test_every_key_the_schema_checks_is_declared(group, option):
    cfg = make_config(f"{group}={option}")
    expected = set(SCHEMA) | set(data_rules(cfg.data.name))
    if cfg.pipeline.name == "async":
        expected |= {f"pipeline.{key}" for key in PIPELINE_KEYS}
    if cfg.data.name == "memory":  # a graph handed to fit(): nothing is loaded, so no root
        expected -= {"data.root", "data.normalize_features"}
    assert expected - set(leaf_keys(cfg)) == set()


@pytest.mark.parametrize("group, option", EVERY_OPTION)
def test_every_key_has_a_meaning_for_help(group, option):
    values, choices = composed(group, option)
    meanings = key_meanings(choices)
    keys = [key for section, content in values.items() for key, _ in leaves(content, section)]
    assert [key for key in keys if not meanings.get(key)] == []


def test_meanings_come_from_the_comments_around_each_key():
    meanings = key_meanings(composed("partition", "metis")[1])
    assert meanings["trainer.log_every"].startswith("batches between reads of the loss")  # trailing
    assert meanings["trainer.log_every"].endswith("the epoch's figures are exact whatever it is")  # continued
    assert meanings["cache.capacity"].startswith("A fraction of the nodes in [0, 1]")  # the lines above
    assert meanings["partition.method"].startswith("METIS (pymetis")  # the option's own description
    assert meanings["pipeline.name"].startswith("Sampler, feature loader and trainer in three processes")
    serial = key_meanings(composed("pipeline", "serial")[1])["pipeline.name"]
    assert serial.startswith("sample, gather and train one after the other")
