"""The plain PyG reference that `mode=compare` sets beside conveyor.

It trains the way PyG's own ogbn-products example does (`examples/ogbn_products_sage.py`): a
`NeighborLoader` over the training nodes with the run's fanouts and batch size, PyG's stock models
(`GraphSAGE`, `GCN`, `MLP`), Adam, cross-entropy on the seeds. Everything it is given comes from
the same config as conveyor's run. Val/test are evaluated the way conveyor's run evaluates them
(`trainer.inference`), so that both systems are measured with the same ruler: layer-wise over
every in-neighbour, as the example does, through PyG's own `BasicGNN.inference_per_layer` and the
same batching as conveyor's (trainer/loop/layerwise.py); or sampled subgraphs with the run's fanouts, in
batches of `trainer.eval_batch_size`, the same subgraphs every epoch.

The training loader samples in `compare.pyg_workers` worker processes, kept alive across epochs
(`persistent_workers`), as a PyG user sets it up (the example uses `num_workers=12`).
"""
from __future__ import annotations

import gc
import logging
import os
import time
import warnings

import torch
import torch.nn.functional as F
from tqdm import tqdm

from conveyor.compare.settings import CompareSettings
from conveyor.core import ConveyorError
from conveyor.core.targets import load_target
from conveyor.partition import Graph
from conveyor.trainer.loop.layerwise import layerwise_logits, resolve_inference
from conveyor.trainer.model_registry import MODEL_REGISTRY, model_entry
from conveyor.trainer.models.adapter import instantiate_target, target_class
from conveyor.trainer.outputs.metrics import RunRecorder

log = logging.getLogger("conveyor")

PYG_EXAMPLE_WORKERS = 12  # examples/ogbn_products_sage.py: NeighborLoader(..., num_workers=12)


def require_neighbor_sampling() -> None:
    """NeighborLoader samples with pyg-lib or torch_sparse; fail early, with the fix, if neither is here."""
    import torch_geometric.typing as pyg_typing
    if not (pyg_typing.WITH_PYG_LIB or pyg_typing.WITH_TORCH_SPARSE):
        raise ConveyorError("mode=compare trains a PyG reference with NeighborLoader, which needs "
                            "torch_sparse or pyg-lib, and neither is installed. Install them with "
                            "`pip install --no-build-isolation torch_sparse torch_scatter` after torch "
                            "(the extra conveyor[pyg]), or pyg-lib from data.pyg.org for your torch build.")


class ReferenceModel(torch.nn.Module):
    """One of PyG's stock models (`GraphSAGE`, `GCN`, `MLP`), sized like conveyor's `SampledGNN`
    (relu, then dropout, between layers; `model.input_dropout` on the raw features first), or the
    PyG `BasicGNN` that `model._target_` names (`model=gat`), built as conveyor builds it."""

    def __init__(self, model, in_dim: int, out_dim: int, num_layers: int):
        super().__init__()
        entry = model_entry(model.name) if model._target_ is None else None
        self.input_dropout = model.input_dropout
        self.graph_free = entry is not None and entry.graph_free
        if entry is None:
            self.gnn = instantiate_target(model, in_dim, out_dim, num_layers)
            require_reference_model(model, type(self.gnn))
        elif entry.reference is None:
            raise ConveyorError(f"mode=compare has no PyG stock model to train beside model={model.name}; choose "
                                f"one of {', '.join(n for n, e in MODEL_REGISTRY.items() if e.reference)} (e.g. "
                                f"model=sage).")
        else:  # PyG's stock class, sized as conveyor's; an MLP without batch norm, as conveyor's has none
            stock = load_target(entry.reference, f"model={model.name}'s reference")
            sizes = dict(in_channels=in_dim, hidden_channels=model.hidden, out_channels=out_dim, num_layers=num_layers,
                         dropout=model.dropout)
            self.gnn = stock(**sizes, **({"norm": None} if entry.graph_free else {}))

    def forward(self, batch):
        """Logits of the batch's seeds (the first `batch_size` nodes of a NeighborLoader batch).

        With pyg-lib the loader reports how many nodes each hop added, and PyG trims the subgraph
        layer by layer (the message-flow-graph computation of PyG's example); with torch_sparse it
        does not, and every layer runs on the whole sampled subgraph, as in most PyG examples.
        """
        x = batch.x[:batch.batch_size] if self.graph_free else batch.x
        x = F.dropout(x, p=self.input_dropout, training=self.training)
        if self.graph_free:
            return self.gnn(x)
        if getattr(batch, "num_sampled_nodes", None) is not None:
            out = self.gnn(x, batch.edge_index, num_sampled_nodes_per_hop=batch.num_sampled_nodes,
                           num_sampled_edges_per_hop=batch.num_sampled_edges)
        else:
            out = self.gnn(x, batch.edge_index)
        return out[:batch.batch_size]


def require_reference_model(model, cls: type | None = None) -> None:
    """The reference runs a `model._target_` with PyG's own `forward(x, edge_index)` on
    NeighborLoader batches: it must be a PyG `BasicGNN`. `cls`: the class built, else the one named."""
    from torch_geometric.nn.models.basic_gnn import BasicGNN
    if model._target_ is None:
        return
    cls = cls or target_class(model)
    if cls is None or (isinstance(cls, type) and issubclass(cls, BasicGNN)):
        return  # None: the name does not import, and conveyor's own build says so first
    raise ConveyorError(
        f"mode=compare cannot build a PyG reference for model._target_={model._target_}: the "
        f"reference trains PyG's own models on NeighborLoader batches (forward(x, edge_index)), and "
        f"a {cls.__name__} is not one of PyG's BasicGNN models (GraphSAGE, GCN, GAT, GIN, EdgeCNN or "
        f"a subclass), whose layers conveyor runs hop by hop too. Compare a BasicGNN instead (e.g. "
        f"model=gat or model._target_=torch_geometric.nn.GraphSAGE), or train your model alone "
        f"with mode=train.")


def pyg_workers(setting) -> int:
    """`compare.pyg_workers`: a count, or `auto` = min(12, cores - 2, at least 1): PyG's example's
    12 where the machine has the cores; the training process and the rest of the machine keep two."""
    if setting != "auto":
        return int(setting)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return min(PYG_EXAMPLE_WORKERS, max(1, cores - 2))


def reference_inference(settings, model: ReferenceModel) -> str:
    """`trainer.inference` for the reference, resolved as conveyor resolves it for its own model.
    A graph-free MLP reads only the seeds' own features, so there both are the same: sampled."""
    return "sampled" if model.graph_free else resolve_inference(settings.trainer.inference, model.gnn)


def reference_setup(settings, options: CompareSettings, model: ReferenceModel, device: torch.device) -> dict:
    """How the reference runs, for metrics.json and the comparison: model, loader, workers,
    evaluation, device."""
    import torch_geometric.typing as pyg_typing
    workers = pyg_workers(options.pyg_workers)
    return {"model": type(model.gnn).__name__, "parameters": sum(p.numel() for p in model.parameters()),
            "loader": "NeighborLoader", "workers": workers,
            "persistent_workers": workers > 0,
            "sampling": "pyg-lib" if pyg_typing.WITH_PYG_LIB else "torch_sparse",
            # torch's DataLoader gives each worker one thread; the training process keeps its own.
            "worker_threads": 1 if workers else None, "torch_threads": torch.get_num_threads(),
            "evaluation": reference_inference(settings, model), "device": str(device)}


def to_pyg_data(graph: Graph):
    from torch_geometric.data import Data
    return Data(x=graph.x, y=graph.y, edge_index=graph.edge_index(), num_nodes=graph.num_nodes)


def train_reference(settings, options: CompareSettings, graph: Graph, out_dir, device: torch.device) -> dict:
    """Train the reference for `trainer.epochs` with seed `run.seed`; write `metrics.json` and
    TensorBoard scalars into `out_dir` in the same shape as conveyor's trainer; return
    metrics.json's `epochs` and `final` (`final["setup"]`: how it ran), and the trained `model`."""
    require_neighbor_sampling()
    require_reference_model(settings.model)
    trainer = settings.trainer
    seed, epochs, fanouts = settings.run.seed, trainer.epochs, list(settings.sampler.fanouts)
    torch.manual_seed(seed)  # model init, the loader's shuffle, dropout and torch_sparse's sampling
    model = ReferenceModel(settings.model, graph.x.size(1), int(graph.num_classes), len(fanouts)).to(device)
    setup = reference_setup(settings, options, model, device)
    optimizer = torch.optim.Adam(model.parameters(), lr=trainer.lr, weight_decay=trainer.weight_decay)
    data = to_pyg_data(graph)
    with warnings.catch_warnings():  # PyG nags about pyg-lib when it samples with torch_sparse
        warnings.filterwarnings("ignore", message=".*without a 'pyg-lib' installation")
        train_loader, eval_loaders = _loaders(trainer, graph, data, fanouts, setup["workers"])

    recorder = RunRecorder(out_dir, settings.to_dict())
    run_start = time.perf_counter()
    best = {"val_acc": -1.0, "test_acc": None, "epoch": None}
    for epoch in range(1, epochs + 1):
        t0 = time.perf_counter()
        record = {"epoch": epoch, **_train_epoch(model, optimizer, train_loader, device,
                                                  trainer.progress, f"pyg epoch {epoch}/{epochs}")}
        record["epoch_time_s"] = time.perf_counter() - t0
        if epoch % trainer.eval_every == 0 or epoch == epochs:
            record.update(_evaluate_splits(model, eval_loaders, device, seed, setup["evaluation"], graph,
                                           trainer.eval_batch_size))
            if record.get("val_acc", -1.0) > best["val_acc"]:
                best = {"val_acc": record["val_acc"], "test_acc": record.get("test_acc"), "epoch": epoch}
        log.info("pyg epoch %d: loss %.4f train %.4f val %s test %s | %.2fs", epoch, record["loss"],
                 record["train_acc"], _fmt(record.get("val_acc")), _fmt(record.get("test_acc")),
                 record["epoch_time_s"])
        recorder.epoch(record)
    del train_loader, eval_loaders
    gc.collect()  # a loader refers to itself (its collate_fn): collecting it stops its workers now
    final = {**_final(recorder.epochs, best, run_start), "setup": setup}
    recorder.write(final)
    recorder.close()
    return {"epochs": recorder.epochs, "final": final, "model": model}


def _evaluate_splits(model, eval_loaders: dict, device, seed: int, inference: str, graph: Graph,
                     batch_size: int) -> dict:
    """Accuracy per split: layer-wise, or on the same sampled subgraphs every epoch, without
    disturbing the training's random stream."""
    start, figures = time.perf_counter(), {}
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed + 1_000_003)
        for split, loader in eval_loaders.items():
            if inference == "layerwise":
                idx = getattr(graph, f"{split}_idx")
                model.eval()
                logits = layerwise_logits(model.gnn, graph, idx, batch_size, device)
                figures[f"{split}_acc"] = (logits.argmax(1) == graph.y[idx].long()).double().mean().item()
            else:
                figures[f"{split}_acc"] = _evaluate(model, loader, device)
    figures["eval_time_s"] = time.perf_counter() - start
    return figures


def _final(history: list, best: dict, run_start: float) -> dict:
    last, epochs = history[-1], len(history)
    return {"epochs": epochs, "test_acc": last.get("test_acc"), "val_acc": last.get("val_acc"),
            "train_acc": last["train_acc"], "loss": last["loss"], "best_val_acc": best["val_acc"],
            "test_acc_at_best_val": best["test_acc"], "best_epoch": best["epoch"],
            "mean_epoch_time_s": sum(e["epoch_time_s"] for e in history) / epochs,
            "wall_time_s": time.perf_counter() - run_start}


def _loaders(trainer, graph: Graph, data, fanouts, workers: int):
    """Training batches as in PyG's example, from `workers` processes kept across epochs; val/test
    batches as conveyor's trainer evaluates. Their workers start afresh at each evaluation: they
    then take their seeds from the re-seeded training process, so every evaluation samples the
    same subgraphs (persistent workers would carry their random streams over)."""
    from torch_geometric.loader import NeighborLoader
    train_loader = NeighborLoader(data, num_neighbors=fanouts, batch_size=trainer.batch_size,
                                  input_nodes=graph.train_idx, shuffle=True, num_workers=workers,
                                  persistent_workers=workers > 0)
    eval_loaders = {split: NeighborLoader(data, num_neighbors=fanouts, input_nodes=idx, shuffle=False,
                                          batch_size=trainer.eval_batch_size,
                                          num_workers=workers)
                    for split in ("val", "test")
                    if (idx := getattr(graph, f"{split}_idx")) is not None and idx.numel() > 0}
    return train_loader, eval_loaders


def _train_epoch(model, optimizer, loader, device, progress: bool, desc: str) -> dict:
    model.train()
    loss_sum = correct = seen = 0
    for batch in tqdm(loader, desc=desc, disable=None if progress else True, leave=False, dynamic_ncols=True):
        batch = batch.to(device)
        y = batch.y[:batch.batch_size]
        out = model(batch)
        loss = F.cross_entropy(out, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        loss_sum += loss.item() * y.numel()
        correct += int((out.argmax(-1) == y).sum())
        seen += y.numel()
    return {"loss": loss_sum / max(seen, 1), "train_acc": correct / max(seen, 1)}


@torch.no_grad()
def _evaluate(model, loader, device) -> float:
    model.eval()
    correct = seen = 0
    for batch in loader:
        batch = batch.to(device)
        y = batch.y[:batch.batch_size]
        correct += int((model(batch).argmax(-1) == y).sum())
        seen += y.numel()
    return correct / max(seen, 1)


def _fmt(value) -> str:
    return "-" if value is None else f"{value:.4f}"
