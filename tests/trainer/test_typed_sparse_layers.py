"""The typed models' sums by a CSR product (trainer/models/sparse.py: `bipartite_sage_layer` for
to_hetero's SAGEConvs, `linear_of_mean` for R-GCN's relation means) against PyG's layers, in
float64: the same outputs and the same gradients, through hidden (widening) and last (narrowing)
layers, with targets that have no in-edges."""
import types

import pytest
import torch
import torch.nn.functional as F
from torch_geometric.nn import GraphSAGE, SAGEConv, to_hetero
from torch_geometric.utils import scatter

from benchmarks.train_step import draw_typed_batches, typed_twins
from conveyor.partition.datasets.synthetic_mag import generate
from conveyor.partition.hetero import TypeCut
from conveyor.trainer.models.hetero import RGCN, HeteroBasicGNN, key, relation_edges, typed_model
from conveyor.trainer.models.sparse import adjacency, bipartite_sage_layer, linear_first, linear_of_mean
from conveyor.trainer.settings import ModelSettings

NODE_TYPES = ["paper", "author"]
EDGE_TYPES = [("author", "writes", "paper"), ("paper", "cites", "paper"), ("paper", "rev_writes", "author")]
SIZES = {"paper": 40, "author": 25}
TARGETS = {"paper": 15, "author": 10}


def typed_batch(width=8, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = {t: torch.randn(n, width, generator=gen, dtype=torch.float64, requires_grad=True) for t, n in SIZES.items()}
    edges = {}
    for src, rel, dst in EDGE_TYPES:  # targets among the first TARGETS[dst], the last two of them without in-edges
        count = 60
        edges[(src, rel, dst)] = torch.stack([torch.randint(0, SIZES[src], (count,), generator=gen),
                                              torch.randint(0, TARGETS[dst] - 2, (count,), generator=gen)])
    return x, edges


def assert_same(ours: dict, theirs: dict, inputs: list):
    assert set(ours) == set(theirs)
    for t in ours:
        assert torch.allclose(ours[t], theirs[t], atol=1e-12), t
    probe = {t: torch.randn_like(v) for t, v in ours.items()}
    grads_ours = torch.autograd.grad(sum((ours[t] * probe[t]).sum() for t in ours), inputs, allow_unused=True)
    grads_theirs = torch.autograd.grad(sum((theirs[t] * probe[t]).sum() for t in theirs), inputs, allow_unused=True)
    assert [g is None for g in grads_ours] == [g is None for g in grads_theirs]  # (the other layer's weights)
    assert any(g is not None for g in grads_ours)
    for a, b in zip(grads_ours, grads_theirs):
        assert a is None or torch.allclose(a, b, atol=1e-12)


def pyg_sage_layer(model, layer, x, num_dst, edges):
    """to_hetero's sum over relations of PyG's own SAGEConv forwards (the layer before the CSR products)."""
    out = {}
    for (src, rel, dst), e in edges.items():
        y = model.module.convs[layer][key((src, rel, dst))]((x[src], x[dst][:num_dst[dst]]), e)
        out[dst] = y if dst not in out else out[dst] + y
    return out


def test_to_hetero_sage_layers_match_pyg_and_its_gradients():
    torch.manual_seed(0)
    x, edges = typed_batch()
    module = to_hetero(GraphSAGE((-1, -1), 16, 2, 4, dropout=0.0), (NODE_TYPES, EDGE_TYPES), aggr="sum").double()
    module(x, edges)  # the lazy layers take their widths
    model = HeteroBasicGNN(module).eval()
    params = list(module.parameters())
    hidden = model.typed_layer(0, x, TARGETS, edges)  # 8 -> 16: the product on the inputs
    assert_same(hidden, {t: v.relu() for t, v in pyg_sage_layer(model, 0, x, TARGETS, edges).items()},
                [*x.values(), *params])
    h = {t: torch.randn(SIZES[t], 16, dtype=torch.float64, requires_grad=True) for t in NODE_TYPES}
    last = model.typed_layer(1, h, TARGETS, edges)  # 16 -> 4: lin_l first, the product on its outputs
    assert_same(last, pyg_sage_layer(model, 1, h, TARGETS, edges), [*h.values(), *params])


def test_a_sage_conv_set_up_otherwise_runs_pyg_forward():
    x, edges = typed_batch()
    conv = SAGEConv((8, 8), 4, aggr="max").double()
    e = edges[("author", "writes", "paper")]
    out = bipartite_sage_layer(conv, x["author"], x["paper"][:15], e)
    assert torch.equal(out, conv((x["author"], x["paper"][:15]), e))


def test_rgcn_relation_means_match_scatter_and_its_gradients():
    torch.manual_seed(0)
    x, edges = typed_batch()
    model = RGCN((NODE_TYPES, EDGE_TYPES), {t: 8 for t in NODE_TYPES}, 16, 4, 2, dropout=0.0).double().eval()
    params = list(model.parameters())

    def reference(layer, x):  # the R-GCN layer by PyG's gather and scatter
        out = {t: model.root[layer][t](x[t][:TARGETS[t]]) for t in NODE_TYPES}
        for (src, rel, dst), e in edges.items():
            mean = scatter(x[src].index_select(0, e[0]), e[1], 0, dim_size=TARGETS[dst], reduce="mean")
            out[dst] = out[dst] + model.rel[layer][key((src, rel, dst))](mean)
        return {t: v.relu() for t, v in out.items()} if layer == 0 else out

    assert_same(model.typed_layer(0, x, TARGETS, edges), reference(0, x), [*x.values(), *params])
    h = {t: torch.randn(SIZES[t], 16, dtype=torch.float64, requires_grad=True) for t in NODE_TYPES}
    assert_same(model.typed_layer(1, h, TARGETS, edges), reference(1, h), [*h.values(), *params])


def test_a_target_without_in_edges_gets_the_bias_alone():
    x, edges = typed_batch()
    weight, bias = torch.randn(3, 8, dtype=torch.float64), torch.randn(3, dtype=torch.float64)
    out = linear_of_mean(x["author"], edges[("author", "writes", "paper")], 15, weight, bias)
    assert torch.equal(out[13], bias) and torch.equal(out[14], bias)


def test_the_mean_before_or_after_the_linear_map_gives_pyg_s_gradients():
    x, edges = typed_batch(width=64)
    e = edges[("author", "writes", "paper")]
    for width_out, linear_first_expected in ((2, True), (256, False)):
        weight = torch.randn(width_out, 64, dtype=torch.float64, requires_grad=True)
        assert linear_first(SIZES["author"], 15, e.size(1), 64, width_out, source_grad=True) is linear_first_expected
        ours = {"paper": linear_of_mean(x["author"], e, 15, weight)}
        mean = scatter(x["author"].index_select(0, e[0]), e[1], 0, dim_size=15, reduce="mean")
        assert_same(ours, {"paper": mean @ weight.t()}, [x["author"], weight])


def small_typed_batch():
    """A typed graph's training batch as the trainer's typed models take it (benchmarks/train_step.py)."""
    graph = generate(0.0005, 0, num_classes=4)
    args = types.SimpleNamespace(fanouts=[4, 3], batch_size=16, batches=1, seed=0)
    return graph, draw_typed_batches(graph, args)[0]


@pytest.mark.parametrize("kind", ["hetero-sage", "rgcn"])
def test_the_training_step_matches_pygs_layers_outputs_and_gradients(kind):
    """The whole hop-by-hop forward (each layer's edges cut by one sort, each type's rows kept apart
    between layers) against the same weights on PyG's own layers (benchmarks/train_step.py's stock
    twins: to_hetero's SAGEConv forwards, R-GCN's scatter means), float64."""
    graph, batch = small_typed_batch()
    ours, stock = typed_twins(kind, graph, 16, 2, seed=0)
    x = batch["x"].double()
    for model in (ours, stock):
        model.double().eval()
        model(x, batch["layers"], batch["n_id"], batch["edge_type"])  # a lazy to_hetero takes its widths
    out_ours = ours(x, batch["layers"], batch["n_id"], batch["edge_type"])
    out_stock = stock(x, batch["layers"], batch["n_id"], batch["edge_type"])
    assert out_ours.shape == (16, 4) and torch.allclose(out_ours, out_stock, atol=1e-12)
    probe = torch.randn_like(out_ours)
    (out_ours * probe).sum().backward()
    (out_stock * probe).sum().backward()
    grads = [(n, p.grad, q.grad) for (n, p), q in zip(ours.named_parameters(), stock.parameters())]
    assert sum(a is not None for _, a, _ in grads) > 10
    for name, a, b in grads:
        assert (a is None) == (b is None), name
        assert a is None or torch.allclose(a, b, atol=1e-12), name


def test_one_sort_gives_each_relations_edges_by_target_and_their_structure():
    graph, batch = small_typed_batch()
    edge_index, num_src, num_dst = batch["layers"][0]
    cut, targets = TypeCut(graph.schema, batch["n_id"][:num_src]), TypeCut(graph.schema, batch["n_id"][:num_dst])
    edges, structures = relation_edges(cut, targets.per_type, edge_index, batch["edge_type"][0], graph.schema)
    by_relation = cut.edges(edge_index, batch["edge_type"][0].long())  # cut by relation, each in its order
    sizes = dict(zip(graph.schema.node_types, targets.per_type))
    for edge_type, theirs in zip(graph.schema.edge_types, by_relation):
        ours, adj = edges[edge_type], structures[edge_type]
        assert torch.equal(ours, theirs[:, torch.argsort(theirs[1], stable=True)]), edge_type
        made = adjacency(theirs, sizes[edge_type[2]], adj.num_src)
        assert torch.equal(adj.crow, made.crow) and torch.equal(adj.col, made.col) and adj.order is None
    assert sum(e.size(1) for e in edges.values()) == edge_index.size(1) > 0


@pytest.mark.parametrize("fast", [None, False])
def test_typed_built_ins_take_conveyors_dropout_masks_as_model_fast_dropout_says(fast):
    graph = generate(0.0005, 0, num_classes=4)
    for name in ("rgcn", "sage"):
        model = typed_model(ModelSettings(name=name, fast_dropout=fast), graph, 2)
        assert model.inner.fast_dropout is (fast is None), name  # null: a built-in's default, conveyor's masks
    layer = HeteroBasicGNN(to_hetero(GraphSAGE((-1, -1), 8, 2, 4, dropout=0.5), (NODE_TYPES, EDGE_TYPES)))
    x = torch.randn(30, 8)
    torch.manual_seed(1)
    plain = layer.between_layers(0, "paper", x)
    torch.manual_seed(1)
    assert torch.equal(plain, F.dropout(F.relu(x), 0.5, True))  # fast_dropout=False: F.dropout's draws, as before
