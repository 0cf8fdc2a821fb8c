"""`conveyor.LinkNeighborLoader` as a drop-in for PyG's: batches as PyG's (the same subgraphs as
PyG's own loader where nothing is random), negatives drawn in the sampler stage as PyG draws them
(counts, labels, uniform over the nodes), reproducible from the seed and the same serial and
async, and PyG's keywords it does not support refused by name. PyG's own test file runs in
test_pyg_link_loader_spec.py."""
import math

import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.loader import LinkNeighborLoader as PyGLinkNeighborLoader

from conveyor import LinkNeighborLoader
from conveyor.core import ConveyorError
from tests.helpers import power_law_graph


def link_data(num_nodes=120, num_edges=900, seed=0) -> Data:
    graph = power_law_graph(num_nodes, num_edges, seed=seed)
    g = torch.Generator().manual_seed(seed)
    return Data(edge_index=graph.edge_index(), x=torch.randn(num_nodes, 8, generator=g),
                edge_attr=torch.arange(graph.num_edges), num_nodes=num_nodes)


def copied(loader) -> list:
    return [b.clone() for b in loader]  # the async pipeline reuses its buffers


def global_links(batch) -> set:
    return set(map(tuple, batch.n_id[batch.edge_label_index].t().tolist()))


def test_full_neighbourhoods_give_pygs_own_batches():
    """With every neighbour drawn and no negatives nothing is random: each batch holds the nodes,
    the edges (by e_id) and the links PyG's own LinkNeighborLoader gives, the endpoints first in
    PyG's order (unique ids, ascending)."""
    data = link_data()
    links = data.edge_index[:, ::3]
    label = torch.arange(links.size(1)) % 3
    ours = copied(LinkNeighborLoader(data, [-1, -1], edge_label_index=links, edge_label=label, batch_size=25,
                                     pipeline="serial"))
    pygs = list(PyGLinkNeighborLoader(data, [-1, -1], edge_label_index=links, edge_label=label, batch_size=25))
    assert len(ours) == len(pygs) == math.ceil(links.size(1) / 25)
    for a, b in zip(ours, pygs):
        seeds = torch.unique(b.edge_label_index).numel()  # PyG over torch_sparse gives no per-hop counts
        assert torch.equal(a.n_id[:seeds], b.n_id[:seeds]) and set(a.n_id.tolist()) == set(b.n_id.tolist())
        assert sorted(a.e_id.tolist()) == sorted(b.e_id.tolist())
        assert torch.equal(a.n_id[a.edge_index], data.edge_index[:, a.e_id])
        assert torch.equal(a.n_id[a.edge_label_index], b.n_id[b.edge_label_index])
        assert torch.equal(a.edge_label, b.edge_label) and torch.equal(a.input_id, b.input_id)
        assert torch.equal(a.x, data.x[a.n_id]) and torch.equal(a.edge_attr, data.edge_attr[a.e_id])
        assert a.num_sampled_nodes[0] == seeds and sum(a.num_sampled_edges) == a.edge_index.size(1)


def test_binary_negatives_follow_the_positives_as_pyg_draws_them():
    data = link_data()
    loader = LinkNeighborLoader(data, [3, 2], batch_size=30, neg_sampling=dict(mode="binary", amount=0.5),
                                shuffle=True, pipeline="serial", seed=1)
    counts = torch.zeros(data.num_nodes)
    for _ in range(25):
        for batch in loader:
            positives = batch.input_id.numel()
            negatives = math.ceil(0.5 * positives)  # PyG: ceil(amount x positives) random pairs
            assert batch.edge_label_index.size(1) == positives + negatives
            assert batch.edge_label.dtype == torch.float
            assert torch.equal(batch.edge_label, torch.cat([torch.ones(positives), torch.zeros(negatives)]))
            pairs = batch.n_id[batch.edge_label_index]
            assert torch.equal(pairs[:, :positives], data.edge_index[:, batch.input_id])
            counts += torch.bincount(pairs[:, positives:].flatten(), minlength=data.num_nodes)
    # Uniform over the nodes: chi-square with 119 degrees of freedom (mean 119, sd ~15.4).
    expected = counts.sum() / data.num_nodes
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 119 + 5 * 15.4, chi2


def test_triplet_negatives_are_amount_destinations_per_link():
    data = link_data()
    loader = LinkNeighborLoader(data, [2], batch_size=16, neg_sampling="triplet", pipeline="serial", seed=2,
                                neg_sampling_ratio=None)
    loader3 = LinkNeighborLoader(data, [2], batch_size=16, neg_sampling=dict(mode="triplet", amount=3),
                                 pipeline="serial", seed=2)
    for batch, batch3 in zip(loader, loader3):
        size = batch.input_id.numel()
        assert "edge_label_index" not in batch and "edge_label" not in batch
        assert batch.dst_neg_index.shape == (size,) and batch3.dst_neg_index.shape == (size, 3)
        for b in (batch, batch3):
            assert torch.equal(b.n_id[b.src_index], data.edge_index[0, b.input_id])
            assert torch.equal(b.n_id[b.dst_pos_index], data.edge_index[1, b.input_id])
            assert int(b.dst_neg_index.max()) < b.n_id.numel()
            assert set(torch.cat([b.src_index, b.dst_pos_index, b.dst_neg_index.flatten()]).tolist()) == \
                set(range(int(b.num_sampled_nodes[0])))  # the endpoints are the first nodes


def test_the_seed_reproduces_the_negatives_and_async_equals_serial():
    """Negatives come from the sampler stage's generator, restarted each epoch from the seed: the
    same batches in the serial and the async pipeline (labels of their own dtype included), new
    ones each epoch and for another seed."""
    data = link_data()
    label = torch.randint(0, 4, (data.num_edges,), generator=torch.Generator().manual_seed(0))
    kwargs = dict(edge_label=label, batch_size=64, neg_sampling_ratio=2.0, shuffle=True, seed=7)
    serial = LinkNeighborLoader(data, [4, 3], pipeline="serial", **kwargs)
    epochs = [copied(serial) for _ in range(2)]
    with LinkNeighborLoader(data, [4, 3], pipeline="async", **kwargs) as pipelined:
        async_epochs = [copied(pipelined) for _ in range(2)]
    other = copied(LinkNeighborLoader(data, [4, 3], pipeline="serial", **{**kwargs, "seed": 8}))
    for ours, theirs in zip(epochs, async_epochs):
        for a, b in zip(ours, theirs):
            assert a.keys() == b.keys()
            for key in a.keys():
                assert torch.equal(torch.as_tensor(a[key]), torch.as_tensor(b[key])), key
    first = epochs[0][0]
    assert first.edge_label.dtype == torch.long and set(first.edge_label.tolist()) <= {0, 1, 2, 3, 4}
    assert int((first.edge_label == 0).sum()) == 128  # labels from 0 shifted by one, as PyG's
    assert not torch.equal(global_pairs(epochs[0][0]), global_pairs(epochs[1][0]))
    assert not torch.equal(global_pairs(epochs[0][0]), global_pairs(other[0]))


def global_pairs(batch):
    return batch.n_id[batch.edge_label_index]


@pytest.mark.parametrize("keywords, words", [
    (dict(edge_label_time=torch.zeros(499)), "edge_label_time"),
    (dict(disjoint=True, subgraph_type="induced"), "disjoint=True is drawn with subgraph_type='directional'"),
    (dict(time_attr="time"), "time_attr"),
    (dict(neg_sampling=dict(mode="binary", src_weight=torch.ones(7))), "src_weight must be a real tensor of one"),
    (dict(neg_sampling=dict(mode="binary", dst_weight=-torch.ones(120))), "dst_weight must be finite weights >= 0"),
    (dict(neg_sampling="triplet", edge_label=torch.ones(499)), "edge_label must be None"),
    (dict(neg_sampling=dict(mode="triplet", amount=1.5)), "integer"),
    (dict(neg_sampling="ternary"), "binary or triplet"),
    (dict(edge_label_index=("paper", "author")), "heterogeneous"),
    (dict(edge_label_index=torch.zeros(3, 4, dtype=torch.long)), r"\[2, P\]"),
    (dict(edge_label_index=torch.tensor([[0], [500]])), "0..119"),
    (dict(edge_label=torch.ones(5)), "one label per link"),
    (dict(node_sampler=object()), "node_sampler"),
    (dict(sampler="bsp"), "is given as node_sampler="),
])
def test_an_unsupported_or_bad_argument_is_refused_by_name(keywords, words):
    with pytest.raises(ConveyorError, match=words):
        LinkNeighborLoader(link_data(), [2], batch_size=4, pipeline="serial", **keywords)
