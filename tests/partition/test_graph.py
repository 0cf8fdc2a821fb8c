import pytest
import torch

from conveyor.core import ConveyorError
from conveyor.partition import Graph
from tests.helpers import random_graph


def brute_force_in_neighbours(edge_index, num_nodes):
    return [sorted({int(s) for s, d in edge_index.t().tolist() if d == v}) for v in range(num_nodes)]


def test_csc_matches_brute_force_with_duplicates_and_self_loops():
    g = torch.Generator().manual_seed(1)
    edge_index = torch.randint(0, 40, (2, 500), generator=g)
    edge_index = torch.cat([edge_index, edge_index[:, :50], torch.tensor([[3, 7], [3, 7]])], 1)
    graph = Graph.from_edge_index(edge_index, 45)
    expected = brute_force_in_neighbours(edge_index, 45)
    assert graph.indptr.dtype == torch.long and graph.indptr.numel() == 46
    for v in range(45):
        assert graph.indices[graph.indptr[v]:graph.indptr[v + 1]].tolist() == expected[v]
    assert graph.num_edges == sum(map(len, expected))
    assert torch.equal(graph.in_degree(), torch.tensor([len(e) for e in expected]))
    out = torch.zeros(45, dtype=torch.long)
    for srcs in expected:
        for s in srcs:
            out[s] += 1
    assert torch.equal(graph.out_degree(), out)


def test_edge_index_round_trip():
    graph = random_graph(100, 800)
    again = Graph.from_edge_index(graph.edge_index(), graph.num_nodes)
    assert torch.equal(again.indptr, graph.indptr) and torch.equal(again.indices, graph.indices)


def test_keep_duplicates_when_asked():
    edge_index = torch.tensor([[1, 1, 2], [0, 0, 0]])
    assert Graph.from_edge_index(edge_index, 3, dedup=False).indices.tolist() == [1, 1, 2]
    assert Graph.from_edge_index(edge_index, 3).indices.tolist() == [1, 2]


@pytest.mark.parametrize("edge_index, num_nodes, words", [
    (torch.zeros(3, 4, dtype=torch.long), 5, r"shape \[2, E\]"),
    (torch.tensor([[0.0, 1.0], [1.0, 0.0]]), 5, "integer"),
    (torch.tensor([[0, 9], [1, 2]]), 5, "node ids"),
    (torch.tensor([[0, -1], [1, 2]]), 5, "node ids"),
])
def test_bad_edge_index_gives_clear_error(edge_index, num_nodes, words):
    with pytest.raises(ConveyorError, match=words):
        Graph.from_edge_index(edge_index, num_nodes)


def test_save_and_memory_mapped_load(tmp_path):
    graph = random_graph(60, 300)
    graph.x = torch.randn(60, 8)
    graph.y = torch.randint(0, 3, (60,))
    graph.train_idx, graph.val_idx, graph.test_idx = torch.arange(10), torch.arange(10, 20), torch.arange(20, 60)
    graph.num_classes, graph.name = 3, "tiny"
    graph.save(tmp_path / "g")
    loaded = Graph.load(tmp_path / "g")
    for key in ("indptr", "indices", "x", "y", "train_idx", "val_idx", "test_idx"):
        assert torch.equal(getattr(loaded, key), getattr(graph, key)), key
    assert loaded.num_classes == 3 and loaded.name == "tiny"
    assert loaded.validate() is loaded


def test_load_missing_directory(tmp_path):
    with pytest.raises(ConveyorError, match="no saved graph"):
        Graph.load(tmp_path / "nothing")


def test_validate_names_the_broken_field():
    graph = random_graph(30, 100)
    graph.x = torch.randn(29, 4)
    with pytest.raises(ConveyorError, match="x has 29 rows"):
        graph.validate()


def test_from_data_reads_a_planetoid_data_and_to_data_gives_it_back(data_root):
    from torch_geometric.datasets import Planetoid
    data = Planetoid(root=str(data_root), name="Cora")[0]
    graph = Graph.from_data(data, name="cora")
    assert graph.num_nodes == 2708 and graph.num_classes == 7 and graph.name == "cora"
    assert torch.equal(graph.x, data.x) and torch.equal(graph.y, data.y)
    assert graph.train_idx.tolist() == data.train_mask.nonzero().view(-1).tolist()
    back = graph.to_data()
    for key in ("x", "y", "train_mask", "val_mask", "test_mask"):
        assert torch.equal(back[key], data[key]), key
    assert back.num_nodes == data.num_nodes
    as_set = {tuple(e) for e in back.edge_index.t().tolist()}
    assert as_set == {tuple(e) for e in data.edge_index.t().tolist()}  # cora has no duplicates
    assert back.edge_index.size(1) == data.edge_index.size(1)


def test_graph_to_data_to_graph_is_the_same_graph(cora):
    again = Graph.from_data(cora.to_data(), name=cora.name)
    assert torch.equal(again.indptr, cora.indptr) and torch.equal(again.indices, cora.indices)
    for key in ("x", "y", "train_idx", "val_idx", "test_idx"):
        assert torch.equal(getattr(again, key), getattr(cora, key)), key
    assert again.num_classes == cora.num_classes


def test_from_data_takes_split_ids_and_ogb_shaped_labels():
    from torch_geometric.data import Data
    data = Data(edge_index=torch.tensor([[0, 1, 2, 2], [1, 2, 0, 0]]), x=torch.ones(4, 3),
                y=torch.tensor([[0], [2], [1], [-1]]), train_idx=torch.tensor([2, 0]), num_nodes=4)
    graph = Graph.from_data(data)
    assert graph.y.tolist() == [0, 2, 1, -1] and graph.num_classes == 3
    assert graph.train_idx.tolist() == [2, 0] and graph.val_idx is None
    assert graph.num_edges == 4  # the parallel 2 -> 0 edges both kept, as PyG trains on them
    assert graph.in_degree().tolist() == [2, 1, 1, 0]
    assert graph.edge_ids.tolist() == [2, 3, 0, 1]  # CSC position -> edge_index column


def test_from_data_refuses_what_it_cannot_read():
    from torch_geometric.data import Data, HeteroData
    with pytest.raises(ConveyorError, match="edge_index"):
        Graph.from_data(HeteroData())
    data = Data(edge_index=torch.tensor([[0], [1]]), num_nodes=2,
                train_mask=torch.ones(2, 5, dtype=torch.bool))
    with pytest.raises(ConveyorError, match=r"pass one column"):
        Graph.from_data(data)
