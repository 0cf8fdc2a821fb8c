"""Temporal sampling through both loaders (issue 49 item 2), homogeneous and typed: in every batch
no node or edge is later than its seed's time (each seed its own subgraph, `batch` saying whose),
`seed_time` / `edge_label_time` as PyG's, temporal negatives no later than their links, serial =
async, reproducible from the seed; fused refused by name before any work."""
import pytest
import torch
from torch_geometric.data import Data, HeteroData

from conveyor import LinkNeighborLoader, NeighborLoader
from conveyor.core import ConveyorError
from tests.helpers import power_law_graph


def timed_data(num_nodes=200, num_edges=1500) -> Data:
    graph = power_law_graph(num_nodes, num_edges, seed=0)
    g = torch.Generator().manual_seed(0)
    return Data(edge_index=graph.edge_index(), x=torch.randn(num_nodes, 4, generator=g),
                time=torch.randint(100, (num_nodes,), generator=g), num_nodes=num_nodes)


def copied(loader) -> list:
    return [b.clone() for b in loader]


def test_node_batches_hold_nothing_later_than_their_seed_serial_and_async():
    data = timed_data()
    seeds = torch.arange(0, 200, 3)
    input_time = data.time[seeds] + 5
    kwargs = dict(input_nodes=seeds, input_time=input_time, time_attr="time", batch_size=16, shuffle=True, seed=4)
    serial = copied(NeighborLoader(data, [4, 3], pipeline="serial", **kwargs))
    with NeighborLoader(data, [4, 3], pipeline="async", **kwargs) as loader:
        parallel = copied(loader)
    assert len(serial) == len(parallel) == 5
    for a, b in zip(serial, parallel):
        assert torch.equal(a.n_id, b.n_id) and torch.equal(a.edge_index, b.edge_index)
        assert torch.equal(a.seed_time, input_time[a.input_id])
        assert bool((a.time <= a.seed_time[a.batch]).all())  # every node no later than its own seed
        assert torch.equal(a.batch[:a.batch_size], torch.arange(a.batch_size))
    last = copied(NeighborLoader(data, [4, 3], pipeline="serial", temporal_strategy="last", **kwargs))
    assert all(bool((b.time <= b.seed_time[b.batch]).all()) for b in last)


def test_typed_edge_level_time_bounds_every_edge_of_every_type():
    g = torch.Generator().manual_seed(1)
    data = HeteroData()
    data["user"].num_nodes, data["item"].num_nodes = 40, 60
    for edge_type, (s, d) in {("user", "buys", "item"): (40, 60), ("item", "bought_by", "user"): (60, 40)}.items():
        data[edge_type].edge_index = torch.stack([torch.randint(s, (500,), generator=g),
                                                  torch.randint(d, (500,), generator=g)])
        data[edge_type].when = torch.randint(50, (500,), generator=g)
    times = torch.randint(50, (60,), generator=g)
    loader = NeighborLoader(data, {("user", "buys", "item"): [5, 2], ("item", "bought_by", "user"): [5, 2]},
                            input_nodes="item", input_time=times, time_attr="when", batch_size=20, pipeline="serial")
    seen = 0
    for batch in loader:
        seed_time = batch["item"].seed_time
        for (_, _, dst), store in batch.edge_items():
            owner = batch[dst].batch[store.edge_index[1]]
            assert bool((store.when <= seed_time[owner]).all())
            seen += store.when.numel()
    assert seen > 500


def test_temporal_links_bound_their_subgraphs_and_negatives():
    """Binary negatives take their link's time in turn (PyG's edge_label_time.repeat), and with
    node-level time none is later than it; every link's subgraph is no later than its time."""
    data = timed_data()
    links = data.edge_index[:, :300]
    label_time = torch.maximum(data.time[links[0]], data.time[links[1]])
    loader = LinkNeighborLoader(data, [3, 2], edge_label_index=links, edge_label_time=label_time, time_attr="time",
                                neg_sampling=dict(mode="binary", amount=2), batch_size=25, shuffle=True,
                                pipeline="serial", seed=2)
    for batch in loader:
        count = batch.input_id.numel()
        assert torch.equal(batch.edge_label_time, label_time[batch.input_id].repeat(3))
        ends = batch.n_id[batch.edge_label_index]
        assert bool((data.time[ends] <= batch.edge_label_time).all())  # negatives included
        assert bool((batch.time <= batch.edge_label_time[batch.batch]).all())
        assert batch.edge_label.tolist() == [1.0] * count + [0.0] * 2 * count


@pytest.mark.parametrize("keywords, words", [
    (dict(time_attr="time", node_sampler="fused"), "drawn by sampler bsp"),
    (dict(time_attr="time", node_sampler="pyg"), "drawn by sampler bsp"),
    (dict(time_attr="when"), "neither a node-level nor an edge-level"),
    (dict(input_time=torch.zeros(200)), "'input_time' is set while 'time_attr' is not set"),
    (dict(time_attr="time", input_time=torch.zeros(3)), "one real time per seed"),
    (dict(time_attr="time", temporal_strategy="first"), "uniform, last"),
    (dict(time_attr="time", subgraph_type="induced"), r"temporal sampling \(time_attr, disjoint as PyG's\) is drawn "
                                                      "with subgraph_type='directional' only"),
])
def test_bad_temporal_arguments_are_refused_by_name_before_any_work(keywords, words):
    with pytest.raises(ConveyorError, match=words):
        NeighborLoader(timed_data(), [2], batch_size=4, pipeline="async", **keywords)
