"""`conveyor.LinkNeighborLoader` on a `HeteroData` (issue 49, item 1): the links of one edge type
(`edge_label_index=(edge_type, index)`), the same batches as PyG's own loader where nothing is
random, every node and edge attribute of every type carried, negatives drawn among the right node
types (uniformly or by weight), `num_neighbors` as a dict per edge type, serial = async and
reproducible from the seed. PyG's own typed tests run in test_pyg_link_loader_spec.py."""
import pytest
import torch
from torch_geometric.data import HeteroData
from torch_geometric.loader import LinkNeighborLoader as PyGLinkNeighborLoader

from conveyor import LinkNeighborLoader
from conveyor.core import ConveyorError

RATES, RATED_BY = ("user", "rates", "movie"), ("movie", "rated_by", "user")


def ratings(users=30, movies=50, edges=400, seed=0) -> HeteroData:
    """A bipartite user-movie graph with both directions, features and edge attributes."""
    g = torch.Generator().manual_seed(seed)
    data = HeteroData()
    data["user"].x = torch.randn(users, 4, generator=g)
    data["user"].age = torch.arange(users)
    data["movie"].x = torch.randn(movies, 6, generator=g)
    src, dst = torch.randint(users, (edges,), generator=g), torch.randint(movies, (edges,), generator=g)
    data[RATES].edge_index = torch.stack([src, dst])
    data[RATES].rating = torch.arange(edges)
    data[RATED_BY].edge_index = torch.stack([dst, src])
    data[RATED_BY].rating = torch.arange(edges) + 1000
    return data


def pairs(batch, edge_type, index) -> list:
    src, _, dst = edge_type
    return sorted(zip(batch[src].n_id[index[0]].tolist(), batch[dst].n_id[index[1]].tolist()))


def test_full_neighbourhoods_give_pygs_own_typed_batches():
    """Every neighbour, no negatives: each batch holds PyG's nodes per type, edges per edge type
    (by e_id, as the data's) and links, with each type's attributes sliced by its n_id / e_id."""
    data = ratings()
    links = data[RATES].edge_index[:, ::4]
    ours = [b.clone() for b in LinkNeighborLoader(data, [-1, -1], edge_label_index=(RATES, links), batch_size=16,
                                                  pipeline="serial")]
    pygs = list(PyGLinkNeighborLoader(data, [-1, -1], edge_label_index=(RATES, links), batch_size=16))
    assert len(ours) == len(pygs) == 7
    for a, b in zip(ours, pygs):
        assert a.input_type == RATES and torch.equal(a[RATES].input_id, b[RATES].input_id)
        for t in ("user", "movie"):
            assert sorted(a[t].n_id.tolist()) == sorted(b[t].n_id.tolist())
            assert torch.equal(a[t].x, data[t].x[a[t].n_id])
        assert torch.equal(a["user"].age, data["user"].age[a["user"].n_id])
        for e in (RATES, RATED_BY):
            assert sorted(a[e].e_id.tolist()) == sorted(b[e].e_id.tolist())
            assert torch.equal(a[e].rating, data[e].rating[a[e].e_id])
            src, _, dst = e
            ends = torch.stack([a[src].n_id[a[e].edge_index[0]], a[dst].n_id[a[e].edge_index[1]]])
            assert torch.equal(ends, data[e].edge_index[:, a[e].e_id])
        assert pairs(a, RATES, a[RATES].edge_label_index) == pairs(b, RATES, b[RATES].edge_label_index)


def test_negatives_are_drawn_among_the_edge_types_node_types():
    """Binary negatives' sources are users and destinations movies, over the whole of each type
    (movie ids beyond the user count too); with dst_weight, never a movie of weight 0."""
    data = ratings()
    loader = LinkNeighborLoader(data, {RATES: [2], RATED_BY: [3]}, edge_label_index=RATES, batch_size=40,
                                neg_sampling="binary", shuffle=True, pipeline="serial", seed=3)
    users, movies = set(), set()
    for _ in range(5):
        for batch in loader:
            label, index = batch[RATES].edge_label, batch[RATES].edge_label_index
            assert torch.equal(label, torch.cat([torch.ones(label.numel() // 2), torch.zeros(label.numel() // 2)]))
            negatives = [(u, m) for u, m in zip(batch["user"].n_id[index[0]][label == 0].tolist(),
                                                batch["movie"].n_id[index[1]][label == 0].tolist())]
            users.update(u for u, _ in negatives)
            movies.update(m for _, m in negatives)
    assert users == set(range(30)) and movies == set(range(50))
    weight = (torch.arange(50) % 2).float()  # odd movies only
    loader = LinkNeighborLoader(data, [1], edge_label_index=RATES, batch_size=40, pipeline="serial", seed=3,
                                neg_sampling=dict(mode="triplet", amount=3, dst_weight=weight))
    for batch in loader:
        drawn = batch["movie"].n_id[batch["movie"].dst_neg_index]
        assert drawn.shape == (batch[RATES].input_id.numel(), 3) and bool((drawn % 2 == 1).all())


def test_typed_links_are_the_same_serial_and_async_and_repeat_from_the_seed():
    data = ratings()
    kwargs = dict(edge_label_index=(("user", "movie"), data[RATES].edge_index[:, :200]), batch_size=32,
                  neg_sampling=dict(mode="binary", amount=2), shuffle=True, seed=11)
    serial = [b.clone() for b in LinkNeighborLoader(data, [3, 2], pipeline="serial", **kwargs)]
    again = [b.clone() for b in LinkNeighborLoader(data, [3, 2], pipeline="serial", **kwargs)]
    with LinkNeighborLoader(data, [3, 2], pipeline="async", **kwargs) as loader:
        parallel = [b.clone() for b in loader]
    assert len(serial) == len(parallel) == 7
    for a, b, c in zip(serial, again, parallel):
        for t in ("user", "movie"):
            assert torch.equal(a[t].n_id, b[t].n_id) and torch.equal(a[t].n_id, c[t].n_id)
            assert torch.equal(a[t].x, c[t].x)
        for e in (RATES, RATED_BY):
            assert torch.equal(a[e].edge_index, c[e].edge_index) and torch.equal(a[e].rating, c[e].rating)
        assert torch.equal(a[RATES].edge_label_index, c[RATES].edge_label_index)
        assert torch.equal(a[RATES].edge_label, c[RATES].edge_label)


@pytest.mark.parametrize("keywords, words", [
    (dict(edge_label_index=torch.zeros(2, 3, dtype=torch.long)), "names the links' edge type"),
    (dict(edge_label_index=("user", "likes", "movie")), "does not have"),
    (dict(edge_label_index=(RATES, torch.tensor([[0], [50]]))), "'movie' ids from 50 to 50"),
    (dict(edge_label_index=RATES, num_neighbors={RATES: [2]}), "Missing number of neighbors"),
    (dict(edge_label_index=RATES, neg_sampling=dict(mode="binary", src_weight=torch.ones(50))), "src_weight"),
    (dict(edge_label_index=RATES, node_sampler="fused"), "HeteroData"),
])
def test_bad_typed_links_are_refused_by_name(keywords, words):
    keywords = {"num_neighbors": [2], **keywords}
    with pytest.raises(ConveyorError, match=words):
        LinkNeighborLoader(ratings(), batch_size=4, pipeline="serial", **keywords)
