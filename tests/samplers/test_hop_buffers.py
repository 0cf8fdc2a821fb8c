"""per_node's hop buffers (samplers/hop_buffers.py): every hop's edges views of one pair of
buffers, a bound that holds every batch, and buffers that grow past it with the same batches."""
import pytest
import torch

from conveyor.samplers import bsp, build_sampler, hop_buffers
from conveyor.samplers.checks import same_batch
from conveyor.samplers.hop_buffers import HopBuffers, batch_nodes, capacity
from tests.helpers import power_law_graph

FANOUTS = [[15, 10, 5], [4, -1], [0, 3, 3]]


def batches(graph, fanouts, sizes=(1, 17, 300, 400)):
    sampler = build_sampler("bsp", graph, fanouts, seed=3, draws="per_node")
    g = torch.Generator().manual_seed(4)
    return [sampler.sample(torch.randperm(graph.num_nodes, generator=g)[:n]) for n in sizes]


@pytest.mark.parametrize("fanouts", FANOUTS[:2])
def test_each_hop_is_a_view_of_the_last_ones_buffers(fanouts):
    """Hop h's positions and edges are the first E_h of hop h+1's, in the same memory: no hop copies
    the earlier ones' edges (and the batches are the torch path's, test_bsp_sampler.py)."""
    for batch in batches(power_law_graph(), fanouts):
        last_pos, last_edges = batch.edge_pos_per_hop[-1], batch.edge_index_per_hop[-1]
        for pos, edges in zip(batch.edge_pos_per_hop, batch.edge_index_per_hop):
            assert pos.data_ptr() == last_pos.data_ptr() and edges.data_ptr() == last_edges.data_ptr()
            assert edges.stride() == last_edges.stride()
            assert torch.equal(edges, last_edges[:, :edges.size(1)]) and torch.equal(pos, last_pos[:pos.numel()])


@pytest.mark.parametrize("fanouts", FANOUTS)
def test_buffers_too_small_for_a_batch_grow_and_draw_the_same_batches(fanouts, monkeypatch):
    """Cut to a single edge, the buffers move into larger ones at every hop (and a hop drawn
    elsewhere, fanout 0, is copied in): the same batches as with room for all."""
    graph = power_law_graph()
    roomy = batches(graph, fanouts)
    monkeypatch.setattr(hop_buffers, "MAX_CAPACITY", 1)
    cramped = batches(graph, fanouts)
    assert all(same_batch(a, b) for a, b in zip(roomy, cramped, strict=True))


def test_a_hop_drawn_elsewhere_is_copied_into_the_buffers(monkeypatch):
    """Fanout 0 at hop 1 (no compiled draw): hop 2's buffers hold hop 1's (empty) edges, then its own."""
    graph = power_law_graph()
    sampler = build_sampler("bsp", graph, [0, 3, 3], seed=3, draws="per_node")
    assert sampler.compiled == [False, True, True]
    batch = sampler.sample(torch.arange(50))
    assert [e.size(1) for e in batch.edge_index_per_hop][0] == 0
    assert batch.edge_index_per_hop[1].data_ptr() == batch.edge_index_per_hop[2].data_ptr()


@pytest.mark.parametrize("fanouts", FANOUTS)
def test_the_bound_holds_every_batch(fanouts):
    """`capacity` is at least the last hop's edges, for every batch size up to the whole graph."""
    graph = power_law_graph()
    capped = bsp.drawn_fanouts(fanouts, int((graph.indptr[1:] - graph.indptr[:-1]).max()), False)[0]
    for batch in batches(graph, fanouts, sizes=(1, 5, 60, 400)):
        bound = capacity(batch.seeds.numel(), capped, graph.num_nodes, graph.num_edges)
        assert batch.edge_index_per_hop[-1].size(1) <= bound <= graph.num_edges


def test_extend_returns_the_filled_front_and_keeps_it_when_it_grows():
    buffers = HopBuffers(4, torch.tensor([7, 8]), torch.tensor([[1, 2], [3, 4]]))
    pos, edges = buffers.extend(2)
    pos[2:], edges[:, 2:] = torch.tensor([9, 10]), torch.tensor([[5, 6], [7, 8]])
    pos, edges = buffers.extend(3)  # past 4: moved into 8
    assert buffers.pos.numel() == 8 and pos.numel() == 7 and edges.shape == (2, 7)
    assert pos[:4].tolist() == [7, 8, 9, 10] and edges[:, :4].tolist() == [[1, 2, 5, 6], [3, 4, 7, 8]]


@pytest.mark.parametrize("draws", ["per_node", "per_hop"])
@pytest.mark.parametrize("fanouts", FANOUTS)
def test_n_ids_room_holds_every_batch(fanouts, draws):
    """`batch_nodes` is at least a batch's nodes, per_node or per_hop, up to the whole graph: the
    compiled claims write a hop's new nodes into that room (numba checks no bounds), and n_id is
    a view of its front."""
    graph = power_law_graph()
    capped = bsp.drawn_fanouts(fanouts, int((graph.indptr[1:] - graph.indptr[:-1]).max()), False)[0]
    sampler = build_sampler("bsp", graph, fanouts, seed=3, draws=draws)
    g = torch.Generator().manual_seed(5)
    for n in (1, 5, 60, 400, graph.num_nodes):
        batch = sampler.sample(torch.randperm(graph.num_nodes, generator=g)[:n])
        bound = batch_nodes(n, capped, graph.num_nodes)
        assert batch.n_id.numel() <= bound <= graph.num_nodes
        assert batch.n_id.untyped_storage().nbytes() == 8 * bound
