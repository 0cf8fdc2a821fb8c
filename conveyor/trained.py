"""`conveyor.load(run_dir_or_checkpoint)`: the trained model back from a run, and
`conveyor.predict(model, data)`: its output (or embeddings) for every node, layer by layer.

`load` reads `checkpoints/best.pt` of a run folder (else `last.pt`), or the checkpoint file
named, with `weights_only=True`, and rebuilds the model its `module` record names
(trainer/models/portable.py): a PyG model comes back as that PyG class with PyG's own keys, conveyor's
built-in models as `SampledGNN`, a task=link run as its `LinkModel` (encoder and decoder), a typed
run's R-GCN or to_hetero BasicGNN as its `TypedGNN`. A class of one's own is never imported from a
file's text: pass an instance, `load(path, model=MyGNN(...))` (the module given to fit: a link
run's encoder, a `to_hetero(...)` module), and its weights are loaded into it under its own keys.
`predict` gives a typed model's rows of one node type, a LinkModel's embeddings or pair scores.
"""
from __future__ import annotations

import numbers
import os
import warnings
from dataclasses import replace
from pathlib import Path
from typing import List, Optional

import torch
from torch import Tensor, nn

from conveyor.core import ConveyorError
from conveyor.core.device import resolve_device
from conveyor.core.errors import one_line
from conveyor.core.memory import check_memory
from conveyor.core.regular import check_regular
from conveyor.partition import Graph, TypedGraph
from conveyor.partition.hetero import TypeCut, flat_features, is_typed
from conveyor.trainer.loop.layerwise import can_run_layerwise, layerwise_logits
from conveyor.trainer.models.adapter import EdgeIndexGNN, unwrapped, wrap_module
from conveyor.trainer.models.decoder import LinkModel
from conveyor.trainer.models.hetero import HeteroEdgeIndexGNN, TypedGNN, feature_widths, wrap_typed
from conveyor.trainer.models.portable import PARTS, TYPED, is_plain, load_own, part_modules, rebuild
from conveyor.trainer.outputs.checkpoint import BEST, CHECKPOINT, load_checkpoint

LIBRARIES = (None, "torch_geometric", "conveyor")  # what a module record may name (portable.py)
EDITED = ("it was edited or damaged, or written by another program; conveyor builds nothing from it. Pass "
          "the model built as it was trained instead: conveyor.load(path, model=...)")


def checkpoint_file(path) -> Path:
    """The checkpoint `path` names: a file, or a run folder's best.pt (else last.pt)."""
    if not isinstance(path, (str, os.PathLike)):
        raise ConveyorError(f"conveyor.load() takes a run folder (its run.out_dir) or a checkpoint file as a "
                            f"path, got {repr(path)[:80]} of type {type(path).__name__}.")
    path = Path(path).expanduser()
    if path.is_dir():
        found = [path / name for name in (BEST, CHECKPOINT) if (path / name).exists()]
        if not found:
            raise ConveyorError(f"{path} holds no {BEST} or {CHECKPOINT}: it is not a run folder, or "
                                f"no epoch of its run finished; pass a run's run.out_dir or a checkpoint file.")
        return found[0]
    if not check_regular(path, "checkpoint").exists():
        raise ConveyorError(f"{path} does not exist; pass a run's run.out_dir or a checkpoint file "
                            f"(checkpoints/best.pt or last.pt in it).")
    return path


def load(path, model: Optional[nn.Module] = None, map_location="cpu") -> nn.Module:
    """The trained model of the run folder or checkpoint `path`, in eval mode. `model`: an
    instance to load the weights into (needed for a class of one's own): the module given to
    `fit` (a task=link run's encoder, a typed run's `to_hetero(...)` module), built as it was."""
    check_model(model, "conveyor.load(path, model=...)", optional=True)
    file = checkpoint_file(path)
    state = load_checkpoint(file.parent, map_location, file.name)
    record = state.get("module") if isinstance(state, dict) else None
    if not isinstance(record, dict) or not isinstance(record.get("state"), dict):
        raise ConveyorError(f"{file} holds no model record (it was written by an earlier conveyor, "
                            f"or by another program): its weights are under 'model'; load them into "
                            f"the model that trained them with model.load_state_dict(...).")
    check_record(record, file)
    if model is None:
        loaded = rebuilt(record, file)
        if loaded is None:
            raise ConveyorError(build_it_yourself(record, file))
        return loaded.eval()
    return loaded_into(record, model, file).eval()


def user_chain(record: dict) -> List[dict]:
    """The record and, down its parts, the records of the modules conveyor put around: a link
    run's encoder, a typed wrapper's model, to_hetero's module."""
    chain = [record]
    while PARTS.get(chain[-1]["class"]) in chain[-1].get("parts", {}):
        chain.append(chain[-1]["parts"][PARTS[chain[-1]["class"]]])
    return chain


def build_it_yourself(record: dict, file: Path) -> str:
    """What to pass to load a run whose model (or a part of it) is a class of one's own."""
    chain = user_chain(record)
    own = next((r for r in reversed(chain) if r.get("init") is None), record)  # else: a class it knows no more
    name = own["class"]
    build = (f"to_hetero({name if name != 'GraphModule' else 'YourGNN'}(...), metadata) as you built it"
             if len(chain) > 1 and chain[-2]["class"] == "HeteroBasicGNN" else f"{name}(...)")
    what = ("a model of your own made by torch_geometric's to_hetero (a torch.fx GraphModule)"
            if name == "GraphModule" else f"a {name}")
    what += " (the encoder of a task=link run)" if record["class"] == "LinkModel" else ""
    around = (" conveyor builds the decoder around it and returns its LinkModel (encoder, decoder, "
              "score)." if record["class"] == "LinkModel" else " its weights are loaded into that very "
              "object, under its own keys, and it is returned.")
    return (f"{file} holds the weights of {what}, "
            f"which conveyor does not build again (it never imports code a file names): build one as it "
            f"was trained and pass it, conveyor.load(path, model={build});{around}")


def loaded_into(record: dict, model: nn.Module, file: Path) -> nn.Module:
    """`model` (the record's class, or the module the run's wrappers held) with its weights; a
    link run's LinkModel around it."""
    chain = user_chain(record)
    target = next((r for r in chain if r["class"] == type(model).__name__), chain[-1])
    # A record of an earlier conveyor kept the wrappers' keys: the module's own are wanted.
    weights = target if "parts" in target else {**target, "state": own_keys(target["state"], model)}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # PyG's lazy layers take their sizes from the weights, and say so
            load_tree(model, weights)
        if record["class"] == "LinkModel" and target is not record:
            return rebuild(record, given=(target, model))
    except (RuntimeError, KeyError, ValueError, TypeError, AttributeError, StopIteration) as error:
        raise ConveyorError(f"the weights in {file} (a {target['class']}) do not fit the {type(model).__name__} "
                            f"given: {one_line(str(error))[:400]}; build it with the arguments it "
                            f"was trained with.") from None
    return model


WRAPPER_PREFIXES = ("gnn.", "module.", "inner.", "inner.module.", "encoder.", "encoder.gnn.", "encoder.module.")


def own_keys(state: dict, model: nn.Module) -> dict:
    """`state` under `model`'s own keys: as it is, or without the prefix conveyor's wrappers put
    before them (a record written before the wrappers kept their parts apart) where that fits."""
    wanted = model.state_dict().keys()
    if state.keys() == wanted:
        return state
    for prefix in WRAPPER_PREFIXES:
        stripped = {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
        if stripped.keys() == wanted:
            return stripped
    return state


def load_tree(module: nn.Module, record: dict) -> None:
    """Load `record`'s weights into `module`, its parts' into the modules it holds there."""
    held, parts = part_modules(module), {}
    for name, part_record in record.get("parts", {}).items():
        if name not in held:
            raise KeyError(f"it holds no {name} (the run's {record['class']} does)")
        load_tree(held[name], part_record)
        parts[name] = held[name]
    load_own(module, record, parts)


def rebuilt(record: dict, file: Path) -> Optional[nn.Module]:
    """The model `record` names (None: a class conveyor does not build), once its arguments and
    weights were checked on the meta device: a record that was edited (a size as text, arguments
    that are no dict, a keyword the class lacks, a weight of another shape, a hidden width of
    10**10) is one paragraph, and nothing is allocated before its size is known to fit."""
    try:
        with torch.device("meta"), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # loading real weights into meta ones copies nothing, and says so
            shape = rebuild(record)
    except (ConveyorError, TypeError, ValueError, RuntimeError, KeyError, AttributeError, AssertionError,
            IndexError, ZeroDivisionError, OverflowError, StopIteration) as error:
        raise ConveyorError(f"the model record in {file} does not build its {record.get('class')} "
                            f"({one_line(str(error))[:300]}): {EDITED}.") from None
    if shape is None:
        return None
    size = sum(t.numel() * t.element_size() for t in (*shape.parameters(), *shape.buffers()))
    check_memory(f"the {record.get('class')} of {file}", {"for its weights": size}, "cpu",
                 f"The record's sizes ({str(record.get('init'))[:200]}) may have been edited: {EDITED}.")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return rebuild(record)


def check_record(record: dict, file: Path) -> None:
    """A module record (and each of its parts) of the fields and types portable.py writes, and
    sizes its weights can hold (check_sizes), before anything is built."""
    problems = record_problems(record, "")
    if problems:
        raise ConveyorError(f"the model record in {file} is not one conveyor writes ({'; '.join(problems)}): "
                            f"{EDITED}.")
    check_sizes(record, file)


def record_problems(record, where: str, depth: int = 0) -> List[str]:
    """What in `record` (at `where`: '' the top, 'parts.encoder.' a part) is not as portable.py
    writes it: a known library, a class name, init of plain values, weights by name, the parts
    its class holds (records too), a to_hetero's source."""
    if not isinstance(record, dict) or depth > 4:
        return [f"{where.rstrip('.') or 'the record'} is {repr(record)[:80]}, not a record"]
    library, name, init = record.get("library", ()), record.get("class"), record.get("init", ())
    problems = []
    if library not in LIBRARIES:
        problems.append(f"{where}library is {library!r}, not one of {', '.join(map(str, LIBRARIES))}"
                        if library != () else f"{where or 'it '}names no library")
    if not isinstance(name, str):
        problems.append(f"{where}class is {repr(name)[:80]}, not a name")
    if init == ():
        problems.append(f"{where or 'it '}has no init")
    elif init is not None and not (isinstance(init, dict) and is_plain(init)):
        problems.append(f"{where}init is {repr(init)[:120]}, not a dict of plain values by name")
    state = record.get("state", {})
    if not isinstance(state, dict) or not all(isinstance(k, str) and isinstance(v, Tensor) for k, v in state.items()):
        problems.append(f"{where}state is not a dict of tensors by name")
    problems += parts_problems(record, where, depth)
    return problems


def parts_problems(record: dict, where: str, depth: int) -> List[str]:
    """A record's parts: exactly the one its class holds (PARTS), each a record; a to_hetero's source."""
    parts, name = record.get("parts", {}), record.get("class")
    wanted = {PARTS[name]} if record.get("library") == "conveyor" and name in PARTS else set()
    if not isinstance(parts, dict) or set(parts) != wanted:
        shown = sorted(parts) if isinstance(parts, dict) else repr(parts)[:80]
        return [f"{where}parts are {shown}, where a {name} holds {sorted(wanted) or 'none'}"]
    problems = [p for key, part in parts.items() for p in record_problems(part, f"{where}parts.{key}.", depth + 1)]
    if name == "to_hetero" and record.get("library") == "torch_geometric":
        source = record.get("source")
        problems += record_problems({**source, "state": {}} if isinstance(source, dict) else source,
                                    f"{where}source.", depth + 1)
    return problems


SIZE_KEYS = ("in_channels", "hidden_channels", "num_layers", "out_channels", "heads", "out_heads",
             "in_dim", "hidden", "out_dim", "width", "widths", "embedding_dim")  # the models' sizes
LAZY = -1  # a lazy input width (to_hetero's BasicGNN: in_channels -1, or [-1, -1])


def check_sizes(record: dict, file: Path) -> None:
    """Sizes in the records' init arguments must be whole numbers >= 1 (out_channels may be None,
    a lazy in_channels -1), none larger than the values the weights hold, nor more layers (or
    node and edge types) than there are weights: so even the model built on the meta device (no
    memory, but Python objects per layer and type) stays small."""
    records = all_records(record)
    weights = [t for r in records for t in r.get("state", {}).values()]
    values = sum(t.numel() for t in weights)
    bad, big = [], []
    for init in (r["init"] for r in records if isinstance(r.get("init"), dict)):
        for key, value in init.items():
            for size in sizes_in(value) if key in SIZE_KEYS else ():
                if not (isinstance(size, int) and not isinstance(size, bool)
                        and (size >= 1 or (key == "in_channels" and size == LAZY))):
                    bad.append(f"{key}={value!r}"[:80])
                elif size > (len(weights) if key == "num_layers" else values):
                    big.append(f"{key}={size:,}")
        bad += bad_counts(init)
        big += type_counts_too_big(init, len(weights), values)
    if bad:
        raise ConveyorError(f"the model record in {file} gives {', '.join(bad)}, where a size is a whole "
                            f"number >= 1: {EDITED}.")
    if big:
        raise ConveyorError(f"the model record in {file} gives {', '.join(big)}, but its weights are "
                            f"{len(weights)} tensors of {values:,} values in all, which no such model has: {EDITED}.")


def all_records(record: dict) -> List[dict]:
    """The record, its parts' records and a to_hetero's source, all of them."""
    found = [record, *([record["source"]] if isinstance(record.get("source"), dict) else [])]
    return found + [r for part in record.get("parts", {}).values() for r in all_records(part)]


def sizes_in(value) -> list:
    """The numbers a size field holds: itself, or those of its list or dict (per-type widths)."""
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [v for item in value for v in sizes_in(item)]
    return [v for item in value.values() for v in sizes_in(item)] if isinstance(value, dict) else [value]


def bad_counts(init: dict) -> List[str]:
    """A typed record's node and edge counts, where given: whole numbers >= 0."""
    return [f"{key}={str(init[key])[:60]}" for key in ("node_counts", "edge_counts") if key in init and not (
        isinstance(init[key], list) and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0
                                            for n in init[key]))]


def type_counts_too_big(init: dict, tensors: int, values: int) -> List[str]:
    """A typed record's node and edge types (each has weights of its own, or its features) and the
    embedding rows of its types without features, against the weights."""
    node_types, edge_types = init.get("node_types", []), init.get("edge_types", [])
    if not isinstance(node_types, list) or not isinstance(edge_types, list):
        return []  # not a typed record: building it says what is wrong
    big = [f"{len(edge_types):,} edge types"] if len(edge_types) > tensors else []
    big += [f"{len(node_types):,} node types"] if len(node_types) > 2 * len(edge_types) + tensors else []
    counts, widths = init.get("node_counts", []), init.get("widths", {})
    if not bad_counts(init) and isinstance(widths, dict):
        rows = sum(n for t, n in zip(node_types, counts) if t not in widths)
        big += [f"{rows:,} embedded nodes"] if rows > values else []
    return big


@torch.no_grad()
def predict(model: nn.Module, data, nodes: Optional[Tensor] = None, *, layers: Optional[int] = None,
            batch_size: int = 1024, device="cpu", node_type: Optional[str] = None,
            pairs: Optional[Tensor] = None) -> Tensor:
    """The model's output for `nodes` (default every node; node ids, or a boolean mask over the
    nodes such as PyG's `data.test_mask`), one row each, on the host: layer by layer over every
    in-neighbour (exact: no sampling), each layer in batches of `batch_size` targets on `device`.
    `layers`: run only the first ones, giving each node's embedding after them. A model that cannot
    run layer by layer (a `forward(x, edge_index)` module, a BasicGNN with `jk`) runs once on the
    whole graph. A typed model on a HeteroData: the rows of `node_type` (default the type it was
    trained to label), `nodes` its own ids. A task=link run's LinkModel: the nodes' embeddings (its
    encoder's output), or with `pairs` ([2, P] node ids) each pair's score (a logit). Every
    argument is checked first, each refusal one paragraph."""
    check_model(model, "predict(model, data)")
    if isinstance(model, LinkModel) or pairs is not None:
        return link_predict(model, data, nodes, pairs, layers=layers, batch_size=batch_size, device=device)
    if isinstance(unwrapped(model), TYPED) or type(data).__name__ == "HeteroData" or is_typed(data):
        return typed_predict(model, data, nodes, node_type, layers=layers, batch_size=batch_size, device=device)
    if node_type is not None:
        raise ConveyorError(f"predict(node_type={node_type!r}) is for a typed model on a HeteroData; this "
                            f"graph has one node type: leave node_type out.")
    return node_predict(model, data, nodes, layers=layers, batch_size=batch_size, device=device)


def node_predict(model: nn.Module, data, nodes, *, layers, batch_size, device) -> Tensor:
    """predict() on a graph of one node type (its doc)."""
    graph = graph_of(data)
    ids = node_ids(nodes, graph.num_nodes)
    if ids.numel() == 0:  # no rows, of the model's own width (found on one node)
        return node_predict(model, graph, torch.zeros(1, dtype=torch.long), layers=layers, batch_size=batch_size,
                            device=device)[:0]
    check_count(batch_size, "batch_size")
    if layers is not None:
        check_count(layers, "layers")
    device = device_of(device)
    check_width(model, graph)
    wrapped = wrap_module(model)
    try:
        if can_run_layerwise(wrapped):
            return layerwise_logits(wrapped.to(device), graph, ids, batch_size, device,
                                    num_layers=checked_layers(layers, wrapped.num_layers))
        if layers is not None or not isinstance(wrapped, EdgeIndexGNN):
            raise ConveyorError(f"predict() runs a {type(model).__name__} only whole: layers= needs "
                                f"num_layers and inference_per_layer(layer, x, edge_index, batch_size) "
                                f"(PyG's BasicGNN names; docs/design.md §5).")
        model = model.to(device).eval()
        return model(graph.x.to(device).float(), graph.edge_index().to(device))[ids].float().cpu()
    except RuntimeError as error:  # the model's own shapes against the graph's (a module of one's own)
        raise ConveyorError(f"predict() could not run the {type(model).__name__} on this graph "
                            f"({graph.num_nodes} nodes, x of width {graph.x.size(1)}): {one_line(str(error))[:300]}; "
                            f"give the model the graph it was built for.") from None


def checked_layers(layers: Optional[int], depth: int) -> Optional[int]:
    if layers is not None and not 1 <= layers <= depth:
        raise ConveyorError(f"predict(layers={layers}): the model has {depth} layers; pass 1..{depth}.")
    return layers


def link_predict(model: nn.Module, data, nodes, pairs, **options) -> Tensor:
    """A LinkModel's embeddings of `nodes` (its encoder's output), or the scores of `pairs`."""
    if not isinstance(model, LinkModel):
        raise ConveyorError(f"predict(pairs=...) scores node pairs with a task=link run's model (what "
                            f"conveyor.load returns for one: a LinkModel); a {type(model).__name__} gives "
                            f"each node's output: leave pairs out.")
    if pairs is None:
        return predict(model.encoder, data, nodes, **options)
    if nodes is not None or options["layers"] is not None:
        raise ConveyorError("predict(pairs=...) scores the pairs with the whole encoder: leave nodes= and "
                            "layers= out (without pairs=, predict gives those nodes' embeddings).")
    ends = pair_ids(pairs)
    unique, inverse = ends.unique(return_inverse=True)
    z = predict(model.encoder, data, unique, **options)
    decoder = next(model.decoder.parameters(), None) if model.decoder is not None else None
    z = z if decoder is None else z.to(decoder.device)
    return model.score(z, inverse.view(2, -1)).float().cpu()


def pair_ids(pairs) -> Tensor:
    """`pairs` as a [2, P] int64 tensor of node ids (their range: node_ids, on the graph)."""
    try:
        ends = pairs if isinstance(pairs, Tensor) else torch.as_tensor(pairs)
    except (TypeError, ValueError, RuntimeError):
        ends = None
    if ends is None or ends.dim() != 2 or ends.size(0) != 2 or ends.dtype.is_floating_point or ends.dtype in (
            torch.bool, torch.uint8) or ends.dtype.is_complex:
        shown = f"{ends.dtype} of shape {tuple(ends.shape)}" if isinstance(ends, Tensor) else repr(pairs)[:80]
        raise ConveyorError(f"predict(pairs=...) takes node pairs as PyG's edge_label_index: integer node ids of "
                            f"shape [2, P] (sources, then targets), got {shown}.")
    return ends.long().cpu()


def typed_predict(model: nn.Module, data, nodes, node_type, *, layers, batch_size, device) -> Tensor:
    """predict() of a typed model on a HeteroData (or a TypedGraph): `node_type`'s rows."""
    graph = typed_graph_of(data)
    wrapped = typed_wrapper(model, graph)
    node_type = typed_target(node_type, wrapped.schema, data)
    t = graph.schema.node_type(node_type)
    ids = node_ids(nodes, graph.schema.node_counts[t]) + graph.schema.offsets[t]
    check_count(batch_size, "batch_size")
    if layers is not None:
        check_count(layers, "layers")
    device = device_of(device)
    try:
        if can_run_layerwise(wrapped):
            return layerwise_logits(wrapped.to(device), graph, ids, batch_size, device,
                                    num_layers=checked_layers(layers, wrapped.num_layers))
        if layers is not None:
            raise ConveyorError(f"predict() runs a {type(model).__name__} only whole, on the whole graph: leave "
                                f"layers= out (a to_hetero'd BasicGNN or R-GCN runs layer by layer).")
        out = whole_typed_graph(wrapped.to(device), graph, device)[node_type]
        return out[ids - graph.schema.offsets[t]].float().cpu()
    except RuntimeError as error:
        raise ConveyorError(f"predict() could not run the {type(model).__name__} on this typed graph "
                            f"({graph!r}): {one_line(str(error))[:300]}; give the model the graph it was "
                            f"built for.") from None


def typed_graph_of(data) -> TypedGraph:
    """A HeteroData (or conveyor's TypedGraph) as the typed graph predict runs on."""
    if is_typed(data):
        return data
    if type(data).__name__ != "HeteroData":
        raise ConveyorError(f"a typed model predicts on a PyG HeteroData (or conveyor's TypedGraph), got "
                            f"{repr(data)[:80]} of type {type(data).__name__}; give it the graph it was trained on.")
    from conveyor.loader.hetero import hetero_graph_and_layout

    graph, _ = hetero_graph_and_layout(data)
    graph.typed = {k: v.float() if k.startswith("x.") else v for k, v in graph.typed.items()}  # as fit trains
    return graph


def typed_wrapper(model: nn.Module, graph: TypedGraph) -> nn.Module:
    """The model with the trainer's contract on `graph`: conveyor's typed wrapper (load's, with
    the run's schema and embeddings) re-laid on this graph, or a module of one's own wrapped."""
    module, schema = unwrapped(model), graph.schema
    if not isinstance(module, TYPED):
        missing = [t for i, t in enumerate(schema.node_types) if i not in graph.features]
        if missing:
            raise ConveyorError(f"node types {missing} of the graph have no features (x): a module of your own "
                                f"takes x for every node type (the run's learned embeddings of such types are "
                                f"kept only by the model conveyor.load(path) rebuilds); give them x.")
        return wrap_typed(module, graph)
    check_same_types(module, graph)
    if tuple(module.schema.node_counts) == tuple(schema.node_counts):
        return module
    if isinstance(module, TypedGNN) and not len(module.embeddings):  # the same model on another graph's nodes
        return TypedGNN(module.inner, replace(schema, target=module.schema.target), module.widths)
    raise ConveyorError(f"the model learned an embedding per node of its types without features, for "
                        f"{dict(zip(module.schema.node_types, module.schema.node_counts))} nodes; the graph has "
                        f"{dict(zip(schema.node_types, schema.node_counts))}: give it the graph it was trained on.")


def check_same_types(module, graph: TypedGraph) -> None:
    """conveyor's typed wrapper against the graph: the same node and edge types, in order, and widths."""
    mine, theirs = module.schema, graph.schema
    widths = module.widths if isinstance(module, TypedGNN) else module.input.widths
    if (mine.node_types, mine.edge_types) != (theirs.node_types, theirs.edge_types):
        raise ConveyorError(f"the model was trained on node types {list(mine.node_types)} and edge types "
                            f"{list(mine.edge_types)}, but the graph has {list(theirs.node_types)} and "
                            f"{list(theirs.edge_types)}: give it a HeteroData of the same types, in the same order.")
    if widths != feature_widths(graph):
        raise ConveyorError(f"the model takes features of widths {widths} by node type, but the graph's are "
                            f"{feature_widths(graph)}; give it the graph it was trained on, with the same features.")


def typed_target(node_type: Optional[str], schema, data) -> str:
    """The node type predict gives rows of: the one named, else the one the model was trained to
    label, else the HeteroData's one type with y."""
    if node_type is None:
        labelled = [t for t, s in data.node_items() if "y" in s] if hasattr(data, "node_items") else []
        node_type = schema.target or (labelled[0] if len(labelled) == 1 else None)
    if node_type is None or node_type not in schema.node_types:
        raise ConveyorError(f"predict(node_type={node_type!r}): name the node type to predict, one of "
                            f"{list(schema.node_types)}.")
    return node_type


def whole_typed_graph(wrapped: HeteroEdgeIndexGNN, graph: TypedGraph, device) -> dict:
    """A `forward(x_dict, edge_index_dict)` module run once on the whole typed graph."""
    every = torch.arange(graph.num_nodes)
    cut = TypeCut(graph.schema, every)
    x_dict = wrapped.input.typed_input(flat_features(graph, every).to(device), cut)
    edges = {e: edges.to(device) for e, edges in zip(graph.schema.edge_types, graph.relation_edges())}
    return wrapped.eval().module({t: x.float() for t, x in x_dict.items()}, edges)


def check_model(model, call: str, optional: bool = False) -> None:
    if (optional and model is None) or isinstance(model, nn.Module):
        return
    what = (f"the class {model.__name__}: pass an instance, {model.__name__}(...)"
            if isinstance(model, type) else f"{repr(model)[:80]} of type {type(model).__name__}")
    raise ConveyorError(f"{call} takes a torch.nn.Module instance (e.g. what conveyor.load returns), got {what}.")


def graph_of(data) -> Graph:
    if not isinstance(data, Graph) and not hasattr(data, "edge_index"):
        raise ConveyorError(f"predict(model, data) takes a conveyor.Graph or a PyG Data as data, got "
                            f"{repr(data)[:80]} of type {type(data).__name__}.")
    graph = data if isinstance(data, Graph) else Graph.from_data(data)
    if graph.x is None:
        raise ConveyorError("predict() needs node features: the graph has no x.")
    if graph.num_nodes == 0:
        raise ConveyorError("predict() got a graph without nodes; give it the graph to predict on.")
    return graph


def node_ids(nodes, num_nodes: int) -> Tensor:
    """`nodes` as int64 node ids: every node (None), a boolean mask over the nodes, or ids in range."""
    if nodes is None:
        return torch.arange(num_nodes)
    fix = (f"pass node ids (integers in 0..{num_nodes - 1}) or a boolean mask of {num_nodes} entries "
           f"(PyG's data.test_mask)")
    try:
        ids = nodes if isinstance(nodes, Tensor) else torch.as_tensor(nodes)
    except (TypeError, ValueError, RuntimeError):
        raise ConveyorError(f"predict(nodes=...) got {repr(nodes)[:80]}, which torch cannot read as a tensor; "
                            f"{fix}.") from None
    if ids.dtype == torch.bool:
        if ids.shape != (num_nodes,):
            raise ConveyorError(f"predict(nodes=...) got a boolean mask of shape {tuple(ids.shape)}, but the "
                                f"graph has {num_nodes} nodes; {fix}.")
        return ids.nonzero().view(-1).cpu()
    if ids.dtype.is_floating_point or ids.dtype.is_complex or ids.dtype == torch.uint8 or ids.dim() > 1:
        why = ("a uint8 tensor could be ids or an old-style mask" if ids.dtype == torch.uint8 else
               f"a tensor of dtype {ids.dtype} and shape {tuple(ids.shape)} is neither")
        raise ConveyorError(f"predict(nodes=...): {why}; {fix} (mask.bool(), or ids.long() if whole numbers).")
    ids = ids.reshape(-1).long().cpu()
    outside = ids[(ids < 0) | (ids >= num_nodes)]
    if outside.numel():
        raise ConveyorError(f"predict(nodes=...) holds node id {int(outside[0])}, but the graph has "
                            f"{num_nodes} nodes (ids 0..{num_nodes - 1}); {fix}.")
    return ids


def check_count(value, name: str) -> None:
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < 1:
        raise ConveyorError(f"predict({name}={value!r}): {name} is a whole number >= 1.")


def device_of(device) -> torch.device:
    try:
        return resolve_device(device)
    except ConveyorError as error:
        raise ConveyorError(f"predict(device={device!r}): {str(error).replace('run.device', 'device')}") from None


def check_width(model: nn.Module, graph: Graph) -> None:
    """The model's input width against the graph's features, where the model says it (a BasicGNN's
    in_channels, conveyor's own in_dim); any other module shows it when it runs."""
    module = unwrapped(model)
    args = getattr(module, "init_args", None)
    width = args.get("in_dim") if isinstance(args, dict) else getattr(module, "in_channels", None)
    if isinstance(width, int) and width > 0 and width != graph.x.size(1):
        raise ConveyorError(f"predict(): the {type(module).__name__} takes {width} features a node, but the "
                            f"graph's x has {graph.x.size(1)} (shape {tuple(graph.x.shape)}); give it the graph "
                            f"it was trained on, with the same features.")
