"""Typed graphs (issue 38): the layout (partition/hetero.py), typed bsp (samplers/typed.py), the feature
cache per node type (cache/typed.py), conveyor.NeighborLoader's HeteroData batches (loader/hetero.py;
PyG's own hetero tests run in tests/loader/test_pyg_loader_spec.py), the trainer's typed models
(trainer/models/hetero.py) and the datasets (synthetic_mag, mag)."""
import json
import re
import types

import numpy as np
import pytest
import torch
from torch_geometric.nn import GraphSAGE, HeteroConv, SAGEConv, to_hetero

import conveyor
from conveyor import NeighborLoader
from conveyor.cache import CacheSettings, CacheSpec
from conveyor.cache.typed import build_typed_cache, share_budget
from conveyor.core import ConveyorError
from conveyor.partition import Graph
from conveyor.partition.datasets import mag
from conveyor.partition.datasets.synthetic_mag import generate, load_synthetic_mag
from conveyor.partition.hetero import EDGE_TYPE, RELATION_PTR, flat_features, typed_graph
from conveyor.pipeline.sharing import share_graph
from conveyor.samplers import build_sampler
from conveyor.samplers.bsp import BSPSampler
from conveyor.trainer.loop.layerwise import layerwise_logits
from conveyor.trainer.models.hetero import RGCN, HeteroEdgeIndexGNN, TypedGNN, feature_widths, wrap_typed
from conveyor.trainer.models.sampled import build_model
from conveyor.trainer.settings import ModelSettings
from tests.helpers import REPO, assert_edge_positions, launch, refusal

RELATIONS = [("paper", "cites", "paper"), ("author", "writes", "paper"), ("paper", "rev_writes", "author")]


def small_typed(seed=0, papers=60, authors=90, edges=400, parallel=True):
    """Two node types, three relations (parallel edges in one), 2-D features of two widths."""
    g = torch.Generator().manual_seed(seed)
    counts = {"paper": papers, "author": authors}
    index = {e: torch.stack([torch.randint(0, counts[e[0]], (edges,), generator=g),
                             torch.randint(0, counts[e[2]], (edges,), generator=g)]) for e in RELATIONS[:2]}
    if parallel:
        index[RELATIONS[0]] = torch.cat([index[RELATIONS[0]], index[RELATIONS[0]][:, :50]], 1)
    index[RELATIONS[2]] = index[RELATIONS[1]].flip(0)
    x = {"paper": torch.randn(papers, 8, generator=g), "author": torch.randn(authors, 5, generator=g)}
    attr = {(RELATIONS[1], "edge_attr"): torch.arange(edges, dtype=torch.float32)}
    return typed_graph(counts, index, x=x, edge=attr), index


def test_a_typed_graph_is_one_csc_sorted_by_relation_with_its_sub_rows():
    graph, index = small_typed()
    s = graph.schema
    assert s.offsets == [0, 60, 150] and s.edge_counts == (450, 400, 400)
    dst = torch.repeat_interleave(torch.arange(graph.num_nodes), graph.in_degree())
    relation = graph.edge_attrs[EDGE_TYPE].long()
    key = (dst * 3 + relation) * graph.num_nodes + graph.indices.long()
    assert bool((key[1:] >= key[:-1]).all())  # each row by relation, then source
    for r, e in enumerate(s.edge_types):  # every position maps to its column of its relation's edges
        cols = graph.edge_ids[relation == r] - s.edge_offsets[r]
        expect = index[e][:, cols] + torch.tensor([[s.offsets[s.node_type(e[0])]], [s.offsets[s.node_type(e[2])]]])
        assert torch.equal(expect, torch.stack([graph.indices[relation == r].long(), dst[relation == r]]))
    ptr, slots = graph.typed[RELATION_PTR], s.in_relations()
    assert ptr.shape == (150, 2) and slots == [[0, 1], [2]]
    for v in range(graph.num_nodes):
        t = int(s.type_of(torch.tensor([v])))
        ends = [*ptr[v, 1:len(slots[t])].tolist(), int(graph.indptr[v + 1])]
        for k, r in enumerate(slots[t]):
            assert bool((relation[int(ptr[v, k]):ends[k]] == r).all())
        assert ends[-1] == int(graph.indptr[v + 1]) and int(ptr[v, 0]) == int(graph.indptr[v])
    for r, edges in enumerate(graph.relation_edges()):
        assert torch.equal(edges, index[s.edge_types[r]])


def test_a_typed_graph_saves_loads_and_shares_as_itself(tmp_path):
    graph, _ = small_typed()
    graph.save(tmp_path)
    for back in (Graph.load(tmp_path), share_graph(graph).open()):
        assert type(back).__name__ == "TypedGraph" and back.schema == graph.schema
        assert back.tensors().keys() == graph.tensors().keys()
        assert all(torch.equal(back.tensors()[k], v) for k, v in graph.tensors().items())


def test_each_node_draws_each_relation_with_its_fanout_and_the_hops_are_bsps():
    graph, _ = small_typed()
    s, relation = graph.schema, graph.edge_attrs[EDGE_TYPE].long()
    fanouts = {RELATIONS[0]: [3, 2], RELATIONS[1]: [1, 0], ("paper", "author"): [4, 5]}
    batch = build_sampler("bsp", graph, fanouts, seed=3).sample(torch.tensor([0, 5, 7, 11]))
    assert_edge_positions(batch, graph)  # each edge is its target's, from its neighbour
    assert torch.equal(batch.n_id[:4], torch.tensor([0, 5, 7, 11]))
    assert batch.n_id.unique().numel() == batch.n_id.numel()
    counts = batch.num_nodes_per_hop.tolist()
    for h, (edges, pos) in enumerate(zip(batch.edge_index_per_hop, batch.edge_pos_per_hop)):
        assert pos.unique().numel() == pos.numel()  # distinct edges
        for node in range(counts[h]):  # every node reached so far draws again (message-flow graphs)
            v, t = int(batch.n_id[node]), int(s.type_of(batch.n_id[node]))
            for r in s.in_relations()[t]:
                row = (graph.edge_attrs[EDGE_TYPE][graph.indptr[v]:graph.indptr[v + 1]] == r).sum()
                drawn = int((relation[pos[edges[1] == node]] == r).sum())
                assert drawn == min(int(row), list(fanouts.values())[r][h])


def test_on_one_node_and_edge_type_it_draws_exactly_what_bsp_draws():
    g = torch.Generator().manual_seed(1)
    edges = torch.randint(0, 200, (2, 3000), generator=g)
    typed = typed_graph({"v": 200}, {("v", "to", "v"): edges})
    plain = Graph.from_edge_index(edges, 200, dedup=False)
    for once in (False, True):
        ours = build_sampler("bsp", typed, [5, 3], seed=7, draws="per_node" if once else "per_hop").sample(
            torch.tensor([4, 9, 100]))
        theirs = BSPSampler(plain, [5, 3], seed=7, once=once).sample(torch.tensor([4, 9, 100]))
        assert torch.equal(ours.n_id, theirs.n_id)
        assert all(map(torch.equal, ours.edge_index_per_hop, theirs.edge_index_per_hop))
        assert all(map(torch.equal, ours.edge_pos_per_hop, theirs.edge_pos_per_hop))


def test_the_other_samplers_refuse_a_typed_graph_naming_bsp():
    graph, _ = small_typed()
    for name in ("fused", "pyg"):
        with pytest.raises(ConveyorError, match=r"does not draw a typed graph; choose a sampler that does \(bsp\)"):
            build_sampler(name, graph, [2])
    with pytest.raises(ValueError, match="hops must be the same across all"):
        build_sampler("bsp", graph, {e: [2] * (1 + r) for r, e in enumerate(RELATIONS)})


def test_the_typed_cache_gathers_every_types_rows_flat_whatever_it_keeps():
    graph, _ = small_typed()
    n_id = torch.randperm(graph.num_nodes, generator=torch.Generator().manual_seed(0))[:70]
    for capacity in (0.0, 0.3, 1.0, "600B", "auto"):
        cache = build_typed_cache("degree", graph, capacity=capacity, reserve=0)
        assert torch.equal(cache.gather(n_id), flat_features(graph, n_id))
        assert cache.gather_shape(n_id) == (sum(int((graph.schema.type_of(n_id) == t).sum()) * w
                                               for t, w in ((0, 8), (1, 5))),)
    fraction = build_typed_cache("random", graph, capacity=0.5)
    assert [c.capacity_nodes for c in fraction.caches.values()] == [30, 45]
    assert type(CacheSpec(CacheSettings(policy="degree", capacity=0.2)).build(graph, "cpu")).__name__ == \
        "TypedFeatureCache"


def test_one_byte_budget_goes_to_the_highest_degree_per_byte_across_types():
    graph, _ = small_typed()
    budget = 150 * 4 + 700  # the slot maps, then 700 bytes of rows
    cache = build_typed_cache("degree", graph, capacity=f"{budget}B")
    assert cache.cached_bytes + cache.map_bytes <= budget
    rows = {t: c.capacity_nodes for t, c in cache.caches.items()}
    assert rows == share_budget(budget, cache.caches, cache.degrees, "degree") and sum(rows.values()) > 0
    score = torch.cat([cache.degrees[t].double() / c.row_bytes for t, c in cache.caches.items()])
    kept = torch.cat([torch.isin(torch.arange(c.num_nodes), c.ranking[:rows[t]]) for t, c in cache.caches.items()])
    assert float(score[kept].min()) >= float(score[~kept].max())  # nothing left out beats what was kept


def hetero_data(graph):
    data = graph.to_data()
    data["paper"].y = torch.arange(60) % 3
    data["paper"].year = torch.arange(60).view(60, 1).double()
    return data


@pytest.mark.parametrize("pipeline", ["serial", "async"])
def test_the_loaders_hetero_batches_slice_the_data_as_pygs(pipeline):
    graph, _ = small_typed()
    data = hetero_data(graph)
    fanouts = {RELATIONS[0]: [3, 2], RELATIONS[1]: [2, 0], RELATIONS[2]: [4, 1]}
    with NeighborLoader(data, fanouts, input_nodes=("paper", torch.arange(10, 40)), batch_size=16, shuffle=True,
                        pipeline=pipeline, cache=CacheSettings(policy="degree", capacity=0.3), seed=5) as loader:
        batches = list(loader)
    assert [b["paper"].batch_size for b in batches] == [16, 14] and batches[0].input_type == "paper"
    for b in batches:
        for t in ("paper", "author"):
            assert torch.equal(b[t].x, data[t].x[b[t].n_id])
        assert torch.equal(b["paper"].y, data["paper"].y[b["paper"].n_id])
        assert torch.equal(b["paper"].year, data["paper"].year[b["paper"].n_id])
        assert torch.equal(b["paper"].n_id[:b["paper"].batch_size], torch.arange(10, 40)[b["paper"].input_id])
        for e in RELATIONS:
            src, _, dst = e
            ends = torch.stack([b[src].n_id[b[e].edge_index[0]], b[dst].n_id[b[e].edge_index[1]]])
            assert torch.equal(ends, data[e].edge_index[:, b[e].e_id])
            assert sum(b[e].num_sampled_edges) == b[e].edge_index.size(1)
        assert torch.equal(b[RELATIONS[1]].edge_attr, data[RELATIONS[1]].edge_attr[b[RELATIONS[1]].e_id])
        assert b[RELATIONS[1]].num_sampled_edges[1] == 0  # a fanout of 0 at hop 2


def test_typed_input_nodes_and_num_neighbors_are_checked():
    data = hetero_data(small_typed()[0])
    refused = [({"num_neighbors": {("paper", "venue"): [2]}}, "Not all edge types"),
               ({"num_neighbors": {RELATIONS[0]: [2]}}, "Missing number of neighbors"),
               ({"input_nodes": torch.arange(3)}, "name the seeds' node type"),
               ({"input_nodes": "venue"}, "no node type"),
               ({"node_sampler": "fused"}, r"\(node_sampler=\) does not draw a typed graph")]
    for given, words in refused:
        with pytest.raises(ConveyorError, match=words):
            NeighborLoader(data, **{"num_neighbors": [2], "input_nodes": "paper", "pipeline": "serial", **given})


def test_an_rgcn_and_to_hetero_sage_are_exact_layer_by_layer():
    graph = generate(0.0005, 0, num_classes=4)
    data, schema, widths = graph.to_data(), graph.schema, feature_widths(graph)
    metadata = data.metadata()
    torch.manual_seed(0)
    models = {"rgcn": TypedGNN(RGCN(metadata, widths, 16, 4, 2), schema, widths),
              "sage": wrap_typed(to_hetero(GraphSAGE((-1, -1), 16, 2, 4, dropout=0.5), metadata, aggr="sum"), graph)}
    nodes = torch.cat([graph.val_idx, graph.test_idx])
    for name, model in models.items():
        model.eval()
        assert name == "rgcn" or type(model).__name__ == "TypedGNN"  # to_hetero's convs run layer by layer
        with torch.no_grad():
            full = model.inner(data.x_dict, data.edge_index_dict)["paper"]
        layerwise = layerwise_logits(model, graph, nodes, 40, torch.device("cpu"))
        assert torch.allclose(layerwise, full[nodes - schema.offsets[0]], atol=1e-4), name


def test_a_heteroconv_module_runs_on_the_merged_subgraph():
    graph = generate(0.0005, 0, num_classes=4)
    metadata = graph.to_data().metadata()

    class Hetero(torch.nn.Module):  # a module of one's own, with PyG's heterogeneous forward
        def __init__(self):
            super().__init__()
            self.conv = HeteroConv({e: SAGEConv((-1, -1), 4) for e in metadata[1]}, aggr="sum")

        def forward(self, x_dict, edge_index_dict):
            return self.conv(x_dict, edge_index_dict)

    model = wrap_typed(Hetero(), graph)
    assert isinstance(model, HeteroEdgeIndexGNN)


def test_the_readme_hetero_example_loads_and_fits_to_hetero_graphsage(tmp_path, monkeypatch, data_root):
    text = (REPO / "README.md").read_text()
    example = re.search(r"<!-- hetero-example[^>]*-->\n```python\n(.*?)```", text, re.S).group(1)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").symlink_to(data_root)  # the example's root="data"
    scope = {"__name__": "__main__"}  # its guarded block runs, as in a script
    exec(compile(example, "README.md", "exec"), scope)
    batch, data, result = scope["batch"], scope["data"], scope["result"]
    assert batch["paper"].batch_size == 256 and torch.equal(batch["author"].x, data["author"].x[batch["author"].n_id])
    assert result.model is scope["model"] and result.final["inference"] == "layerwise"
    assert result.final["test_acc"] > 0.5  # 20 classes; a paper's own features give ~1/3


def test_fit_refuses_a_heterodata_without_one_labelled_type(tmp_path):
    data = generate(0.0005, 0, num_classes=4).to_data()
    data["author"].y = torch.zeros(data["author"].num_nodes, dtype=torch.long)
    with pytest.raises(ConveyorError, match="y on \\['paper', 'author'\\]"):
        conveyor.fit(data, out_dir=tmp_path, overrides=["pipeline=serial"])


@pytest.mark.parametrize("model,pipeline", [("rgcn", "async"), ("sage", "serial")])
def test_launch_trains_synthetic_mag(tmp_path, data_root, model, pipeline):
    out = tmp_path / model
    result = launch("data=synthetic_mag", "data.scale=0.001", "data.num_classes=4", f"data.root={data_root}",
                    f"model={model}", "model.hidden=64", f"pipeline={pipeline}", "trainer.epochs=3",
                    "trainer.batch_size=128", "trainer.lr=0.01", "sampler.fanouts=[8,5]", f"run.out_dir={out}")
    assert result.returncode == 0, result.stderr[-3000:]
    final = json.loads((out / "metrics.json").read_text())["final"]
    assert final["inference"] == "layerwise" and final["test_acc"] > 0.6, final  # the largest class: ~0.48


def test_rgcn_needs_a_typed_graph_and_a_typed_graph_one_rank_drawn_by_bsp():
    with pytest.raises(ConveyorError, match="trains typed graphs"):
        build_model(ModelSettings(name="rgcn"), 8, 3, 2)
    assert "set run.world_size=1" in refusal("data=synthetic_mag", "run.world_size=2")
    assert "does not draw a typed graph; choose a sampler that does (bsp)" in refusal("data=synthetic_mag",
                                                                                     "sampler=fused")


def test_synthetic_mag_is_mag_shaped_skewed_and_learnable(data_root):
    graph = load_synthetic_mag(data_root, scale=0.002)
    assert torch.equal(graph.indices, generate(0.002, 0).indices)  # deterministic by (scale, seed)
    s = graph.schema
    assert s.node_types == ("paper", "author", "institution", "field_of_study") and len(s.edge_types) == 8
    for r, (edges, (_, _, dst)) in enumerate(zip(graph.relation_edges(), s.edge_types)):
        degree = torch.bincount(edges[1], minlength=s.node_counts[s.node_type(dst)]).double()
        assert degree.numel() < 1000 or degree.max() > 5 * degree.mean(), s.edge_types[r]  # hubs among many
    y, x = graph.y[:s.offsets[1]], graph.typed["x.0"]
    train, test = graph.train_idx, graph.test_idx
    assert graph.num_classes == 20 and sorted(graph.features) == [0, 1, 2, 3]

    def centroid_accuracy(features):
        centroids = torch.zeros(20, features.size(1)).index_add_(0, y[train], features[train])
        centroids /= torch.bincount(y[train], minlength=20).clamp(min=1)[:, None]
        return float((torch.cdist(features[test], centroids).argmin(1) == y[test]).double().mean())

    edges = graph.relation_edges()[s.relation(("author", "writes", "paper"))]
    authors = torch.zeros(s.node_counts[0], 64).index_add_(0, edges[1], graph.typed["x.1"][edges[0]])
    authors /= torch.bincount(edges[1], minlength=s.node_counts[0]).clamp(min=1)[:, None]
    own, with_authors = centroid_accuracy(x), centroid_accuracy(torch.cat([x, 4 * authors], 1))
    assert own < 0.5 and with_authors > own + 0.1, (own, with_authors)


def test_mag_is_built_from_ogbs_arrays_and_offline_says_where_it_goes(tmp_path, monkeypatch):
    edges = {("author", "affiliated_with", "institution"): np.array([[0, 1, 2], [0, 0, 1]]),
             ("author", "writes", "paper"): np.array([[0, 1, 2, 2], [0, 1, 1, 2]]),
             ("paper", "cites", "paper"): np.array([[0, 1], [1, 2]]),
             ("paper", "has_topic", "field_of_study"): np.array([[0, 1, 2], [0, 0, 1]])}
    dataset = types.SimpleNamespace(
        graph={"edge_index_dict": edges, "num_nodes_dict": {"author": 3, "institution": 2, "paper": 3,
                                                            "field_of_study": 2},
               "node_feat_dict": {"paper": np.ones((3, 4), dtype=np.float32)},
               "node_year": {"paper": np.array([[2017], [2018], [2019]])}},
        labels={"paper": np.array([[1], [0], [1]])}, num_classes=2)
    split = {"train": {"paper": np.array([0])}, "valid": {"paper": np.array([1])}, "test": {"paper": np.array([2])}}
    graph = mag.build_mag(dataset, split)
    assert len(graph.schema.edge_types) == 8 and graph.schema.target == "paper" and graph.num_classes == 2
    paper = graph.schema.offsets[graph.schema.node_type("paper")]
    assert graph.y.tolist()[paper:paper + 3] == [1, 0, 1] and graph.test_idx.tolist() == [paper + 2]
    assert graph.type_attrs("node", graph.schema.node_type("paper"))["year"].tolist() == [2017, 2018, 2019]
    monkeypatch.setattr(mag, "reachable", lambda url: False)  # offline, whatever this machine is
    with pytest.raises(ConveyorError, match="data=synthetic_mag") as error:
        mag.load_mag(tmp_path)
    assert str(tmp_path / "ogbn_mag" / "raw") in str(error.value)
