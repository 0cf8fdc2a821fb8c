"""Neighbourhood sums as a sparse-matrix product: the built-in SAGE and GCN layers, and the typed
models' (to_hetero's SAGEConvs, R-GCN's means: trainer/models/hetero.py), on the CPU.

PyG's layers gather every edge's source row ([edges, width] in memory) and scatter it into the
targets, and their backward does the same the other way. A CSR product reads each source row in
place and writes each target row once; torch's autograd gives its backward (the transposed
product). On this CPU a training step of the built-in models so costs a fraction of the stock
layers' on the same batches (benchmarks/train_step.py). The layers keep PyG's parameters
(`SAGEConv`, `GCNConv`: checkpoints and `conveyor.load` are unchanged) and compute the same
function; where a conv is set up in a way this file does not cover, PyG's own forward runs.

`Adjacency` is the [num_dst, num_src] structure of a layer's edges: made once per layer of a
batch, and kept with layer-wise evaluation's batches (trainer/loop/plan.py) so that each
evaluation pass reuses it.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.nn import GCNConv, SAGEConv
from torch_geometric.utils import scatter


@dataclass
class Adjacency:
    crow: Tensor  # [num_dst + 1]: each target's first slot
    col: Tensor  # [edges]: each slot's source, slots grouped by target
    order: Tensor | None  # each slot's column of the edge_index it came from; None: the same order
    num_src: int
    looped: tuple | None = None  # (col, own slots) with each target's own entry: `with_own`
    own_col: Tensor | None = None  # each target's own column; None: its own index (targets come first)
    kept: dict | None = None  # matrices kept for reuse by a whole-layer plan (`kept_matrix`), else None

    @property
    def num_dst(self) -> int:
        return self.crow.numel() - 1

    def counts(self) -> Tensor:
        return self.crow.diff()

    def in_slot_order(self, per_edge: Tensor) -> Tensor:
        return per_edge if self.order is None else per_edge.index_select(0, self.order)

    def rows(self) -> Tensor:
        """Each slot's target."""
        return torch.repeat_interleave(torch.arange(self.num_dst, device=self.crow.device), self.counts(),
                                       output_size=self.col.numel())

    def edge_index(self) -> Tensor:
        """The edges in slot order (row 0 sources, row 1 targets)."""
        return torch.stack([self.col, self.rows()])

    def edge_slots(self) -> Tensor:
        """Each in-edge's slot once every target before its own has one entry more."""
        return self.rows().add_(torch.arange(self.col.numel(), device=self.crow.device))

    def with_own(self) -> tuple:
        """(columns, each target's own slot) once each target i has one entry more, at column i,
        after its in-edges. Made once, then kept (8 bytes an edge: the edge slots are remade)."""
        if self.looped is None:
            num_dst, device = self.num_dst, self.crow.device
            own_slots = self.crow[1:] + torch.arange(num_dst, device=device)
            col = torch.empty(self.col.numel() + num_dst, dtype=self.col.dtype, device=device)
            col[self.edge_slots()] = self.col
            col[own_slots] = (torch.arange(num_dst, dtype=col.dtype, device=device) if self.own_col is None
                              else self.own_col.to(col.dtype))
            self.looped = (col, own_slots)
        return self.looped

    def matrix(self, edge_values: Tensor, own_values: Tensor | None = None, own_row: bool = False) -> Tensor:
        """The [num_dst, num_src] CSR matrix with these in-edge values (in slot order) and, given
        `own_values`, each target's own entry; `own_row`: the own entries in a row of their own
        after each target's ([2 num_dst, num_src]: row 2i its in-edges, row 2i+1 itself)."""
        if own_values is None:
            return csr(self.crow, self.col, edge_values, (self.num_dst, self.num_src))
        col, own_slots = self.with_own()
        values = torch.empty(col.numel(), dtype=edge_values.dtype, device=col.device)
        values[self.edge_slots()] = edge_values
        values[own_slots] = own_values
        step = torch.arange(self.num_dst + 1, device=col.device)
        if not own_row:
            return csr(self.crow + step, col, values, (self.num_dst, self.num_src))
        # Row 2i starts where target i's in-edges do, row 2i+1 at its own entry.
        crow = torch.stack([self.crow[:-1] + step[:-1], own_slots], 1).view(-1)
        crow = torch.cat([crow, self.crow[-1:] + self.num_dst])
        return csr(crow, col, values, (2 * self.num_dst, self.num_src))


    def kept_matrix(self, key: tuple, build) -> Tensor:
        """`build()`'s matrix, made once per `key` where this structure keeps its matrices (`kept`
        is a dict: a whole-layer plan's, trainer/loop/plan.py), else made each call."""
        if self.kept is None:
            return build()
        if key not in self.kept:
            self.kept[key] = build()
        return self.kept[key]


def csr(crow: Tensor, col: Tensor, values: Tensor, size: tuple) -> Tensor:
    with warnings.catch_warnings():  # torch's "CSR support is in beta"
        warnings.filterwarnings("ignore", message="Sparse (CSR tensor support is in beta|invariant checks)")
        return torch.sparse_csr_tensor(crow, col, values, size)


def adjacency(edge_index: Tensor, num_dst: int, num_src: int) -> Adjacency:
    """The CSR structure of `edge_index` (row 0 sources, row 1 targets below num_dst): one stable
    sort by target, of int32 keys (on this CPU 5 ms for a 365K-edge hop, ~1% of a training step).
    No host read of a tensor's value, so a run's figures stay on the device (tests/trainer/test_loop.py)."""
    src, dst = edge_index[0].long(), edge_index[1].long()
    counts = torch.bincount(dst, minlength=num_dst)
    crow = torch.zeros(num_dst + 1, dtype=torch.long, device=dst.device)
    torch.cumsum(counts, 0, out=crow[1:])
    order = torch.argsort(dst.int() if num_dst < 2 ** 31 else dst, stable=True)
    return Adjacency(crow, src.index_select(0, order), order, num_src)


def can_sum_sparse(x: Tensor) -> bool:
    """Where the product beats PyG's gather-scatter: measured on the CPU only, in float32 and
    float64 (torch's CSR product has no bfloat16 kernel there, so autocast keeps PyG's path)."""
    return (x.device.type == "cpu" and x.dtype in (torch.float32, torch.float64)
            and not torch.is_autocast_enabled("cpu"))


def mean_weights(adj: Adjacency, dtype: torch.dtype) -> Tensor:
    """1 / in-degree at each in-edge's slot: the product then gives each target's mean."""
    counts = adj.counts()
    return counts.clamp(min=1).to(dtype).reciprocal_().repeat_interleave(counts, output_size=adj.col.numel())


def is_plain_sage(conv) -> bool:
    """A SAGEConv as conveyor builds it (mean, no projection, root weight): the sums below are its."""
    return (isinstance(conv, SAGEConv) and getattr(conv, "aggr", None) == "mean" and not conv.project
            and conv.root_weight)


def sage_layer(conv: SAGEConv, x: Tensor, edge_index: Tensor, num_dst: int, adj: Adjacency | None = None) -> Tensor:
    """`conv((x, x[:num_dst]), edge_index)`: lin_l(mean of neighbours) + lin_r(self). Widening (the
    hidden layers), one product gives each target's mean and its own row side by side, and one
    matrix product applies [lin_l | lin_r]; narrowing (the last layer's classes), lin_l goes first
    (a mean of rows is linear), so the product carries the narrow rows."""
    if not (is_plain_sage(conv) and can_sum_sparse(x)):
        return conv((x, x[:num_dst]), edge_index)
    adj = adj or adjacency(edge_index, num_dst, x.size(0))
    lin_l, lin_r = conv.lin_l, conv.lin_r
    if lin_l.out_channels < lin_l.in_channels:
        out = torch.sparse.mm(adj.matrix(mean_weights(adj, x.dtype)), F.linear(x, lin_l.weight))
        out = out + lin_r(x[:num_dst]) + (lin_l.bias if lin_l.bias is not None else 0.0)  # b also without in-edges
    else:
        own = torch.ones(num_dst, dtype=x.dtype)
        side_by_side = torch.sparse.mm(adj.matrix(mean_weights(adj, x.dtype), own, own_row=True), x)
        weight = torch.cat([lin_l.weight, lin_r.weight], 1)
        out = F.linear(side_by_side.view(num_dst, 2 * x.size(1)), weight, lin_l.bias)
    return F.normalize(out, p=2.0, dim=-1) if conv.normalize else out


def sage_whole_layer(conv: SAGEConv, inputs: Tensor, adj: Adjacency, chunk: int) -> Tensor:
    """`sage_layer` for every target of a layer at once (layer-wise evaluation's whole-layer plan,
    trainer/loop/plan.py): `adj`'s columns are rows of `inputs` (the previous layer's outputs) and its
    `own_col` each target's own row, so no batch gathers its sources' rows. The same arithmetic as
    `sage_layer` over batches of `chunk` targets, bit for bit: each target's sum runs over the same
    entries in the same order, and the dense maps run on the same `chunk`-row blocks."""
    lin_l, lin_r, num_dst = conv.lin_l, conv.lin_r, adj.num_dst
    if lin_l.out_channels < lin_l.in_channels:  # narrowing: lin_l first, once for every input row
        matrix = adj.kept_matrix(("mean", inputs.dtype), lambda: adj.matrix(mean_weights(adj, inputs.dtype)))
        summed = torch.sparse.mm(matrix, F.linear(inputs, lin_l.weight))
        own = inputs.index_select(0, adj.own_col)
        blocks = (summed[s:s + chunk] + lin_r(own[s:s + chunk]) + (lin_l.bias if lin_l.bias is not None else 0.0)
                  for s in range(0, num_dst, chunk))
    else:
        def side_by_side_matrix():
            own_weights = torch.ones(num_dst, dtype=inputs.dtype)
            return adj.matrix(mean_weights(adj, inputs.dtype), own_weights, own_row=True)
        matrix = adj.kept_matrix(("side_by_side", inputs.dtype), side_by_side_matrix)
        side_by_side = torch.sparse.mm(matrix, inputs).view(num_dst, 2 * inputs.size(1))
        weight = torch.cat([lin_l.weight, lin_r.weight], 1)
        blocks = (F.linear(side_by_side[s:s + chunk], weight, lin_l.bias) for s in range(0, num_dst, chunk))
    out = torch.empty(num_dst, lin_l.out_channels, dtype=inputs.dtype)
    for start, block in zip(range(0, num_dst, chunk), blocks):
        out[start:start + block.size(0)] = F.normalize(block, p=2.0, dim=-1) if conv.normalize else block
    return out


def csr_product(adj: Adjacency, values: Tensor, x: Tensor) -> Tensor:
    """`adj`'s matrix with `values` times the dense `x`, into a fresh output: torch.sparse.mm
    zero-fills its output and copies it once more (two thirds of its time on this CPU); addmm with
    beta 0 writes the product straight in (the output is not read: no stale value survives)."""
    if adj.col.numel() == 0:  # MKL takes no empty matrix; torch's fallback then scales the output by beta
        return x.new_zeros(adj.num_dst, x.size(1))
    out = torch.empty(adj.num_dst, x.size(1), dtype=x.dtype, device=x.device)
    return torch.addmm(out, csr(adj.crow, adj.col, values, (adj.num_dst, adj.num_src)), x, beta=0.0, out=out)


def transposed(adj: Adjacency, values: Tensor) -> tuple:
    """(the [num_src, num_dst] structure of `adj`'s transpose, its values): one stable int32 sort
    of the columns."""
    order = torch.argsort(adj.col.int() if adj.num_src < 2 ** 31 else adj.col, stable=True)
    crow = torch.zeros(adj.num_src + 1, dtype=torch.long, device=values.device)
    torch.cumsum(torch.bincount(adj.col, minlength=adj.num_src), 0, out=crow[1:])
    return Adjacency(crow, adj.rows().index_select(0, order), None, adj.num_dst), values.index_select(0, order)


class CSRProduct(torch.autograd.Function):
    """`A @ x` for a constant CSR matrix A (`adj`'s structure, `values`), and its backward A^T @ grad
    by a CSR product too, A^T's structure made by one stable int32 sort of the columns (only where
    x needs a gradient). torch's own backward of torch.sparse.mm converts the transposed matrix
    instead, which costs more than the product (benchmarks/train_step.py's typed rows)."""

    @staticmethod
    def forward(ctx, x: Tensor, adj: Adjacency, values: Tensor) -> Tensor:
        ctx.adj, ctx.values = adj, values
        return csr_product(adj, values, x)

    @staticmethod
    def backward(ctx, grad: Tensor):
        return csr_product(*transposed(ctx.adj, ctx.values), grad.contiguous()), None, None


def linear_of_mean(x_src: Tensor, edge_index: Tensor, num_dst: int, weight: Tensor, bias: Tensor | None = None,
                   adj: Adjacency | None = None) -> Tensor:
    """F.linear(mean of each target's in-neighbours' rows of `x_src`, weight, bias): a target
    without in-edges gets the bias (its mean is 0). On the CPU one CSR product, before or after the
    linear map, whichever costs fewer multiplications (a mean of rows is linear); elsewhere PyG's
    gather and scatter."""
    if not can_sum_sparse(x_src):
        mean = scatter(x_src.index_select(0, edge_index[0]), edge_index[1], 0, dim_size=num_dst, reduce="mean")
        return F.linear(mean, weight, bias)
    adj = adj or adjacency(edge_index, num_dst, x_src.size(0))
    weights = mean_weights(adj, x_src.dtype)
    if linear_first(x_src.size(0), num_dst, adj.col.numel(), weight.size(1), weight.size(0), x_src.requires_grad):
        out = CSRProduct.apply(F.linear(x_src, weight), adj, weights)
    else:
        out = F.linear(CSRProduct.apply(x_src, adj, weights), weight)
    return out + bias if bias is not None else out


def sum_of_linear_means(relations: list, x_dst: Tensor, root_weight: Tensor, bias: Tensor | None) -> Tensor:
    """F.linear(x_dst, root_weight, bias) + the sum over `relations` ((x_src, edge_index, weight,
    its Adjacency or None) each, into x_dst's targets) of F.linear(mean of the sources, weight): a
    destination type's typed layer (R-GCN's; to_hetero's SAGEConvs summed, their root weights and
    biases summed first, trainer/models/hetero.py). Each relation's term accumulates in place into
    one output (no sum of separate outputs), its mean by a CSR product (`linear_of_mean`'s choice
    of order); a relation without edges here adds nothing."""
    out = F.linear(x_dst, root_weight, bias)
    for x_src, edge_index, weight, adj in relations:
        if not can_sum_sparse(x_src):  # elsewhere PyG's gather and scatter, summed as to_hetero sums
            out = out + linear_of_mean(x_src, edge_index, x_dst.size(0), weight)
            continue
        if edge_index.size(1) == 0:
            continue
        adj = adj or adjacency(edge_index, x_dst.size(0), x_src.size(0))
        values = mean_weights(adj, x_src.dtype)
        if linear_first(x_src.size(0), adj.num_dst, adj.col.numel(), weight.size(1), weight.size(0),
                        x_src.requires_grad):
            out = out.add_(CSRProduct.apply(F.linear(x_src, weight), adj, values))
        else:
            out = out.addmm_(CSRProduct.apply(x_src, adj, values), weight.t())
    return out


SPARSE_MAC = 8  # a CSR product's multiply-add, in dense ones (it reads scattered source rows): on this CPU
SORTED_EDGE = 500  # sorting an edge for the transposed product of a backward (`transposed`), likewise


def linear_first(num_src: int, num_dst: int, edges: int, width_in: int, width_out: int,
                 source_grad: bool = False) -> bool:
    """Whether mapping every source row first (then the product on the mapped rows) costs less
    than the product first (then mapping each target's mean): a relation's sources may far
    outnumber its targets, so the narrower width alone does not decide. Costs in dense
    multiply-adds, a product's and a sort's weighted as measured (SPARSE_MAC, SORTED_EDGE), the
    backward counted where autograd records: the weight's gradient always, and the sources' where
    `source_grad`; a product on mapped rows always has its transpose in the backward (the weight's
    gradient passes through it), one on the sources only where they need a gradient."""
    dense_src, dense_dst = num_src * width_in * width_out, num_dst * width_in * width_out
    sparse_in, sparse_out = SPARSE_MAC * edges * width_in, SPARSE_MAC * edges * width_out
    if not torch.is_grad_enabled():
        return dense_src + sparse_out < sparse_in + dense_dst
    transpose = SORTED_EDGE * edges
    first = 2 * dense_src + 2 * sparse_out + transpose + (dense_src if source_grad else 0)
    after = sparse_in + 2 * dense_dst + (dense_dst + sparse_in + transpose if source_grad else 0)
    return first < after


def bipartite_sage_layer(conv: SAGEConv, x_src: Tensor, x_dst: Tensor, edge_index: Tensor) -> Tensor:
    """`conv((x_src, x_dst), edge_index)` (a relation of a typed graph: sources and targets of their
    own types, `to_hetero`'s convs): lin_l(mean of the sources) + lin_r(the target's own row), the
    mean by `linear_of_mean`; PyG's own forward for a conv set up otherwise or not yet initialised
    (lazy in_channels)."""
    lazy = any(isinstance(p, torch.nn.parameter.UninitializedParameter) for p in conv.parameters())
    if lazy or not (is_plain_sage(conv) and can_sum_sparse(x_src)):
        return conv((x_src, x_dst), edge_index)
    out = linear_of_mean(x_src, edge_index, x_dst.size(0), conv.lin_l.weight, conv.lin_l.bias) + conv.lin_r(x_dst)
    return F.normalize(out, p=2.0, dim=-1) if conv.normalize else out


def summable_sage(conv) -> bool:
    """Whether to_hetero's sum over relations of this SAGEConv's outputs may sum its weights first
    (`summed_sage_layers`): plain (`is_plain_sage`), unnormalised, initialised."""
    lazy = any(isinstance(p, torch.nn.parameter.UninitializedParameter) for p in conv.parameters())
    return not lazy and is_plain_sage(conv) and not conv.normalize


def summed_sage_layers(convs: list, relations: list, x_dst: Tensor) -> Tensor:
    """sum_r convs[r]((x_src_r, x_dst), edge_index_r) for `summable_sage` convs into one node type
    (to_hetero's aggr="sum"; `relations`: (x_src, edge_index, its Adjacency or None) each):
    sum_r lin_l_r(mean_r) + (sum_r W_root_r) x_dst + sum_r b_r, so the root map runs once, not
    once per relation (`sum_of_linear_means`)."""
    root = torch.stack([conv.lin_r.weight for conv in convs]).sum(0)
    biases = [conv.lin_l.bias for conv in convs if conv.lin_l.bias is not None]
    bias = torch.stack(biases).sum(0) if biases else None
    return sum_of_linear_means([(x_src, e, conv.lin_l.weight, adj) for conv, (x_src, e, adj) in zip(convs, relations)],
                               x_dst, root, bias)


def gcn_batch_layer(conv: GCNConv, x: Tensor, edge_index: Tensor, num_dst: int, edge_weight: Tensor | None = None,
                    adj: Adjacency | None = None) -> Tensor:
    """`conv(x, edge_index, edge_weight)[:num_dst]`, GCNConv's normalisation over the batch's edges
    (gcn_norm: each of the num_src nodes gets one self-loop, an existing one keeping its weight;
    deg over the edges into it), but only the num_dst targets computed."""
    if not (conv.normalize and conv.add_self_loops and not conv.improved and can_sum_sparse(x)):
        return conv(x, edge_index, edge_weight)[:num_dst]
    num_src = x.size(0)
    adj = adj or adjacency(edge_index, num_dst, num_src)
    src, dst = edge_index[0].long(), edge_index[1].long()
    weight = torch.ones(src.numel(), dtype=x.dtype) if edge_weight is None else edge_weight.to(x.dtype).view(-1)
    loop = src == dst
    own_weight = torch.ones(num_src, dtype=x.dtype).index_put_((dst[loop],), weight[loop])
    weight = weight.masked_fill(loop, 0.0)  # a self-loop counts once, as its own entry
    deg = torch.zeros(num_src, dtype=x.dtype).index_add_(0, dst, weight).add_(own_weight)
    norm = deg.pow(-0.5).masked_fill_(deg == 0, 0.0)
    value = norm.index_select(0, src).mul_(weight).mul_(norm.index_select(0, dst))
    return gcn_propagate(conv, x, adj, adj.in_slot_order(value), (own_weight * norm.square())[:num_dst])


def gcn_propagate(conv: GCNConv, x: Tensor, adj: Adjacency, value: Tensor, own: Tensor) -> Tensor:
    """sum_j value_ij W x_j + own_i W x_i + b at the targets, the product on the narrower of x and
    W x (GCNConv applies W first, always)."""
    matrix = adj.matrix(value, own)
    if conv.lin.weight.size(0) < conv.lin.weight.size(1):
        out = torch.sparse.mm(matrix, conv.lin(x))
    else:
        out = conv.lin(torch.sparse.mm(matrix, x))
    return out + conv.bias if conv.bias is not None else out
