"""A HeteroData given as adj_t per edge type (issue 48 item 3; loader/hetero.py, loader/adj_t.py):
T.ToSparseTensor's SparseTensor (with and without edge_index kept) sampled as PyG's NeighborLoader
samples it (PyG's hetero sampling runs here through torch_sparse) and carried as PyG's
filter_hetero_data carries it; torch sparse CSR/CSC in their layouts; LinkNeighborLoader as PyG's;
and what the loader cannot carry refused by name."""
from __future__ import annotations

import time

import pytest
import torch
import torch_geometric.transforms as T
from torch_geometric.data import Data, HeteroData
from torch_geometric.loader import LinkNeighborLoader as PyGLinkNeighborLoader
from torch_geometric.loader import NeighborLoader as PyGNeighborLoader
from torch_geometric.nn import HeteroConv, SAGEConv
from torch_geometric.typing import SparseTensor
from torch_geometric.utils import trim_to_layer

from conveyor import LinkNeighborLoader, NeighborLoader
from conveyor.core import ConveyorError

CITES, WRITES, REV = ("paper", "cites", "paper"), ("author", "writes", "paper"), ("paper", "rev_writes", "author")
FANOUTS = {CITES: [3, 2], WRITES: [2, 2], REV: [2, 1]}


def typed_graph(seed: int = 0, parallel: bool = True) -> HeteroData:
    """Papers and authors; cites (15 parallel edges unless not `parallel`) with an edge_weight
    (which ToSparseTensor folds into adj_t's values), writes with a 2-D edge_attr (kept beside
    adj_t), rev_writes bare; no other edge given twice."""
    g = torch.Generator().manual_seed(seed)
    data = HeteroData()
    data["paper"].x = torch.randn(40, 4, generator=g)
    data["author"].x = torch.randn(25, 3, generator=g)
    cites = distinct_pairs(40, 40, 120, g)
    data[CITES].edge_index = torch.cat([cites, cites[:, :15]], 1) if parallel else cites
    data[CITES].edge_weight = torch.rand(data[CITES].edge_index.size(1), generator=g)
    data[WRITES].edge_index = distinct_pairs(25, 40, 90, g)
    data[WRITES].edge_attr = torch.rand(90, 2, generator=g)
    data[REV].edge_index = data[WRITES].edge_index.flip(0)
    return data


def distinct_pairs(sources: int, targets: int, count: int, g: torch.Generator) -> torch.Tensor:
    pairs = torch.randperm(sources * targets, generator=g)[:count]
    return torch.stack([pairs // targets, pairs % targets])


def global_entries(batch, edge_type) -> list:
    """A batch's adj_t as its entries in the graph's own ids (target, source, value), sorted."""
    row, col, value = batch[edge_type].adj_t.coo()
    targets, sources = batch[edge_type[2]].n_id[row], batch[edge_type[0]].n_id[col]
    values = [None] * row.numel() if value is None else value.tolist()
    return sorted(zip(targets.tolist(), sources.tolist(), values), key=lambda t: (t[0], t[1], t[2] or 0))


def test_held_adj_t_batches_keep_their_buffers_while_the_pipeline_runs_ahead():
    """An adj_t batch holds none of the pipeline's own views, only tensors cut out of them (each
    type's rows of x): its slots stay its own until those are copied (loader/pyg_loader.py's
    `aliased`), not only until the loader drops the views. The loop holds every batch and takes
    0.2 s over each, time for the pipeline (depth 1) to fill every slot it is given back; each
    batch keeps its own features and adjacency, as the serial pipeline's (given back at once, held
    batches' x was later batches' rows, now and then in the suite and at once here)."""
    data = T.ToSparseTensor()(typed_graph())
    given = dict(num_neighbors=[-1, -1], input_nodes=("paper", torch.arange(40)), batch_size=5)
    with NeighborLoader(data, pipeline="serial", **given) as loader:
        want = [(b["paper"].n_id.clone(), global_entries(b, CITES)) for b in loader]
    with NeighborLoader(data, pipeline="async", depth=1, **given) as loader:
        held = []
        for batch in loader:
            held.append(batch)
            time.sleep(0.2)
    assert len(held) == len(want) == 8
    for got, (n_id, entries) in zip(held, want):
        assert torch.equal(got["paper"].n_id, n_id) and global_entries(got, CITES) == entries
        for t in ("paper", "author"):
            assert torch.equal(got[t].x, data[t].x[got[t].n_id])


@pytest.mark.parametrize("pipeline", ["serial", "async"])
def test_typed_adj_t_batches_are_pygs_loaders(pipeline):
    """Every neighbour (so PyG's draw is fixed): the same seeds, nodes, edges (e_id) and adj_t
    entries with their values, of the same sparse sizes, as PyG's own loader (torch_sparse)."""
    data = T.ToSparseTensor()(typed_graph())
    given = dict(num_neighbors=[-1, -1], input_nodes=("paper", torch.arange(3, 15)), batch_size=5)
    theirs = list(PyGNeighborLoader(data, **given))
    with NeighborLoader(data, pipeline=pipeline, **given) as loader:
        ours = list(loader)
    assert len(ours) == len(theirs) == 3
    for got, want in zip(ours, theirs):
        size = want["paper"].batch_size
        assert got["paper"].batch_size == size and torch.equal(got["paper"].input_id, want["paper"].input_id)
        assert torch.equal(got["paper"].n_id[:size], want["paper"].n_id[:size])
        for t in ("paper", "author"):
            assert sorted(got[t].n_id.tolist()) == sorted(want[t].n_id.tolist())
            assert torch.equal(got[t].x, data[t].x[got[t].n_id])
        for e in (CITES, WRITES, REV):
            assert type(got[e].adj_t) is SparseTensor and set(got[e].keys()) - {"num_sampled_edges"} == \
                set(want[e].keys())
            assert got[e].adj_t.sparse_sizes() == want[e].adj_t.sparse_sizes()
            assert global_entries(got, e) == global_entries(want, e)
            assert sorted(got[e].e_id.tolist()) == sorted(want[e].e_id.tolist())
        assert got[CITES].adj_t.has_value() and not got[REV].adj_t.has_value()
        assert torch.equal(got[WRITES].edge_attr, data[WRITES].edge_attr[got[WRITES].e_id])


def sampled(data, pipeline: str, seed: int = 7) -> list:
    with NeighborLoader(data, FANOUTS, input_nodes=("paper", torch.arange(30)), batch_size=8, shuffle=True,
                        pipeline=pipeline, seed=seed) as loader:
        return list(loader)


@pytest.mark.parametrize("pipeline", ["serial", "async"])
def test_adj_t_is_the_edge_index_batchs_edges_transposed_and_seeded(pipeline):
    """Drawn fanouts at a seed: ToSparseTensor(remove_edge_index=False)'s batches hold both, adj_t
    exactly the batch's edge_index transposed with its edge_weight; the same draw as over the
    edge_index alone and over adj_t alone, and again from the same seed."""
    both = T.ToSparseTensor(remove_edge_index=False)(typed_graph())
    over_edges, over_adj = both.clone(), T.ToSparseTensor()(typed_graph())
    for e in (CITES, WRITES, REV):
        del over_edges[e].adj_t
    kept, plain, alone, again = (sampled(d, pipeline) for d in (both, over_edges, over_adj, over_adj))
    assert [b["paper"].batch_size for b in kept] == [8, 8, 8, 6]
    for b, edges, adj, rerun in zip(kept, plain, alone, again):
        for e in (CITES, WRITES, REV):
            sizes = (b[e[2]].num_nodes, b[e[0]].num_nodes)
            weight = b[e].edge_weight if e == CITES else None
            expect = SparseTensor(row=b[e].edge_index[1], col=b[e].edge_index[0], value=weight, sparse_sizes=sizes)
            assert b[e].adj_t.sparse_sizes() == sizes and b[e].edge_index.size(1) == b[e].adj_t.nnz()
            assert all(torch.equal(x, y) for x, y in zip(b[e].adj_t.coo(), expect.coo()) if x is not None)
            assert torch.equal(b[e].edge_index, edges[e].edge_index) and torch.equal(b[e].e_id, edges[e].e_id)
            for other in (adj, rerun):
                assert "edge_index" not in other[e] and torch.equal(other[e].e_id, b[e].e_id)
                assert all(torch.equal(x, y) for x, y in zip(other[e].adj_t.coo(), b[e].adj_t.coo())
                           if x is not None)
        assert b[CITES].adj_t.has_value() and "edge_weight" not in adj[CITES]
        assert torch.equal(adj[WRITES].edge_attr, b[WRITES].edge_attr)


def layers(convs, x, adjacency, batch, trim: bool):
    """hetero/hierarchical_sage.py's forward: each layer over the batch, trimmed (PyG's
    trim_to_layer, by the batch's num_sampled_* counts) or whole."""
    for i, conv in enumerate(convs):
        if trim:
            x, adjacency, _ = trim_to_layer(i, batch.num_sampled_nodes_dict, batch.num_sampled_edges_dict, x,
                                            adjacency)
        x = {key: value.relu() for key, value in conv(x, adjacency).items()}
    return x["paper"][:batch["paper"].batch_size]


def test_pygs_trim_to_layer_gives_the_same_over_adj_t_as_over_edge_index():
    """A batch's adj_t and its counts serve PyG's trim_to_layer (as hierarchical_sage.py
    --use-sparse-tensor uses them): the seeds' outputs over adj_t, trimmed, are those over the
    batch's edge_index, trimmed or whole."""
    data = typed_graph()
    del data[CITES].edge_weight  # SAGEConv would weigh by adj_t's values; edge_index has none
    data = T.ToSparseTensor(remove_edge_index=False)(data)
    torch.manual_seed(0)
    widths = {"paper": 4, "author": 3}
    convs = [HeteroConv({e: SAGEConv((widths[e[0]], widths[e[2]]), 8) for e in data.edge_types}),
             HeteroConv({e: SAGEConv(8, 8) for e in data.edge_types})]
    for batch in sampled(data, "serial"):
        x = batch.x_dict
        whole = layers(convs, x, batch.edge_index_dict, batch, trim=False)
        assert torch.allclose(layers(convs, x, batch.edge_index_dict, batch, trim=True), whole, atol=1e-5)
        assert torch.allclose(layers(convs, x, batch.adj_t_dict, batch, trim=True), whole, atol=1e-5)


@pytest.mark.parametrize("layout", [torch.sparse_csr, torch.sparse_csc])
def test_a_torch_sparse_adj_t_comes_back_in_its_layout(layout):
    """T.ToSparseTensor(layout=torch.sparse_csr) (and its CSC): each batch's adj_t in that layout,
    of PyG's sizes, equal to the edge_index batch's edges (parallel ones summed, as torch's are)."""
    data = T.ToSparseTensor(layout=torch.sparse_csr)(typed_graph(parallel=False))
    for e in (CITES, WRITES, REV):
        data[e].adj_t = data[e].adj_t if layout == torch.sparse_csr else data[e].adj_t.to_sparse_csc()
    both = T.ToSparseTensor(remove_edge_index=False)(typed_graph(parallel=False))
    for got, want in zip(sampled(data, "serial"), sampled(both, "serial")):
        for e in (CITES, WRITES, REV):
            sizes = (want[e[2]].num_nodes, want[e[0]].num_nodes)
            weight = want[e].edge_weight if e == CITES else torch.ones(want[e].edge_index.size(1))
            dense = torch.zeros(sizes).index_put_((want[e].edge_index[1], want[e].edge_index[0]), weight,
                                                  accumulate=True)
            assert got[e].adj_t.layout == layout and tuple(got[e].adj_t.shape) == sizes
            assert torch.allclose(got[e].adj_t.to_dense(), dense)


def test_the_link_loader_on_typed_adj_t_is_pygs():
    """LinkNeighborLoader over adj_t: PyG's links and subgraph (every neighbour); the edge type
    alone takes adj_t's edges as PyG's EdgeStorage.edge_index gives them."""
    data = T.ToSparseTensor()(typed_graph())
    links = torch.stack([torch.arange(6), torch.arange(10, 16)])
    given = dict(num_neighbors=[-1], edge_label_index=(WRITES, links), batch_size=4)
    for got, want in zip(LinkNeighborLoader(data, pipeline="serial", **given), PyGLinkNeighborLoader(data, **given)):
        ends = [(got, t) for t in ("author", "paper")], [(want, t) for t in ("author", "paper")]
        assert [[b[t].n_id[i].tolist() for (b, t), i in zip(side, b[WRITES].edge_label_index)]
                for side, b in zip(ends, (got, want))] == [[links[0, want[WRITES].input_id].tolist(),
                                                            links[1, want[WRITES].input_id].tolist()]] * 2
        for e in (CITES, WRITES, REV):
            assert global_entries(got, e) == global_entries(want, e)
            assert got[e].adj_t.sparse_sizes() == want[e].adj_t.sparse_sizes()
    ours = LinkNeighborLoader(data, [-1], edge_label_index=WRITES, batch_size=8, pipeline="serial")
    theirs = PyGLinkNeighborLoader(data, [-1], edge_label_index=WRITES, batch_size=8)
    assert torch.equal(ours.input_data.row, theirs.input_data.row)
    assert torch.equal(ours.input_data.col, theirs.input_data.col)
    csr = T.ToSparseTensor(layout=torch.sparse_csr)(typed_graph())
    with pytest.raises(ConveyorError, match=r"torch sparse adj_t without edge_index.*\(edge_type, index\)"):
        LinkNeighborLoader(csr, [-1], edge_label_index=WRITES, batch_size=8, pipeline="serial")


def test_what_the_loader_cannot_carry_is_refused_by_name():
    coo = T.ToSparseTensor(layout=torch.sparse_coo)(typed_graph())
    with pytest.raises(ConveyorError, match=r"data\[\('paper', 'cites', 'paper'\)\].adj_t must be a torch_sparse"):
        NeighborLoader(coo, [2], input_nodes="paper", pipeline="serial")
    summed = typed_graph()
    summed[CITES].edge_attr = torch.rand(135, 2)  # 135 edges, 120 entries once torch's CSR sums the parallel ones
    summed = T.ToSparseTensor(layout=torch.sparse_csr)(summed)
    with pytest.raises(ConveyorError, match=r"edge_attr has 135 rows but .*adj_t holds 120 entries.*SparseTensor"):
        NeighborLoader(summed, [2], input_nodes="paper", pipeline="serial")
    adj = typed_graph()
    adj[WRITES].adj = SparseTensor.from_edge_index(adj[WRITES].edge_index, sparse_sizes=(25, 40))
    with pytest.raises(ConveyorError, match=r"data\[\('author', 'writes', 'paper'\)\].adj is a sparse matrix.*adj_t"):
        NeighborLoader(adj, [2], input_nodes="paper", pipeline="serial")
    homogeneous = Data(x=torch.randn(5, 2), edge_index=torch.tensor([[0, 1], [1, 2]]))
    homogeneous.adj = SparseTensor.from_edge_index(homogeneous.edge_index, sparse_sizes=(5, 5))
    with pytest.raises(ConveyorError, match=r"data.adj is a sparse matrix"):
        NeighborLoader(homogeneous, [2], pipeline="serial")
    repeated = NeighborLoader(T.ToSparseTensor()(typed_graph()), [2], input_nodes=("paper", torch.tensor([0, 0, 1])),
                              batch_size=3, pipeline="serial")
    with pytest.raises(ConveyorError, match="more than once.*not for adj_t"):
        next(iter(repeated))
