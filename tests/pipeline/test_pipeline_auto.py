"""pipeline=auto (the default): serial where the stage processes cannot pay for themselves (a small
graph, one core), async elsewhere, and the start-up line says which and why; PyG's num_workers
still picks serial (0) or async (more) for conveyor.NeighborLoader."""
import logging
import os

import pytest
import torch

from conveyor import NeighborLoader
from conveyor.config import load_settings
from conveyor.partition import Graph
from conveyor.pipeline import PipelineSettings, SerialBatches, batch_source
from conveyor.pipeline.settings import AUTO_MIN_EDGES
from conveyor.samplers import SamplerSpec
from tests.helpers import DoubledFeatures, feature_graph


def big_graph() -> Graph:
    """A graph of exactly AUTO_MIN_EDGES edges: each of 10,000 nodes with 100 in-neighbours."""
    n = 10_000
    indptr = torch.arange(0, n * 100 + 1, 100, dtype=torch.long)
    indices = (torch.arange(n * 100, dtype=torch.int32) * 7919) % n
    return Graph(indptr=indptr, indices=indices.int())


def test_auto_is_serial_below_the_edge_limit_and_async_at_it():
    auto = PipelineSettings(name="auto")
    assert AUTO_MIN_EDGES == 1_000_000
    assert auto.choose(feature_graph()) == (
        "serial", "auto: a small graph, 5,274 edges (< 1,000,000): stage processes would cost more than they hide")
    graph = big_graph()
    assert graph.num_edges == AUTO_MIN_EDGES
    cores = len(os.sched_getaffinity(0))
    if cores >= 2:
        assert auto.choose(graph) == ("async", f"auto: 1,000,000 edges, {cores} cores")
        assert auto.resolved(graph).name == "async"
    assert PipelineSettings(name="async").choose(feature_graph()) == ("async", "pipeline=async")
    assert PipelineSettings(name="serial").resolved(graph).name == "serial"


@pytest.fixture
def one_core():
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(before)})
    yield
    os.sched_setaffinity(0, before)


def test_auto_is_serial_on_one_core_whatever_the_graph(one_core):
    name, why = PipelineSettings(name="auto").choose(big_graph())
    assert name == "serial" and why.startswith("auto: this process may run on 1 core")


def test_the_start_up_line_says_what_auto_chose(caplog):
    graph = feature_graph()
    with caplog.at_level(logging.INFO, logger="conveyor"):
        with batch_source(graph, SamplerSpec("bsp", [3, 2]), DoubledFeatures(graph.x), "cpu",
                          PipelineSettings(name="auto", sampler_threads=1)) as source:
            assert isinstance(source, SerialBatches)
    assert "pipeline: serial (auto: a small graph, 5,274 edges (< 1,000,000)" in caplog.text
    assert "sampling: 1 torch thread (pipeline.sampler_threads), in the trainer's process" in caplog.text


def test_auto_is_the_default_of_the_config_and_of_the_loader_without_num_workers():
    assert load_settings([]).pipeline.name == "auto"
    assert load_settings(["data=cora"]).pipeline.name == "auto"  # no dataset overrides it any more
    graph = feature_graph()
    common = {"num_neighbors": [3, 2], "batch_size": 16}
    chosen = {keywords.get("num_workers", keywords.get("pipeline")): NeighborLoader(graph, **common, **keywords)
              for keywords in ({}, {"num_workers": 0}, {"num_workers": 2}, {"pipeline": "async"})}
    assert {k: (loader.parts.settings.name, loader.asynchronous) for k, loader in chosen.items()} == {
        None: ("auto", False), 0: ("serial", False), 2: ("async", True), "async": ("async", True)}
    batch = next(iter(chosen[None]))  # serial: in this process, no stage process
    assert batch.batch_size == 16 and chosen[None]._state["source"].__class__ is SerialBatches
    for loader in chosen.values():
        loader.close()
