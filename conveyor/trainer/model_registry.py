"""The built-in models: an open set with one registry. Each entry says what its model can train
(graphs of one node type, typed graphs), how it is built for each, whether it takes
`model.gcn_degrees=graph`, and which of PyG's stock models `mode=compare` trains beside it; every such
question is asked of the entry (trainer/settings.py, trainer/models/, compare/reference.py).

A built-in model is its builder's module and its conf/model YAML, registered here by name; any
other model is a class named by `model._target_` (trainer/models/adapter.py) and needs no entry.
Builders are "module.function" strings, imported when the model is built (PyG loads then).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from conveyor.core import ConveyorError
from conveyor.core.fields import choice
from conveyor.core.targets import load_target


@dataclass(frozen=True)
class ModelEntry:
    """`build(model, in_dim, out_dim, num_layers)`: the model on a graph of one node type (None:
    it trains typed graphs only); `typed_build(model, graph, num_layers, classes)`: on a typed graph (None:
    none); `degrees`: takes model.gcn_degrees=graph; `reference`: PyG's stock class mode=compare
    trains beside it; `graph_free`: reads no edges (the reference slices its seeds' features)."""
    name: str
    help: str
    build: Optional[str] = None
    typed_build: Optional[str] = None
    degrees: bool = False
    reference: Optional[str] = None
    graph_free: bool = False

    def builder(self, typed: bool):
        target = self.typed_build if typed else self.build
        if target is None and typed:
            raise ConveyorError(f"model={self.name} has no typed form; a typed graph trains model="
                                f"{' or model='.join(able(True))}, or a model._target_ BasicGNN (to_hetero'd).")
        if target is None:
            raise ConveyorError(f"model={self.name} trains typed graphs only (data=mag, data=synthetic_mag, or a "
                                f"HeteroData given to conveyor.fit); for a graph of one node type choose model="
                                f"{', '.join(able(False))} or gat.")
        return load_target(target, f"model={self.name}")


MODEL_REGISTRY: dict = {}


def register_model(name: str, help: str, **entry) -> None:
    MODEL_REGISTRY[name] = ModelEntry(name, help, **entry)


def model_entry(name: str) -> ModelEntry:
    problem = choice(tuple(MODEL_REGISTRY)).problem("model.name", name)
    if problem:
        raise ConveyorError(problem)
    return MODEL_REGISTRY[name]


def able(typed: bool) -> list:
    """The built-in models with a form for a typed graph (or for one of one node type)."""
    return [e.name for e in MODEL_REGISTRY.values() if (e.typed_build if typed else e.build)]


SAMPLED = "conveyor.trainer.models.sampled.sampled_gnn"
HETERO = "conveyor.trainer.models.hetero"
register_model("sage", "GraphSAGE (PyG SAGEConv, mean aggregation); one layer per fanout", build=SAMPLED,
               typed_build=f"{HETERO}.typed_sage", reference="torch_geometric.nn.GraphSAGE")
register_model("gcn", "GCN (PyG GCNConv) on the sampled subgraph, with self-loops", build=SAMPLED, degrees=True,
               reference="torch_geometric.nn.GCN")
register_model("mlp", "baseline that ignores the graph: the same depth over each node's own features", build=SAMPLED,
               reference="torch_geometric.nn.MLP", graph_free=True)
register_model("rgcn", "R-GCN for typed graphs (data=mag, synthetic_mag), as OGB's ogbn-mag example: per relation a "
                       "linear map of the mean of the in-neighbours, plus a root map per node type "
                       "(trainer/models/hetero.py); on a typed graph model=sage is PyG's to_hetero(GraphSAGE)",
               typed_build=f"{HETERO}.rgcn_model")
MODELS = tuple(MODEL_REGISTRY)
