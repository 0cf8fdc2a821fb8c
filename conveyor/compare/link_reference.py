"""The plain PyG reference of `mode=compare task=link`: link prediction as a PyG user writes it.

The same split as conveyor's run (trainer/link_split.py: PyG's RandomLinkSplit, drawn from the
same seed), PyG's `LinkNeighborLoader` over the training edges' graph with the run's fanouts,
batch size and `task.neg_ratio` binary negatives, sampling in `compare.pyg_workers` persistent
worker processes; PyG's stock model (reference.py's `ReferenceModel`, `model.hidden` wide out) as
the encoder over the whole sampled subgraph, the run's decoder (dot, or the same MLP), Adam, binary
cross-entropy on the loader's `edge_label`. Evaluation is conveyor's own (the same ruler for both):
exact layer-wise embeddings of the validation links on training's graph and of the test links on
the training and validation edges' graph, ROC-AUC and Hits@K (trainer/loop/link.py).
"""
from __future__ import annotations

import gc
import logging
import time
import warnings

import torch
import torch.nn.functional as F
from tqdm import tqdm

from conveyor.compare.reference import (
    ReferenceModel,
    reference_setup,
    require_neighbor_sampling,
    require_reference_model,
)
from conveyor.compare.settings import CompareSettings
from conveyor.core import ConveyorError
from conveyor.partition import Graph
from conveyor.trainer.link_split import LinkSplit, split_links
from conveyor.trainer.loop.link import link_figures, link_scores
from conveyor.trainer.models.decoder import LinkModel
from conveyor.trainer.outputs.metrics import RunRecorder

log = logging.getLogger("conveyor")


def train_link_reference(settings, options: CompareSettings, graph: Graph, out_dir, device: torch.device) -> dict:
    """As reference.train_reference, for task=link: metrics.json's `epochs` and `final` (with
    `setup`) in the shape of conveyor's link run, and the trained `model`."""
    require_neighbor_sampling()
    require_reference_model(settings.model)
    trainer, task, seed = settings.trainer, settings.task, settings.run.seed
    split = split_links(graph, task.val_ratio, task.test_ratio, seed)
    torch.manual_seed(seed)  # model init, the loader's shuffle and negatives, dropout
    encoder = ReferenceModel(settings.model, graph.x.size(1), settings.model.hidden, len(settings.sampler.fanouts))
    if encoder.graph_free:
        raise ConveyorError("mode=compare task=link compares GNN encoders evaluated layer by layer; PyG's MLP "
                            "has no layer-wise inference: use model=sage, gcn or gat.")
    model = LinkModel(encoder, task.decoder, settings.model.hidden, settings.model.dropout).to(device)
    setup = {**reference_setup(settings, options, encoder, device), "loader": "LinkNeighborLoader",
             "evaluation": "layerwise"}
    optimizer = torch.optim.Adam(model.parameters(), lr=trainer.lr, weight_decay=trainer.weight_decay)
    loader = link_loader(settings, split, setup["workers"])
    recorder, start, best = RunRecorder(out_dir, settings.to_dict()), time.perf_counter(), (None, None, None)
    for epoch in range(1, trainer.epochs + 1):
        t0 = time.perf_counter()
        record = {"epoch": epoch, **train_link_epoch(model, optimizer, loader, device, trainer.progress,
                                                     f"pyg epoch {epoch}/{trainer.epochs}")}
        record["epoch_time_s"] = time.perf_counter() - t0
        if epoch % trainer.eval_every == 0 or epoch == trainer.epochs:
            record.update(evaluate_links(model, split, settings, device))
            if best[0] is None or record["val_auc"] > best[0]:
                best = (record["val_auc"], record["test_auc"], epoch)
        log.info("pyg epoch %d: loss %.4f train %.4f val %s test %s (auc) | %.2fs", epoch, record["loss"],
                 record["train_acc"], _fmt(record.get("val_auc")), _fmt(record.get("test_auc")),
                 record["epoch_time_s"])
        recorder.epoch(record)
    del loader
    gc.collect()  # a loader refers to itself: collecting it stops its workers now
    final = {**link_final(recorder.epochs, best, start), "setup": setup}
    recorder.write(final)
    recorder.close()
    return {"epochs": recorder.epochs, "final": final, "model": model}


def link_loader(settings, split: LinkSplit, workers: int):
    """PyG's LinkNeighborLoader over the training edges, as its link-prediction examples set it up."""
    from torch_geometric.data import Data
    from torch_geometric.loader import LinkNeighborLoader

    train = split.train_graph
    data = Data(x=train.x, edge_index=train.edge_index(), num_nodes=train.num_nodes)
    with warnings.catch_warnings():  # PyG nags about pyg-lib when it samples with torch_sparse
        warnings.filterwarnings("ignore", message=".*without a 'pyg-lib' installation")
        return LinkNeighborLoader(data, num_neighbors=list(settings.sampler.fanouts),
                                  edge_label_index=split.train_links, neg_sampling_ratio=settings.task.neg_ratio,
                                  batch_size=settings.trainer.batch_size, shuffle=True, num_workers=workers,
                                  persistent_workers=workers > 0)


def train_link_epoch(model: LinkModel, optimizer, loader, device, progress: bool, desc: str) -> dict:
    """One pass: the encoder over each batch's whole subgraph, the decoder on its links, BCE."""
    model.train()
    reference = model.encoder
    loss_sum = correct = seen = 0.0
    for batch in tqdm(loader, desc=desc, disable=None if progress else True, leave=False, dynamic_ncols=True):
        batch = batch.to(device)
        x = F.dropout(batch.x, p=reference.input_dropout, training=True)
        z = reference.gnn(x) if reference.graph_free else reference.gnn(x, batch.edge_index)
        out = model.score(z, batch.edge_label_index)
        loss = F.binary_cross_entropy_with_logits(out, batch.edge_label)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        loss_sum += loss.item() * out.numel()
        correct += int(((out > 0) == (batch.edge_label > 0.5)).sum())
        seen += out.numel()
    return {"loss": loss_sum / max(seen, 1), "train_acc": correct / max(seen, 1)}


def evaluate_links(model: LinkModel, split: LinkSplit, settings, device) -> dict:
    """Validation's and test's figures, computed as conveyor's run computes them."""
    start, figures, k = time.perf_counter(), {}, settings.task.hits_k
    evaluated = LinkModel(model.encoder.gnn, settings.task.decoder, settings.model.hidden)
    evaluated.decoder = model.decoder  # the trained one (None for dot)
    for name, graph, links, labels in (("val", split.train_graph, split.val_links, split.val_labels),
                                       ("test", split.test_graph, split.test_links, split.test_labels)):
        scores = link_scores(evaluated, graph, links, settings.trainer.eval_batch_size, device)
        figures.update({f"{name}_{key}": value for key, value in link_figures(scores, labels, k).items()})
    figures["eval_time_s"] = time.perf_counter() - start
    return figures


def link_final(history: list, best: tuple, run_start: float) -> dict:
    last, epochs = history[-1], len(history)
    others = {key: value for key, value in last.items() if key.startswith(("val_", "test_"))}
    return {"epochs": epochs, **others, "train_acc": last["train_acc"], "loss": last["loss"],
            "best_val_auc": best[0], "test_auc_at_best_val": best[1], "best_epoch": best[2],
            "mean_epoch_time_s": sum(e["epoch_time_s"] for e in history) / epochs,
            "wall_time_s": time.perf_counter() - run_start}


def _fmt(value) -> str:
    return "-" if value is None else f"{value:.4f}"
