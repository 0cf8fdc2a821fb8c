"""The trained model in a form `conveyor.load` rebuilds without running any code a file names.

Each checkpoint holds, beside the trainer's own `model` (the wrapped module's keys), a `module`
record: the library (`torch_geometric` or `conveyor`), the class name, its init arguments as
plain values (numbers, strings, and lists or dicts of them: never a pickled object), and the
module's own `state_dict` (a PyG model's keys as PyG names them; the tensors are the same storage
as `model`'s, saved once). Only a `BasicGNN` of `torch_geometric.nn` (GraphSAGE, GCN, GAT, GIN,
...) and conveyor's own models are rebuilt, by name, from that record; for any other class the
record names it and keeps its weights, and `load` takes an instance to load them into.

A model conveyor puts around another keeps the inner one as a part (`parts`: a record of its
own, with its own weights under its own keys), and its record holds only its own weights:
- `LinkModel` (task=link): its decoder (`decoder`, `width`, `dropout`), the encoder a part;
- `TypedGNN` / `HeteroEdgeIndexGNN` (typed graphs): the schema (node types and counts, edge
  types, the labelled type), each node type's feature width and the learned embeddings of the
  types without features, the typed model (`inner` / `module`) a part;
- `HeteroBasicGNN`: `act_first`, the `to_hetero` module a part; `RGCN`: its metadata and sizes;
- a `to_hetero(...)` of a PyG BasicGNN that conveyor built (`model=sage` on a typed graph, or a
  `model._target_`): `to_hetero`'s metadata and aggr, and the BasicGNN's record as its `source`,
  trusted only when the model built from them has, with the same weights, the same output on a
  small random typed graph; a `to_hetero` module of one's own is a class of one's own.

A BasicGNN's init arguments are read back from the instance (PyG keeps no copy): BasicGNN's own
(channels, depth, dropout, activation, norm, jk) and the first conv's own plain-valued arguments
(GAT's `heads`, SAGE's `aggr`, ...). They are trusted only when a model built from them has the
same keys and shapes and, with the same weights, the same output on a small fixed graph;
otherwise the record keeps no init arguments, as for a class of one's own.
"""
from __future__ import annotations

import warnings
from typing import Dict, Optional

import torch
from torch import nn
from torch_geometric.nn.models.basic_gnn import BasicGNN

from conveyor.partition.hetero import Schema
from conveyor.trainer.models.adapter import unwrapped, wrap_module
from conveyor.trainer.models.basic_args import PLAIN, SOURCE, basic_gnn_args, basic_gnn_library, rebuilds
from conveyor.trainer.models.decoder import LinkModel
from conveyor.trainer.models.hetero import RGCN, HeteroBasicGNN, HeteroEdgeIndexGNN, TypedGNN, probe_graph

TYPED = (TypedGNN, HeteroEdgeIndexGNN)
# The part each of conveyor's wrappers holds: the module given to fit (or built) inside it.
PARTS = {"LinkModel": "encoder", "TypedGNN": "inner", "HeteroBasicGNN": "module", "HeteroEdgeIndexGNN": "module"}


def is_plain(value, depth: int = 0) -> bool:
    """None, a bool, number or string, or a list or dict (of string keys) of such, a few deep."""
    if value is None or isinstance(value, PLAIN):
        return True
    if depth >= 4:
        return False
    if isinstance(value, (list, tuple)):
        return all(is_plain(v, depth + 1) for v in value)
    return isinstance(value, dict) and all(isinstance(k, str) and is_plain(v, depth + 1) for k, v in value.items())


def portable_spec(model: nn.Module) -> dict:
    """The record for `model` (the trainer's, wrapped or not), without its weights."""
    module = unwrapped(model)
    init, parts = None, {}
    if isinstance(module, BasicGNN):
        init = basic_gnn_args(module)
        library = basic_gnn_library(module) if init is not None and rebuilds(module, init) else None
        init = init if library else None
    elif isinstance(module, LinkModel):
        library, init, parts = "conveyor", dict(module.init_args), {"encoder": portable_spec(module.encoder)}
    elif isinstance(module, TYPED):
        library, init = "conveyor", typed_args(module)
        parts = {name: typed_part_spec(part, module) for name, part in part_modules(module).items()}
    elif isinstance(module, RGCN):
        library, init = "conveyor", {"metadata": [module.node_types, [list(e) for e in module.edge_types]],
                                     **module.init_args}
    elif type(module).__name__ == "SampledGNN" and hasattr(module, "init_args"):
        library, init = "conveyor", dict(module.init_args)
    else:
        library = None
    spec = {"library": library, "class": type(module).__name__, "init": init}
    return {**spec, "parts": parts} if parts else spec


def part_modules(module: nn.Module) -> Dict[str, nn.Module]:
    """The modules a conveyor wrapper holds, each recorded as a part of its own (module doc)."""
    if isinstance(module, LinkModel):
        return {"encoder": unwrapped(module.encoder)}
    if isinstance(module, TypedGNN):
        return {"inner": module.inner}
    if isinstance(module, (HeteroBasicGNN, HeteroEdgeIndexGNN)):
        return {"module": module.module}
    return {}


def typed_args(module) -> dict:
    """A typed wrapper's init arguments: its schema, the feature widths, the embeddings' width."""
    schema, embedded = module.schema, (module.embeddings if isinstance(module, TypedGNN) else module.input.embeddings)
    widths = module.widths if isinstance(module, TypedGNN) else module.input.widths
    dims = [e.embedding_dim for e in embedded.values()]
    return {"node_types": list(schema.node_types), "node_counts": list(schema.node_counts),
            "edge_types": [list(e) for e in schema.edge_types], "edge_counts": list(schema.edge_counts),
            "target": schema.target,
            "widths": dict(widths), "embedding_dim": dims[0] if dims else 1}


def typed_part_spec(part: nn.Module, wrapper) -> dict:
    """The record of a typed wrapper's model: a to_hetero module conveyor built is rebuilt from its
    source when that gives the same output (module doc), any other as its own class."""
    if not isinstance(part, HeteroBasicGNN):
        return portable_spec(part)
    module, init = part.module, typed_args(wrapper)
    spec = {"library": None, "class": type(module).__name__, "init": None}
    source = getattr(module, SOURCE, None)
    if source is not None:
        hetero = {"library": "torch_geometric", "class": "to_hetero", "source": source,
                  "init": {"metadata": [init["node_types"], init["edge_types"]], "aggr": "sum"}}
        inputs = {t: init["widths"].get(t, init["embedding_dim"]) for t in init["node_types"]}
        spec = hetero if same_hetero_output(module, hetero, inputs) else spec
    return {"library": "conveyor", "class": "HeteroBasicGNN", "init": {"act_first": part.act_first},
            "parts": {"module": spec}}


def same_hetero_output(module: nn.Module, record: dict, inputs: Dict[str, int]) -> bool:
    """Whether the to_hetero model `record` builds, with `module`'s weights, is `module`."""
    schema = Schema(tuple(inputs), (3,) * len(inputs), tuple(tuple(e) for e in record["init"]["metadata"][1]), ())
    try:
        twin = build_to_hetero({**record, "state": module.state_dict()})
        x, edges = probe_graph(schema, inputs)
        x = {t: v.to(next(module.parameters()).device) for t, v in x.items()}
        edges = {e: v.to(x[e[0]].device) for e, v in edges.items()}
        training = module.training
        with torch.no_grad():
            mine, theirs = module.eval()(x, edges), twin.to(x[schema.node_types[0]].device).eval()(x, edges)
        module.train(training)
        return set(mine) == set(theirs) and all(torch.allclose(mine[t], theirs[t], atol=1e-6) for t in mine)
    except Exception:  # noqa: BLE001 -- a source read back wrongly: the record keeps none
        return False






def with_weights(spec: dict, model: nn.Module) -> dict:
    """The record to save: `spec` and the module's own state_dict (its parts' weights in theirs)."""
    module = unwrapped(model)
    state, parts = module.state_dict(), {}
    for name, part in part_modules(module).items():
        if name in spec.get("parts", {}):
            prefix = prefix_of(module, part)
            state = {k: v for k, v in state.items() if not k.startswith(prefix)}
            parts[name] = with_weights(spec["parts"][name], part)
    return {**spec, "state": state, **({"parts": parts} if parts else {})}


def prefix_of(module: nn.Module, part: nn.Module) -> str:
    """Where `part` sits in `module`'s state_dict keys ('encoder.gnn.', 'inner.')."""
    return next(name for name, m in module.named_modules() if m is part) + "."






def rebuild(record: dict, given: Optional[tuple] = None) -> Optional[nn.Module]:
    """The model a record names, with its weights; None for a class conveyor does not rebuild.
    `given`: (a part's record, a module already holding its weights) to use where that part is."""
    if given is not None and record is given[0]:
        return given[1]
    parts = {}
    for name, part in record.get("parts", {}).items():
        parts[name] = rebuild(part, given)
        if parts[name] is None:
            return None
    module = built(record, parts)
    if module is not None:
        load_own(module, record, parts)
    return module


def built(record: dict, parts: Dict[str, nn.Module]) -> Optional[nn.Module]:
    """The module `record` names, with `parts` in place, before its own weights are loaded."""
    library, name, init = record["library"], record["class"], record.get("init")
    if init is None:
        return None
    if library == "torch_geometric" and name == "to_hetero":
        return build_to_hetero(record)
    if library == "torch_geometric":
        import torch_geometric.nn as pyg
        cls = getattr(pyg, name, None)
        return cls(**init) if isinstance(cls, type) and issubclass(cls, BasicGNN) else None
    if library != "conveyor":
        return None
    if name == "LinkModel":
        return LinkModel(wrap_module(parts["encoder"]), **init)
    if name in ("TypedGNN", "HeteroEdgeIndexGNN"):
        schema = Schema(tuple(init["node_types"]), tuple(init["node_counts"]),
                        tuple(tuple(e) for e in init["edge_types"]), tuple(init["edge_counts"]), init["target"])
        inner = parts["inner" if name == "TypedGNN" else "module"]
        cls = TypedGNN if name == "TypedGNN" else HeteroEdgeIndexGNN
        return cls(inner, schema, init["widths"], init["embedding_dim"])
    if name == "HeteroBasicGNN":
        return HeteroBasicGNN(parts["module"], **init)
    if name == "RGCN":
        return RGCN(**init)
    return conveyor_class(name)(**init) if conveyor_class(name) is not None else None


def conveyor_class(name: str):
    """conveyor's own node models, by name (imported here: sampled.py imports the adapter)."""
    if name == "SampledGNN":
        from conveyor.trainer.models.sampled import SampledGNN
        return SampledGNN
    if name == "GAT":
        from conveyor.trainer.models.gat import GAT
        return GAT
    return None


def build_to_hetero(record: dict) -> Optional[nn.Module]:
    """`to_hetero(source, metadata, aggr)` of the BasicGNN its `source` record names, with its
    weights (a lazy BasicGNN's sizes come from them)."""
    from torch_geometric.nn import to_hetero

    source, init = record["source"], record["init"]
    gnn = built(source, {})
    if gnn is None or not isinstance(gnn, BasicGNN):
        return None
    node_types, edge_types = init["metadata"]
    module = to_hetero(gnn, (list(node_types), [tuple(e) for e in edge_types]), aggr=init["aggr"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PyG's lazy layers say they take their sizes from the weights
        module.load_state_dict(record["state"])
    setattr(module, SOURCE, source)
    return module


def load_own(module: nn.Module, record: dict, parts: Dict[str, nn.Module]) -> None:
    """Load `record`'s own weights into `module`, its parts' (already loaded) kept under their keys."""
    state = dict(record["state"])
    for part in parts.values():
        prefix = prefix_of(module, part)
        state.update({prefix + k: v for k, v in part.state_dict().items()})
    module.load_state_dict(state)
