"""A sampler and a dataset from outside the package, each its module alone: registered with
`register_sampler` / `register_dataset` (docs/contributing.md), named by `sampler._target_` and
`data._target_`, trained through `fit()` and the command line."""
import json
import os
import textwrap

import pytest
import torch

import conveyor
from conveyor.partition.datasets import REGISTRY as DATASETS
from conveyor.partition.datasets import load_dataset
from conveyor.samplers import REGISTRY as SAMPLERS
from tests.helpers import launch

OWN = textwrap.dedent('''
    """A user's own sampler and dataset, outside conveyor."""
    from dataclasses import dataclass
    from pathlib import Path

    import torch

    from conveyor.core.fields import integer, setting
    from conveyor.partition import Graph
    from conveyor.partition.datasets import register_dataset
    from conveyor.partition.settings import DataSettings
    from conveyor.samplers import register_sampler
    from conveyor.samplers.bsp import BSPSampler


    @register_sampler("every", draws=("per_hop", "per_node"))  # takes once=True for per_node, as bsp
    class EveryNeighbour(BSPSampler):
        """Every in-neighbour at each hop, whatever the fanouts: no random draw."""

        def __init__(self, graph, fanouts, **keywords):
            (Path(__file__).parent / "built").write_text("every")  # proof that this sampler drew
            super().__init__(graph, [-1] * len(fanouts), **keywords)


    @dataclass(frozen=True, kw_only=True)
    class RingData(DataSettings):
        size: int = setting(40, "nodes on the ring", integer(8))


    @register_dataset("ring", settings="own_parts.RingData")
    def load_ring(root, size=40):
        """A ring both ways; a node's class is its parity, its features say it."""
        ids = torch.arange(size)
        edges = torch.stack([torch.cat([ids, (ids + 1) % size]), torch.cat([(ids + 1) % size, ids])])
        y = ids % 2
        return Graph.from_edge_index(edges, size, x=torch.nn.functional.one_hot(y, 2).float(), y=y,
                                     train_idx=ids[: size // 2], val_idx=ids[size // 2: 3 * size // 4],
                                     test_idx=ids[3 * size // 4:], num_classes=2, name="ring")
''')


@pytest.fixture(autouse=True)
def registries_as_they_were():
    """Registering is for the process: the other tests' registries stay conveyor's own."""
    yield
    SAMPLERS.pop("every", None)
    DATASETS.pop("ring", None)


def own_module(folder, monkeypatch=None):
    (folder / "own_parts.py").write_text(OWN)
    if monkeypatch is not None:
        monkeypatch.syspath_prepend(str(folder))
    return folder


def test_fit_trains_with_a_sampler_and_a_dataset_from_outside(tmp_path, monkeypatch):
    folder = own_module(tmp_path, monkeypatch)
    graph = load_dataset("ring", root=tmp_path / "data", target="own_parts.load_ring", size=24)
    assert (graph.num_nodes, graph.num_edges, graph.train_idx.numel()) == (24, 48, 12)
    result = conveyor.fit(graph, epochs=1, batch_size=4, fanouts=[1, 1], out_dir=tmp_path / "run",
                          overrides=["sampler._target_=own_parts.EveryNeighbour", "pipeline=serial",
                                     "trainer.progress=false", "run.device=cpu"])
    assert (folder / "built").read_text() == "every" and len(result.history) == 1


def test_the_command_line_trains_with_them(tmp_path):
    folder = own_module(tmp_path)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(folder), os.environ.get("PYTHONPATH", "")])}
    result = launch("data=own", "data._target_=own_parts.load_ring", "+data.size=32", f"data.root={tmp_path / 'd'}",
                    "sampler._target_=own_parts.EveryNeighbour", "sampler.fanouts=[2,2]", "pipeline=serial",
                    "trainer.epochs=1", "trainer.batch_size=8", f"run.out_dir={tmp_path / 'run'}", env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert (folder / "built").read_text() == "every" and len(metrics["epochs"]) == 1


def test_a_target_that_is_not_registered_is_refused_by_name(tmp_path):
    result = launch("sampler._target_=torch.nn.Linear", f"run.out_dir={tmp_path / 'run'}")
    assert result.returncode == 2 and "is not a registered sampler" in result.stderr, result.stderr[-2000:]
    assert torch.nn.Linear  # the class imports: it is the registration that is missing
