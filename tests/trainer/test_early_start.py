"""trainer/early.py: the command line's graph loaded, and the stage processes' fork server started,
beside the trainer's imports: the run gets the graph it would have loaded, a loading error where
it asks for the graph, and the loading's log records then. Planetoid's loading (which imports PyG)
runs early too: tests/test_layout.py's cora run from the command line."""
import logging

import pytest
import torch

from conveyor.core import ConveyorError
from conveyor.partition.datasets import load_configured
from conveyor.trainer import early
from tests.helpers import make_config, write_custom_dataset


def settings(data_root, *overrides):
    return make_config("data=synthetic", "data.scale=0.002", f"data.root={data_root}", *overrides)


@pytest.mark.parametrize("pipeline, forks", [("async", True), ("serial", False)])
def test_the_run_gets_the_graph_it_would_load(synthetic_small, data_root, pipeline, forks):
    cfg = settings(data_root, f"pipeline={pipeline}")
    early.begin(cfg)
    begun = early._pending[-1]
    graph = early.configured_graph(cfg.data)
    expected = load_configured(cfg.data)
    for name in ("indptr", "indices", "x", "y", "train_idx"):
        assert torch.equal(getattr(graph, name), getattr(expected, name)), name
    assert begun.started_forkserver is forks  # only an async pipeline's stages come from the fork server
    assert not early._pending  # taken once


def test_other_data_is_loaded_as_asked(synthetic_small, data_root):
    early.begin(settings(data_root))
    other = settings(data_root, "data.scale=0.001").data
    assert early.configured_graph(other).num_nodes == load_configured(other).num_nodes < synthetic_small.num_nodes


def test_a_loading_error_is_raised_where_the_run_asks(tmp_path):
    folder = write_custom_dataset(tmp_path / "custom", num_nodes=50)  # no training split: refused once loaded
    cfg = make_config("data=custom", f"data.path={folder}")
    early.begin(cfg)  # no error yet: the run checks its out_dir first
    with pytest.raises(ConveyorError, match="has no train_idx"):
        early.configured_graph(cfg.data)


def test_its_log_records_wait_for_the_run(synthetic_small, data_root, monkeypatch):
    def loading(data):
        logging.getLogger("conveyor").info("reading %s", data.name)
        logging.getLogger("conveyor").warning("something to say")
        return load_configured(data)
    monkeypatch.setattr(early, "load_configured", loading)
    seen = []
    handler = logging.Handler(logging.DEBUG)
    handler.emit = lambda record: seen.append(record.getMessage())
    logger = logging.getLogger("conveyor")
    level = logger.level
    logger.addHandler(handler)
    try:
        cfg = settings(data_root, "pipeline=serial")
        early.begin(cfg)
        assert seen == []  # held while the run has not asked (its log may not be open yet)
        logger.setLevel(logging.DEBUG)  # the run's log opened (trainer/outputs/metrics.py)
        early.configured_graph(cfg.data)
        assert seen == ["reading synthetic", "something to say"]
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
