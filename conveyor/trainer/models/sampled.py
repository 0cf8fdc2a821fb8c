"""GraphSAGE, GCN and an MLP baseline over a `SampledBatch`'s per-hop edge lists.

Layer i runs on hop L-i+1's edges: it maps the features of the N_h nodes reached within h hops
to the N_{h-1} nodes reached within h-1 hops, so the last layer leaves one row per seed.
Because every hop's node set is a prefix of the next, target ids are valid source ids too.
"""
from __future__ import annotations

from torch import Tensor, nn
from torch_geometric.nn import GCNConv, SAGEConv

from conveyor.core import ConveyorError
from conveyor.trainer.model_registry import model_entry
from conveyor.trainer.models.adapter import PerHopForward, model_from_target
from conveyor.trainer.models.dropout import relu_dropout
from conveyor.trainer.models.gcn import gcn_layer
from conveyor.trainer.models.sparse import Adjacency, gcn_batch_layer, is_plain_sage, sage_layer, sage_whole_layer
from conveyor.trainer.settings import ModelSettings

LAYERS = {"sage": SAGEConv, "gcn": GCNConv, "mlp": nn.Linear}  # the kinds SampledGNN runs, by their layer


class SampledGNN(PerHopForward):
    def __init__(self, kind: str, in_dim: int, hidden: int, out_dim: int, num_layers: int,
                 dropout: float = 0.5, input_dropout: float = 0.0, fast_dropout: bool = True):
        super().__init__()
        if kind not in LAYERS:
            raise ConveyorError(f"unknown model {kind!r}; choose one of {', '.join(LAYERS)} "
                                f"(e.g. model=sage).")
        if num_layers < 1 or hidden < 1:
            raise ConveyorError(f"a model needs >= 1 layer and hidden >= 1, got {num_layers} layers "
                                f"and hidden={hidden}.")
        self.kind, self.dropout, self.input_dropout, self.fast_dropout = kind, dropout, input_dropout, fast_dropout
        # Plain values: how conveyor.load builds it again (trainer/models/portable.py).
        self.init_args = {"kind": kind, "in_dim": in_dim, "hidden": hidden, "out_dim": out_dim,
                          "num_layers": num_layers, "dropout": dropout, "input_dropout": input_dropout,
                          "fast_dropout": fast_dropout}
        dims = [in_dim] + [hidden] * (num_layers - 1) + [out_dim]
        self.layers = nn.ModuleList(LAYERS[kind](i, o) for i, o in zip(dims[:-1], dims[1:]))

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    def edge_inputs(self) -> tuple:
        """conveyor's GCN weighs its edges by `edge_weight` where the graph has one."""
        return ("edge_weight",) if self.kind == "gcn" else ()

    def inference_per_layer(self, layer: int, x: Tensor, edge_index: Tensor, batch_size: int,
                            degree: Tensor | None = None, edge_weight: Tensor | None = None,
                            adjacency: Adjacency | None = None) -> Tensor:
        """Layer `layer` alone, from the features `x` of its sources (targets first) to its first
        `batch_size` targets, with the activation and dropout after it (dropout only while
        training). PyG's BasicGNN name: `forward` runs it hop by hop, layer-wise inference
        (trainer/loop/layerwise.py) layer by layer over the whole graph. `degree`: the whole graph's
        in-degree of each row of `x`, for GCN's normalisation (trainer/models/gcn.py).
        `adjacency`: edge_index's CSR structure where the caller keeps it (trainer/models/sparse.py:
        SAGE and GCN sum by a sparse-matrix product on the CPU)."""
        conv = self.layers[layer]
        if self.kind == "sage":
            x = sage_layer(conv, x, edge_index, batch_size, adjacency)
        elif self.kind == "gcn" and degree is None:
            x = gcn_batch_layer(conv, x, edge_index, batch_size, edge_weight, adjacency)
        elif self.kind == "gcn":
            x = gcn_layer(conv, x, edge_index, batch_size, degree, edge_weight, adjacency)
        else:  # mlp: the same depth, but each node sees only its own features
            x = conv(x[:batch_size])
        if layer < len(self.layers) - 1:
            x = relu_dropout(x, self.dropout, self.training, self.fast_dropout)
        return x


    def runs_whole_layers(self) -> bool:
        """Whether `inference_whole_layer` computes this model (its SAGE layers as conveyor builds them)."""
        return self.kind == "sage" and all(is_plain_sage(conv) for conv in self.layers)

    def inference_whole_layer(self, layer: int, inputs: Tensor, adjacency: Adjacency, chunk: int) -> Tensor:
        """`inference_per_layer` for all of a layer's targets at once, on the CPU: `inputs` is the
        previous layer's output (or the features), `adjacency` a whole-layer plan's (its columns are
        rows of `inputs`, trainer/loop/plan.py); the same values as batches of `chunk` targets give."""
        x = sage_whole_layer(self.layers[layer], inputs, adjacency, chunk)
        if layer < len(self.layers) - 1:
            x = relu_dropout(x, self.dropout, self.training, self.fast_dropout)
        return x


def build_model(model: ModelSettings, in_dim: int, out_dim: int, num_layers: int) -> nn.Module:
    """`model._target_` (any class, by Hydra; trainer/models/adapter.py), else the built-in `model.name`
    as its registry entry builds it (trainer/model_registry.py)."""
    if model._target_ is not None:
        return model_from_target(model, in_dim, out_dim, num_layers)
    return model_entry(model.name).builder(typed=False)(model, in_dim, out_dim, num_layers)


def sampled_gnn(model: ModelSettings, in_dim: int, out_dim: int, num_layers: int) -> SampledGNN:
    """sage, gcn, mlp: their registry entries' builder."""
    return SampledGNN(model.name, in_dim, model.hidden, out_dim, num_layers, model.dropout, model.input_dropout,
                      model.uses_fast_dropout())
