"""The typed models' sums by a CSR product (trainer/models/sparse.py: `bipartite_sage_layer` for
to_hetero's SAGEConvs, `linear_of_mean` for R-GCN's relation means) against PyG's layers, in
float64: the same outputs and the same gradients, through hidden (widening) and last (narrowing)
layers, with targets that have no in-edges."""
import torch
from torch_geometric.nn import GraphSAGE, SAGEConv, to_hetero
from torch_geometric.utils import scatter

from conveyor.trainer.models.hetero import RGCN, HeteroBasicGNN, key
from conveyor.trainer.models.sparse import bipartite_sage_layer, linear_first, linear_of_mean

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
        assert linear_first(SIZES["author"], 15, e.size(1), 64, width_out) is linear_first_expected
        ours = {"paper": linear_of_mean(x["author"], e, 15, weight)}
        mean = scatter(x["author"].index_select(0, e[0]), e[1], 0, dim_size=15, reduce="mean")
        assert_same(ours, {"paper": mean @ weight.t()}, [x["author"], weight])
