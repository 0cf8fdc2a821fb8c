"""`conveyor.NeighborLoader` as a drop-in for PyG's: its batches keep PyG's attributes and meanings
(and the sampler contract), PyG's keywords it does not support are refused by name, the async and
serial pipelines give the same batches, and a PyG training loop trains each stock model on cora
as well over it as over PyG's own loader. Stopping it without leftovers: test_loader_shutdown.py."""
import re

import pytest
import torch
import torch.nn.functional as F
import torch_geometric.transforms as T
from torch_geometric.datasets import Planetoid
from torch_geometric.nn import GAT, GCN, GIN, GraphSAGE

import conveyor
from conveyor import NeighborLoader
from conveyor.core import ConveyorError
from conveyor.samplers import SamplerSpec, bsp
from conveyor.samplers.checks import assert_valid_batch
from tests.helpers import REPO, feature_graph

FANOUTS = [4, 3]


@pytest.fixture(scope="module")
def planetoid_cora(data_root):
    return Planetoid(str(data_root), "Cora", transform=T.NormalizeFeatures())[0]


def batches(loader, epochs=1):
    return [[b.clone() for b in loader] for _ in range(epochs)]  # copies: the pipeline reuses its buffers


@pytest.mark.parametrize("sampler", ["auto", "pyg", SamplerSpec("bsp", FANOUTS)],
                         ids=["bsp-once", "pyg", "bsp-every-hop"])
def test_each_batch_has_pygs_attributes_and_meanings(sampler):
    """Whichever way the sampler draws (bsp once per node, as the loader asks it; PyG's own; bsp
    at every hop, message-flow graphs cut to PyG's form), the batches are PyG's."""
    graph = feature_graph()
    with NeighborLoader(graph, num_neighbors=FANOUTS, batch_size=32, input_nodes=graph.train_idx, shuffle=True,
                        pipeline="serial", seed=3, sampler=sampler) as loader:
        seen = []
        for batch in loader:
            n_id, bs = batch.n_id, batch.batch_size
            assert torch.equal(batch.x, graph.x[n_id]) and torch.equal(batch.y, graph.y[n_id])
            assert batch.y.dtype == torch.long and torch.equal(n_id[:bs], graph.train_idx[batch.input_id])
            assert bs == batch.input_id.numel() == batch.num_sampled_nodes[0]
            assert sum(batch.num_sampled_nodes) == n_id.numel() == torch.unique(n_id).numel()
            assert sum(batch.num_sampled_edges) == batch.edge_index.size(1)
            assert_pyg_batch(batch, graph, FANOUTS)
            seen.append(batch.input_id)
    assert len(seen) == len(loader) == 10  # 300 training nodes in batches of 32
    assert torch.equal(torch.cat(seen).sort().values, torch.arange(300))  # every seed once, shuffled
    assert not torch.equal(torch.cat(seen), torch.arange(300))


def assert_pyg_batch(batch, graph, fanouts):
    """PyG's batch contract: edges hop by hop, hop h's into the nodes first reached at hop h-1 and
    from nodes reached by hop h; every edge in the graph; each node first reached at hop l < L
    drew exactly min(degree, fanouts[l]) distinct in-neighbours (at most its fanout)."""
    nodes = torch.tensor([0, *batch.num_sampled_nodes]).cumsum(0)
    edges = torch.tensor([0, *batch.num_sampled_edges]).cumsum(0)
    src, dst = batch.edge_index
    degree = graph.indptr[1:] - graph.indptr[:-1]
    for h in range(1, len(fanouts) + 1):
        s, d = src[edges[h - 1]:edges[h]], dst[edges[h - 1]:edges[h]]
        assert bool(((d >= nodes[h - 1]) & (d < nodes[h])).all()) and bool((s < nodes[h + 1]).all())
        drawn = torch.bincount(d - nodes[h - 1], minlength=int(nodes[h] - nodes[h - 1]))
        assert torch.equal(drawn, degree[batch.n_id[nodes[h - 1]:nodes[h]]].clamp(max=fanouts[h - 1]))
    global_src, global_dst = batch.n_id[src], batch.n_id[dst]
    key = global_dst * graph.num_nodes + global_src
    in_graph = torch.repeat_interleave(torch.arange(graph.num_nodes), degree) * graph.num_nodes + graph.indices.long()
    assert bool(torch.isin(key, in_graph).all()) and torch.unique(key).numel() == key.numel()


def test_the_pipelines_batches_keep_the_sampler_contract():
    """`run()`, the trainer's path, yields the pipeline's own batches: the sampler contract holds."""
    graph = feature_graph()
    loader = NeighborLoader(graph, num_neighbors=FANOUTS, batch_size=50, pipeline="serial",
                            sampler=SamplerSpec("bsp", FANOUTS))
    seeds = list(graph.train_idx.split(50))
    for prepared, s in zip(loader.run(seeds, sampler_seed=1), seeds):
        assert_valid_batch(prepared.batch, graph, s, FANOUTS)
    loader.close()


def test_trim_to_layer_gives_the_untrimmed_output_at_the_seeds(planetoid_cora):
    """PyG's trim_to_layer cuts each layer's last hops off as prefixes; the seeds' outputs stay."""
    torch.manual_seed(0)
    model = GraphSAGE(1433, 32, 3, 7).eval()
    loader = NeighborLoader(planetoid_cora, num_neighbors=[5, 4, 3], batch_size=64, pipeline="serial")
    for step, batch in enumerate(loader):
        full = model(batch.x, batch.edge_index)[:batch.batch_size]
        trimmed = model(batch.x, batch.edge_index, num_sampled_nodes_per_hop=batch.num_sampled_nodes,
                        num_sampled_edges_per_hop=batch.num_sampled_edges)[:batch.batch_size]
        torch.testing.assert_close(trimmed, full)
        if step == 3:
            break


def test_async_and_serial_give_the_same_batches_and_each_epoch_reshuffles():
    graph = feature_graph()
    made = {}
    for pipeline in ("serial", "async"):
        with NeighborLoader(graph, num_neighbors=FANOUTS, batch_size=40, input_nodes=graph.train_idx, shuffle=True,
                            pipeline=pipeline, seed=7) as loader:
            made[pipeline] = batches(loader, epochs=2)
    for serial, piped in zip(made["serial"], made["async"]):
        assert len(serial) == len(piped) == 8
        for a, b in zip(serial, piped):
            assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a.keys() if torch.is_tensor(a[k]))
            assert a.num_sampled_nodes == b.num_sampled_nodes and a.num_sampled_edges == b.num_sampled_edges
    first, second = made["serial"]
    assert not torch.equal(first[0].input_id, second[0].input_id)  # epoch 2 is another order


def test_a_sampler_object_travels_into_the_async_pipeline():
    """A sampler handed as an object, not a spec, is pickled into the sampler process (its
    torch.Generator once made that process die unpickling it): the same batches as in serial."""
    graph = feature_graph()
    made = {}
    for pipeline in ("serial", "async"):
        sampler = bsp.BSPSampler(graph, FANOUTS, seed=5, once=True)
        with NeighborLoader(graph, num_neighbors=FANOUTS, batch_size=40, input_nodes=graph.train_idx, shuffle=True,
                            pipeline=pipeline, seed=7, sampler=sampler) as loader:
            made[pipeline] = batches(loader)[0]
    assert len(made["serial"]) == len(made["async"]) == 8
    for a, b in zip(made["serial"], made["async"]):
        assert torch.equal(a.n_id, b.n_id) and torch.equal(a.edge_index, b.edge_index)


def test_input_nodes_as_a_mask_ids_or_none_and_drop_last():
    graph = feature_graph()
    mask = torch.zeros(graph.num_nodes, dtype=torch.bool)
    mask[graph.train_idx] = True
    by_mask = NeighborLoader(graph, [2], input_nodes=mask, batch_size=64, pipeline="serial")
    by_ids = NeighborLoader(graph, [2], input_nodes=graph.train_idx, batch_size=64, drop_last=True,
                            pipeline="serial")
    every = NeighborLoader(graph, [2], batch_size=64, pipeline="serial")
    assert (len(by_mask), len(by_ids), len(every)) == (5, 4, 10)
    assert [b.batch_size for b in by_mask] == [64, 64, 64, 64, 44]
    assert [b.batch_size for b in by_ids] == [64] * 4
    assert torch.equal(torch.cat([b.n_id[:b.batch_size] for b in every]), torch.arange(graph.num_nodes))
    for loader in (by_mask, by_ids, every):
        loader.close()


@pytest.mark.parametrize("keywords, words", [
    ({"replace": True}, "does not support PyG's replace=True: sampling with replacement"),
    ({"num_workers": 4}, "num_workers=4: conveyor runs its own sampler and feature-loader processes"),
    ({"transform": str}, "transform="),
    ({"disjoint": True}, "disjoint=True"),
    ({"subgraph_type": "induced"}, "subgraph_type='induced'"),
    ({"time_attr": "time"}, "temporal sampling"),
    ({"collate_fn": list}, "collate_fn="),
    ({"persistent_workers": True}, "persistent_workers=True"),
    ({"fanouts": [2]}, "the keyword 'fanouts', which neither it nor PyG's NeighborLoader takes"),
    ({"num_neighbors": {("a", "to", "b"): [2]}}, "a dict per edge type is for heterogeneous graphs"),
    ({"input_nodes": ("paper", None)}, "node types are for heterogeneous graphs"),
    ({"input_nodes": torch.tensor([1, 1])}, "seeds must be unique"),
    ({"batch_size": 0}, "batch_size must be a positive integer"),
    ({"pipeline": "threads"}, "pipeline"),
    ({"sampler": "fastest"}, "sampler must be one of auto"),
])
def test_an_unsupported_keyword_is_refused_by_name(keywords, words):
    arguments = {"num_neighbors": [2], "batch_size": 8, "pipeline": "serial", **keywords}
    with pytest.raises(ConveyorError, match=re.escape(words)):
        NeighborLoader(feature_graph(), **arguments)


def test_pygs_defaults_spelled_out_are_accepted():
    loader = NeighborLoader(feature_graph(), [2], batch_size=8, pipeline="serial", replace=False, num_workers=0,
                            subgraph_type="directional", disjoint=False, directed=True, transform=None,
                            persistent_workers=False, pin_memory=False)
    assert len(loader) == 75
    loader.close()


def test_heterogeneous_data_is_refused():
    from torch_geometric.data import HeteroData
    with pytest.raises(ConveyorError, match="homogeneous graph"):
        NeighborLoader(HeteroData(), [2], pipeline="serial")


def test_a_closed_loader_says_so():
    loader = NeighborLoader(feature_graph(), [2], batch_size=8, pipeline="serial")
    loader.close()
    with pytest.raises(ConveyorError, match="was closed"):
        next(iter(loader))


# -- a PyG training loop, the loader swapped ------------------------------------------------------

STOCK = {"GraphSAGE": GraphSAGE, "GCN": GCN, "GAT": GAT, "GIN": GIN}
SEEDS, EPOCHS = tuple(range(12)), 30


def pyg_loop_accuracy(data, model_cls, seed, make_loader) -> float:
    """PyG's mini-batch loop as its examples write it; test accuracy of full-graph inference."""
    torch.manual_seed(seed)
    model = model_cls(data.num_features, 64, 2, 7, dropout=0.5)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    loader = make_loader(data, num_neighbors=[10, 10], batch_size=32, input_nodes=data.train_mask, shuffle=True)
    for _ in range(EPOCHS):
        model.train()
        for batch in loader:
            out = model(batch.x, batch.edge_index)[:batch.batch_size]
            loss = F.cross_entropy(out, batch.y[:batch.batch_size])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    getattr(loader, "close", lambda: None)()
    model.eval()
    with torch.no_grad():
        pred = model(data.x, data.edge_index).argmax(-1)
    return float((pred[data.test_mask] == data.y[data.test_mask]).float().mean())


@pytest.fixture
def one_thread():
    """cora's batches are tiny: torch's OpenMP threads only spin against each other (on a busy
    2-core machine a step took 40x longer with 2 threads than with 1)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def conveyor_loader(seed):
    return lambda data, **kw: NeighborLoader(data, pipeline="serial", seed=seed, **kw)


@pytest.mark.slow
@pytest.mark.parametrize("name", STOCK)
def test_a_pyg_loop_trains_each_stock_model_as_over_pygs_loader(planetoid_cora, name, one_thread):
    """The mean test accuracy over twelve seeds is within 1.5 points of the same loop over PyG's
    NeighborLoader (which needs pyg-lib or torch_sparse)."""
    from torch_geometric.loader import NeighborLoader as PyGLoader
    ours = [pyg_loop_accuracy(planetoid_cora, STOCK[name], s, conveyor_loader(s)) for s in SEEDS]
    theirs = [pyg_loop_accuracy(planetoid_cora, STOCK[name], s, PyGLoader) for s in SEEDS]
    mean_ours, mean_theirs = sum(ours) / len(SEEDS), sum(theirs) / len(SEEDS)
    assert mean_ours > 0.6, ours
    assert abs(mean_ours - mean_theirs) <= 0.015, (mean_ours, mean_theirs, ours, theirs)


def test_the_async_loader_trains_in_a_pyg_loop(planetoid_cora, one_thread):
    """The default pipeline (async) behind the same loop: cora's accuracy as PyG's examples get."""
    accuracy = pyg_loop_accuracy(planetoid_cora, GraphSAGE, 0, lambda data, **kw: conveyor.NeighborLoader(
        data, seed=0, **kw))
    assert accuracy >= 0.76


def readme_example() -> str:
    text = (REPO / "README.md").read_text()
    return re.search(r"<!-- loader-example[^>]*-->\n```python\n(.*?)```", text, re.S).group(1)


def test_the_readme_loader_example_trains_cora(tmp_path, monkeypatch, data_root):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").symlink_to(data_root)  # the example's root="data", prepared offline
    scope = {"__name__": "__main__"}  # the example's guarded block runs, as in a script
    exec(compile(readme_example(), "README.md", "exec"), scope)
    assert scope["accuracy"] >= 0.76


# -- the trainer's batches come through the loader ------------------------------------------------

def test_the_trainer_draws_its_batches_through_the_loader(tmp_path, data_root):
    """The run's batch source is a PipelineLoader, NeighborLoader's base, iterated along its seed
    plan; a NeighborLoader over the training nodes with the run's seed and sampler gives the
    trainer's epochs, node for node."""
    from conveyor.loader.pipeline_loader import PipelineLoader
    from conveyor.trainer.context import LocalContext
    from conveyor.trainer.run import loader_parts, start_run
    from tests.helpers import make_config

    settings = make_config("data=cora", f"data.root={data_root}", "pipeline=serial", "sampler.fanouts=[4,3]",
                           "trainer.batch_size=32", "run.seed=5", f"run.out_dir={tmp_path}")
    ctx = LocalContext(settings)
    run = start_run(settings, ctx)
    assert type(run.source) is PipelineLoader and run.source.parts.settings == settings.pipeline
    assert len(run.source) == 5  # cora's 140 training nodes in batches of 32
    spec = loader_parts(settings, ctx.device).sampler
    with NeighborLoader(ctx.graph, [4, 3], input_nodes=ctx.graph.train_idx, batch_size=32, shuffle=True,
                        pipeline="serial", sampler=spec, seed=5) as loader:
        for epoch in (1, 2):
            pyg_batches = list(iter(loader))
            assert len(pyg_batches) == len(loader) == 5
            for prepared, batch in zip(run.source.epoch(epoch), pyg_batches, strict=True):
                assert torch.equal(prepared.batch.n_id, batch.n_id) and torch.equal(prepared.x, batch.x)
                assert torch.equal(prepared.y.long(), batch.y[:batch.batch_size])
    run.source.close()
