"""GAT as Velickovic et al. (2018) built it for Cora and CiteSeer: PyG's `GAT` with the output
layer's own number of attention heads.

PyG's `GAT` gives every layer `heads` heads and averages them in the output layer: 8 averaged
output heads with the paper's 8 hidden ones, the paper's PubMed model. Its Cora and CiteSeer model
has one output head (PyG's examples/gat.py builds it by hand). Measured on Cora (10 seeds, the
defaults of conf/data/planetoid/cora_gat.yaml otherwise): the one-head output gains about half a
point (docs/accuracy.md). Everything else is PyG's: hop-by-hop training (`PerHopGNN`), layer-wise
evaluation (`inference_per_layer`) and `conveyor.load` take it as a `BasicGNN`.
"""
from __future__ import annotations

import torch_geometric.nn as pyg_nn
from torch_geometric.nn import GATConv


class GAT(pyg_nn.GAT):
    """`torch_geometric.nn.GAT` whose last layer averages `out_heads` attention heads (the other
    layers: `heads`, concatenated)."""

    def __init__(self, in_channels: int, hidden_channels: int, num_layers: int, out_channels: int | None = None,
                 out_heads: int = 1, **kwargs):
        super().__init__(in_channels, hidden_channels, num_layers, out_channels, **kwargs)
        last = self.convs[-1]
        self.convs[-1] = GATConv(last.in_channels, last.out_channels, heads=out_heads, concat=False,
                                 dropout=last.dropout, add_self_loops=last.add_self_loops,
                                 bias=last.bias is not None)
        self.out_heads = out_heads
