"""conveyor's loaders as PyG's code sees them (issue 48; PyG's own tests of that code:
test_pyg_consumers_spec.py): they are PyG's loader classes and torch DataLoaders with the fields
PyG reads, `sampler=` / `batch_sampler=` are torch samplers of seed positions, `worker_init_fn` (and
PyG's enable_multithreading) runs in the two stage processes, and what they cannot carry is refused
by name."""
import functools
import os

import pytest
import torch
import torch_geometric
from torch_geometric.data import Data, HeteroData
from torch_geometric.sampler import NodeSamplerInput

from conveyor import ConveyorError, LinkNeighborLoader, NeighborLoader
from tests.helpers import feature_graph, record_worker


def small_data() -> Data:
    torch.manual_seed(0)
    return Data(x=torch.randn(30, 4), y=torch.arange(30), edge_index=torch.randint(0, 30, (2, 120)))


def test_the_loaders_are_pygs_classes_with_the_fields_pyg_reads():
    data = small_data()
    loader = NeighborLoader(data, [3, 2], batch_size=8, pipeline="serial", transform=lambda b: b.update({"t": 1}))
    assert isinstance(loader, torch_geometric.loader.NeighborLoader)
    assert isinstance(loader, torch.utils.data.DataLoader)
    assert list(loader.node_sampler.num_neighbors.values) == [3, 2] and len(loader.node_sampler.num_neighbors) == 2
    assert (loader.node_sampler.sampler, loader.node_sampler.replace, loader.node_sampler.disjoint) == \
        ("auto", False, False)
    assert isinstance(loader.input_data, NodeSamplerInput) and torch.equal(loader.input_data.node, torch.arange(30))
    assert (loader.num_workers, loader.worker_init_fn, loader.filter_per_worker, loader.sampler) == \
        (0, None, False, None)
    raw = loader.collate_fn([0, 5])  # PyG's two halves: sampled, then transformed
    assert "t" not in raw and raw.input_id.tolist() == [0, 5] and raw.n_id[:2].tolist() == [0, 5]
    assert loader.filter_fn(raw).t == 1 and loader([0, 5]).t == 1
    assert str(loader) == "NeighborLoader()"
    links = LinkNeighborLoader(data, [2], batch_size=4, pipeline="serial")
    assert isinstance(links, torch_geometric.loader.LinkNeighborLoader)
    assert len(links.link_sampler.num_neighbors) == 1 and torch.equal(links.input_data.row, data.edge_index[0])
    for each in (loader, links):
        each.close()


def test_a_torch_sampler_of_positions_draws_the_seeds():
    graph = feature_graph()
    seeds = torch.arange(40)
    ordered = NeighborLoader(graph, [2], input_nodes=seeds, batch_size=16, pipeline="serial", seed=1,
                             sampler=torch.utils.data.SequentialSampler(range(40)))
    assert [b.n_id[:b.batch_size].tolist() for b in ordered] == [list(range(0, 16)), list(range(16, 32)),
                                                                 list(range(32, 40))]
    batches = NeighborLoader(graph, [2], input_nodes=seeds, pipeline="serial", batch_sampler=[[3, 1], [7, 7, 0]])
    got = list(batches)
    assert [b.input_id.tolist() for b in got] == [[3, 1], [7, 7, 0]]
    assert [b.n_id[:b.batch_size].tolist() for b in got] == [[3, 1], [7, 7, 0]]  # a repeat keeps its place
    assert len(batches) == 2
    with pytest.raises(ConveyorError, match="yielded positions from 0 to 40"):
        list(NeighborLoader(graph, [2], input_nodes=seeds, pipeline="serial", batch_sampler=[[0, 40]]))
    for loader in (ordered, batches):
        loader.close()


def test_worker_init_fn_and_pygs_multithreading_run_in_the_stage_processes(tmp_path):
    loader = NeighborLoader(small_data(), [2], batch_size=8, pipeline="async",
                            worker_init_fn=functools.partial(record_worker, str(tmp_path)))
    assert loader.num_workers == 2
    with loader.enable_multithreading(1):
        assert sum(b.batch_size for b in loader) == 30
    ran = {p.name: p.read_text().split() for p in tmp_path.iterdir()}
    assert sorted(ran) == ["0", "1"]  # the sampler process (worker 0) and the feature loader (worker 1)
    assert all(int(pid) != os.getpid() and threads == "1" for pid, threads in ran.values())
    assert len({pid for pid, _ in ran.values()}) == 2
    with pytest.raises(ConveyorError, match="before the first batch"):
        with loader.enable_multithreading(1):
            pass
    loader.close()
    serial = NeighborLoader(small_data(), [2], pipeline="serial")
    with pytest.raises(ConveyorError, match="needs worker processes"):
        with serial.enable_cpu_affinity([0]):
            pass
    serial.close()


def summed(adj_t, num_nodes: int) -> torch.Tensor:
    """A SparseTensor as a dense matrix with its parallel entries summed (its own to_dense()
    assigns them, so the last one wins), as torch's sparse layouts' to_dense() sums them."""
    row, col, value = adj_t.coo()
    return torch.zeros(num_nodes, num_nodes).index_put_((row, col), value, accumulate=True)


@pytest.mark.filterwarnings("ignore:Sparse:UserWarning")
@pytest.mark.parametrize("layout", ["SparseTensor", "csr", "csc"])
def test_adj_t_is_sampled_and_carried_as_pygs(layout):
    """T.ToSparseTensor's data: the same subgraph as over edge_index, its adj_t the batch's edges
    with their values, and BasicGNN.inference (with cache=True) over it exact."""
    import torch_geometric.transforms as T
    from torch_geometric.nn import GraphSAGE
    if layout == "SparseTensor":
        pytest.importorskip("torch_sparse")
    data = small_data()
    data.edge_weight = torch.rand(120)
    sparse = T.ToSparseTensor(attr="edge_weight", **({} if layout == "SparseTensor" else
                                                     {"layout": torch.sparse_csr}))(data.clone())
    if layout == "csc":  # T.ToSparseTensor makes CSR; a CSC adj_t comes back as CSC
        sparse.adj_t = sparse.adj_t.to_sparse_csc()
    over_adj = NeighborLoader(sparse, [-1], batch_size=7, pipeline="serial")
    over_edges = NeighborLoader(data, [-1], batch_size=7, pipeline="serial")
    for got, want in zip(over_adj, over_edges):
        assert "edge_index" not in got and torch.equal(got.n_id, want.n_id)
        adj = summed(got.adj_t, want.num_nodes) if layout == "SparseTensor" else got.adj_t.to_dense()
        dense = torch.zeros(want.num_nodes, want.num_nodes)
        dense.index_put_((want.edge_index[1], want.edge_index[0]), want.edge_weight, accumulate=True)
        assert torch.allclose(adj, dense) and adj.shape == (want.num_nodes, want.num_nodes)
        assert got.adj_t.layout == sparse.adj_t.layout if layout != "SparseTensor" else got.adj_t.has_value()
    model = GraphSAGE(4, 8, num_layers=2).eval()
    full = model(data.x, sparse.adj_t if layout != "csc" else sparse.adj_t.to_sparse_csr())
    by_layer = NeighborLoader(sparse, [-1], batch_size=7, pipeline="serial")
    assert torch.allclose(model.inference(by_layer), full, atol=1e-5)
    assert torch.allclose(model.inference(by_layer, cache=True), full, atol=1e-5)
    for loader in (over_adj, over_edges, by_layer):
        loader.close()


def test_what_the_loader_cannot_carry_is_refused_by_name():
    data = small_data()
    data.adj_t = torch.ones(30, 30).to_sparse_coo()
    with pytest.raises(ConveyorError, match="torch_sparse SparseTensor or a torch sparse CSR or CSC"):
        NeighborLoader(data, [2], pipeline="serial")


def star_data() -> Data:
    """Node 0 has the in-neighbours 1, 2, 3; node 4 has 5; node 6 has none."""
    return Data(x=torch.arange(7.0).view(-1, 1), edge_index=torch.tensor([[1, 2, 3, 5], [0, 0, 0, 4]]))


def test_replace_draws_each_fanout_with_replacement_as_pyg():
    data = star_data()
    loader = NeighborLoader(data, [5], input_nodes=torch.tensor([0, 4, 6]), batch_size=3, pipeline="serial",
                            replace=True, seed=0)
    assert loader.node_sampler.replace
    drawn = torch.zeros(7, dtype=torch.long)
    for _ in range(200):
        batch = next(iter(loader))
        assert batch.num_sampled_edges == [10]  # 5 each for 0 and 4 (whatever their degree), none for 6
        sources, targets = batch.n_id[batch.edge_index[0]], batch.n_id[batch.edge_index[1]]
        assert torch.equal(targets, torch.tensor([0] * 5 + [4] * 5)) and torch.all(sources[5:] == 5)
        drawn += torch.bincount(sources[:5], minlength=7)
    assert drawn[[0, 4, 5, 6]].sum() == 0 and all(abs(int(c) - 1000 / 3) < 60 for c in drawn[1:4])  # uniform
    every = next(iter(NeighborLoader(data, [-1], input_nodes=torch.tensor([0]), pipeline="serial", replace=True)))
    assert sorted(every.e_id.tolist()) == [0, 1, 2]  # -1: every neighbour once, as PyG
    loader.close()


@pytest.mark.parametrize("pipeline", ["serial", "async"])
def test_disjoint_gives_each_seed_its_own_subgraph(pipeline):
    data = Data(x=torch.arange(4.0).view(-1, 1), edge_index=torch.tensor([[1, 1, 3], [0, 2, 1]]))
    loader = NeighborLoader(data, [-1, -1], input_nodes=torch.tensor([0, 2, 2]), batch_size=3, pipeline=pipeline,
                            disjoint=True)
    batch = next(iter(loader))
    assert batch.n_id.tolist() == [0, 2, 2, 1, 1, 1, 3, 3, 3]  # node 1 and 3 once in each seed's subgraph
    assert batch.batch.tolist() == [0, 1, 2, 0, 1, 2, 0, 1, 2]
    assert batch.edge_index.tolist() == [[3, 4, 5, 6, 7, 8], [0, 1, 2, 3, 4, 5]]
    assert (batch.num_sampled_nodes, batch.num_sampled_edges, batch.batch_size) == ([3, 3, 3], [3, 3], 3)
    assert batch.x.view(-1).tolist() == batch.n_id.float().tolist() and batch.e_id.tolist() == [0, 1, 1, 2, 2, 2]
    loader.close()


def test_disjoint_links_give_each_endpoint_its_own_subgraph():
    """PyG's edge_sample with disjoint=True: every endpoint a seed, in order (sources, then
    destinations with the negatives), the links their positions, `batch` modulo the positives."""
    data = Data(x=torch.arange(4.0).view(-1, 1), edge_index=torch.tensor([[1, 1, 3], [0, 2, 1]]))
    loader = LinkNeighborLoader(data, [-1], edge_label_index=torch.tensor([[0, 2], [2, 0]]), batch_size=2,
                                neg_sampling_ratio=1.0, pipeline="serial", disjoint=True, seed=0)
    batch = next(iter(loader))
    assert batch.edge_label_index.tolist() == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert batch.edge_label.tolist() == [1.0, 1.0, 0.0, 0.0]
    assert batch.n_id[:8].tolist()[:2] == [0, 2] and batch.n_id[4:6].tolist() == [2, 0]
    assert batch.batch[:8].tolist() == [0, 1, 0, 1, 0, 1, 0, 1]
    ei = batch.edge_index
    assert torch.equal(batch.batch[ei[0]], batch.batch[ei[1]])  # no edge between two subgraphs
    pairs = set(map(tuple, torch.stack([batch.n_id[ei[0]], batch.n_id[ei[1]]]).t().tolist()))
    assert pairs <= {(1, 0), (1, 2), (3, 1)} and {(1, 0), (1, 2)} <= pairs  # the graph's edges, hop 1 whole
    loader.close()




def global_edges(batch, mask=None):
    """A batch's edges as sorted (source id, target id) pairs, those into the nodes of `mask`."""
    ei = batch.edge_index if mask is None else batch.edge_index[:, mask[batch.edge_index[1]]]
    return sorted(map(tuple, torch.stack([batch.n_id[ei[0]], batch.n_id[ei[1]]]).t().tolist()))


def test_a_disjoint_batch_is_its_seeds_own_subgraphs_side_by_side():
    """Every neighbour (nothing random): seed i's nodes and edges in a disjoint batch are those of
    the batch of seed i alone; and SGFormer, PyG's examples/ogbn_train.py default model over such
    batches, takes it as that script gives it (`model(batch.x, batch.edge_index, batch.batch)`)."""
    from torch_geometric.nn.models import SGFormer
    torch.manual_seed(0)
    data = Data(x=torch.randn(60, 8), edge_index=torch.randint(0, 60, (2, 180)))
    seeds = torch.tensor([5, 17, 5, 40])
    loader = NeighborLoader(data, [-1, -1], input_nodes=seeds, batch_size=4, disjoint=True, pipeline="serial")
    batch = next(iter(loader))
    for i in range(4):
        alone, mine = loader([i]), batch.batch == i
        assert sorted(batch.n_id[mine].tolist()) == sorted(alone.n_id.tolist())
        assert global_edges(batch, mine) == global_edges(alone) and alone.batch.unique().tolist() == [0]
    with torch.no_grad():
        out = SGFormer(8, 16, 3, trans_num_heads=1, gnn_num_layers=2).eval()(batch.x, batch.edge_index, batch.batch)
    assert out[:batch.batch_size].shape == (4, 3) and torch.equal(out[0], out[2])  # one node twice: equal subgraphs
    loader.close()


def test_a_heterodata_batch_places_repeated_seeds_as_a_data_batch():
    """A seed drawn twice (a sampler with replacement): the HeteroData batch of one type is the Data
    batch, key by key: each copy in its place, its hop-1 edges once per copy, edge attributes and
    e_id with them, the per-hop counts."""
    torch.manual_seed(0)
    edge_index = torch.randint(0, 20, (2, 80))
    typed = HeteroData()
    typed["a"].x = torch.arange(20.0).view(-1, 1)
    typed["a", "to", "a"].edge_index, typed["a", "to", "a"].w = edge_index, torch.arange(80.0)
    plain = Data(x=torch.arange(20.0).view(-1, 1), edge_index=edge_index, w=torch.arange(80.0))
    batches = [[3, 3, 1, 3]]
    got = next(iter(NeighborLoader(typed, [-1, -1], input_nodes="a", pipeline="serial", batch_sampler=batches)))
    want = next(iter(NeighborLoader(plain, [-1, -1], pipeline="serial", batch_sampler=batches)))
    nodes, edges = got["a"], got["a", "to", "a"]
    assert nodes.n_id[:4].tolist() == [3, 3, 1, 3] and nodes.batch_size == want.batch_size == 4
    assert torch.equal(nodes.n_id, want.n_id) and torch.equal(nodes.x, want.x)
    assert torch.equal(edges.edge_index, want.edge_index) and torch.equal(edges.w, want.w)
    assert torch.equal(edges.e_id, want.e_id) and edges.num_sampled_edges == want.num_sampled_edges
    assert nodes.num_sampled_nodes == want.num_sampled_nodes
