"""Seeds given more than once (loader/repeated_seeds.py): each copy has its place in the batch,
as PyG's NeighborLoader gives it, with the same edges, attributes and e_id."""
import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.loader import NeighborLoader as PyGNeighborLoader

import conveyor
from conveyor.core import ConveyorError

REPEATS = [3, 3, 5, 7, 3, 9, 5, 5, 11, 0, 0, 0]


@pytest.fixture(scope="module")
def data():
    g = torch.Generator().manual_seed(0)
    edge_index = torch.randint(0, 30, (2, 120), generator=g)  # parallel edges and self-loops among them
    return Data(x=torch.randn(30, 4, generator=g), y=torch.randint(0, 3, (30,), generator=g),
                edge_index=edge_index, edge_attr=torch.randn(120, 2, generator=g))


def canonical(batch, data):
    """A batch as a comparable whole: the seeds in order, its edges as (source, target, e_id) with
    a seed copy named by its place (-1 - place) and any other node by its id, the nodes, input_id;
    every attribute checked against the data by n_id and e_id."""
    assert torch.equal(batch.x, data.x[batch.n_id]) and torch.equal(batch.y, data.y[batch.n_id])
    assert torch.equal(batch.edge_attr, data.edge_attr[batch.e_id])
    named = [torch.where(i < batch.batch_size, -1 - i, batch.n_id[i]) for i in batch.edge_index]
    edges = sorted(zip(named[0].tolist(), named[1].tolist(), batch.e_id.tolist()))
    return batch.n_id[:batch.batch_size].tolist(), edges, sorted(batch.n_id.tolist()), batch.input_id.tolist()


@pytest.mark.parametrize("batch_size, hops", [(4, [-1]), (5, [-1, -1]), (12, [-1, -1])])
def test_repeated_seeds_give_pygs_batches(data, batch_size, hops):
    seeds = torch.tensor(REPEATS)
    ours = list(conveyor.NeighborLoader(data, hops, input_nodes=seeds, batch_size=batch_size, pipeline="serial"))
    theirs = list(PyGNeighborLoader(data, hops, input_nodes=seeds, batch_size=batch_size))
    assert len(ours) == len(theirs)
    for mine, pygs in zip(ours, theirs):
        assert canonical(mine, data) == canonical(pygs, data)
        assert sum(mine.num_sampled_nodes) == mine.n_id.numel() == mine.x.size(0)
        assert sum(mine.num_sampled_edges) == mine.edge_index.size(1)
        assert mine.num_sampled_nodes[0] == mine.batch_size


def test_repeated_seeds_through_the_async_pipeline_and_by_index(data):
    """The async pipeline's batches equal the serial loader's, and loader(index) with a repeated
    position is the batch of those seeds."""
    seeds = torch.tensor(REPEATS)
    kwargs = dict(input_nodes=seeds, batch_size=5, seed=3)
    serial = conveyor.NeighborLoader(data, [3, 2], pipeline="serial", **kwargs)
    with conveyor.NeighborLoader(data, [3, 2], pipeline="async", **kwargs) as loader:
        for mine, theirs in zip(loader, serial):
            assert canonical(mine, data) == canonical(theirs, data)
    one = serial(torch.tensor([1, 0, 1]))
    assert one.n_id[:3].tolist() == [3, 3, 3] and one.input_id.tolist() == [1, 0, 1]
    hop_one = one.edge_index[:, :one.num_sampled_edges[0]]
    per_copy = [sorted(one.e_id[:one.num_sampled_edges[0]][hop_one[1] == place].tolist()) for place in range(3)]
    assert per_copy[0] == per_copy[1] == per_copy[2] and per_copy[0]  # each copy its own hop-1 edges


def test_repeats_in_an_undirected_subgraph_are_refused(data):
    with pytest.raises(ConveyorError, match="subgraph_type='directional' only"):
        conveyor.NeighborLoader(data, [-1], input_nodes=torch.tensor(REPEATS), subgraph_type="induced",
                                pipeline="serial")


@pytest.fixture(scope="module")
def typed_data():
    from torch_geometric.data import HeteroData
    g = torch.Generator().manual_seed(1)
    data = HeteroData()
    data["paper"].x, data["author"].x = torch.randn(20, 4, generator=g), torch.randn(10, 4, generator=g)
    data["paper", "cites", "paper"].edge_index = torch.randint(0, 20, (2, 60), generator=g)
    data["author", "writes", "paper"].edge_index = torch.stack(
        [torch.randint(0, 10, (40,), generator=g), torch.randint(0, 20, (40,), generator=g)])
    return data


def typed_in_edges(batch, edge_type, count: int) -> list:
    """Each seed copy's in-edges of one relation, as the sorted global ids of their sources."""
    src_type = edge_type[0]
    edge_index = batch[edge_type].edge_index
    return [sorted(batch[src_type].n_id[edge_index[0][edge_index[1] == place]].tolist()) for place in range(count)]


@pytest.mark.parametrize("pipeline", ["serial", "async"])
def test_typed_repeated_seeds_give_pygs_batches(typed_data, pipeline):
    """A HeteroData's input_nodes may name a node more than once, as PyG's: each copy its place
    and its own full neighbourhood, under both pipelines (PyG's loader on the same seeds)."""
    seeds = torch.tensor([3, 3, 5, 7, 3, 0])
    kwargs = dict(input_nodes=("paper", seeds), batch_size=6)
    with conveyor.NeighborLoader(typed_data, [-1], pipeline=pipeline, **kwargs) as loader:
        ours = next(iter(loader))
    theirs = next(iter(PyGNeighborLoader(typed_data, [-1], **kwargs)))
    assert ours["paper"].n_id[:6].tolist() == theirs["paper"].n_id[:6].tolist() == seeds.tolist()
    assert torch.equal(ours["paper"].x[:6], typed_data["paper"].x[seeds])
    for edge_type in typed_data.edge_types:
        assert typed_in_edges(ours, edge_type, 6) == typed_in_edges(theirs, edge_type, 6), edge_type


def test_typed_repeats_in_an_induced_subgraph_are_refused(typed_data):
    with pytest.raises(ConveyorError, match="subgraph_type='directional' only"):
        conveyor.NeighborLoader(typed_data, [-1], input_nodes=("paper", torch.tensor([1, 1])),
                                subgraph_type="induced", pipeline="serial")
