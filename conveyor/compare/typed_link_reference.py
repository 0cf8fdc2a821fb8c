"""The plain PyG reference of `mode=compare task=link` on a typed graph (data=synthetic_movielens,
a HeteroData): typed link prediction as PyG's hetero examples write it.

The same split as conveyor's run (trainer/typed_link_split.py, from the same seed), PyG's
`LinkNeighborLoader` on the training graph's `HeteroData` with `edge_label_index=(edge_type,
links)`, the run's fanouts, batch size and `task.neg_ratio` binary negatives, in
`compare.pyg_workers` persistent worker processes; the same model, built from the same seed
(trainer/models/hetero.py: `to_hetero(GraphSAGE)` or R-GCN, a learned embedding per node of a
featureless type, looked up by the batch's `n_id`), run by PyG's own `forward(x_dict,
edge_index_dict)` over each batch's whole subgraph, the run's decoder on the batch's
`edge_label_index`, Adam, binary cross-entropy. A temporal split's batches are drawn by time as
conveyor's (`edge_label_time`, `time_attr`, `temporal_strategy`: PyG needs pyg-lib for it; without
it `mode=compare task.split=temporal` is refused before any work, typed_link_split.py).
Evaluation is conveyor's own (LinkTask.figures: exact layer-wise embeddings, ROC-AUC, Hits@K,
Recall@K): the same ruler for both.
"""
from __future__ import annotations

import gc
import time
import warnings

import torch
import torch.nn.functional as F
from tqdm import tqdm

from conveyor.compare.link_reference import link_final
from conveyor.compare.reference import pyg_workers, require_neighbor_sampling
from conveyor.compare.settings import CompareSettings
from conveyor.partition.hetero import TypedGraph
from conveyor.trainer.link_task import LinkTask
from conveyor.trainer.models.decoder import LinkModel
from conveyor.trainer.models.hetero import typed_model
from conveyor.trainer.outputs.metrics import RunRecorder
from conveyor.trainer.typed_link_split import TIME


def train_typed_link_reference(settings, options: CompareSettings, graph: TypedGraph, out_dir, device) -> dict:
    """As link_reference.train_link_reference, on a typed graph."""
    require_neighbor_sampling()
    trainer, seed = settings.trainer, settings.run.seed
    task = LinkTask(settings, graph)
    torch.manual_seed(seed)  # the model's init as conveyor's run draws it (trainer/run.py: run_model)
    encoder = typed_model(settings.model, task.graph, len(settings.sampler.fanouts), settings.model.hidden)
    model = task.model(encoder).to(device)
    workers = pyg_workers(options.pyg_workers)
    setup = {"model": f"{type(encoder.inner).__name__} (PyG's forward(x_dict, edge_index_dict))",
             "parameters": sum(p.numel() for p in model.parameters()), "loader": "LinkNeighborLoader (HeteroData)",
             "workers": workers, "persistent_workers": workers > 0, "sampling": sampling_library(),
             "evaluation": "layerwise", "device": str(device)}
    optimizer = torch.optim.Adam(model.parameters(), lr=trainer.lr, weight_decay=trainer.weight_decay)
    loader = typed_link_loader(settings, task, workers)
    recorder, start, best = RunRecorder(out_dir, settings.to_dict()), time.perf_counter(), (None, None, None)
    for epoch in range(1, trainer.epochs + 1):
        t0 = time.perf_counter()
        record = {"epoch": epoch, **train_epoch(model, task, optimizer, loader, device, trainer.progress,
                                                f"pyg epoch {epoch}/{trainer.epochs}")}
        record["epoch_time_s"] = time.perf_counter() - t0
        if epoch % trainer.eval_every == 0 or epoch == trainer.epochs:
            t1 = time.perf_counter()
            record.update({**task.figures(model, device), "eval_time_s": time.perf_counter() - t1})
            if best[0] is None or record["val_auc"] > best[0]:
                best = (record["val_auc"], record["test_auc"], epoch)
        recorder.epoch(record)
    del loader
    gc.collect()  # a loader refers to itself: collecting it stops its workers now
    final = {**link_final(recorder.epochs, best, start), "setup": setup}
    recorder.write(final)
    recorder.close()
    return {"epochs": recorder.epochs, "final": final, "model": model}


def sampling_library() -> str:
    import torch_geometric.typing as pyg_typing
    return "pyg-lib" if pyg_typing.WITH_PYG_LIB else "torch_sparse"


def local_links(task: LinkTask):
    """The training links as (edge type, type-local [2, P] index), as a PyG user gives them."""
    first_src, _ = task.type_range(0)
    first_dst, _ = task.type_range(2)
    return task.edge_type, task.split.train_links - torch.tensor([[first_src], [first_dst]])


def typed_link_loader(settings, task: LinkTask, workers: int):
    """PyG's LinkNeighborLoader over the training graph's HeteroData."""
    from torch_geometric.loader import LinkNeighborLoader

    data = task.graph.to_data()
    timed = {} if task.split.train_times is None else {  # a temporal split: batches by time, as conveyor's
        "edge_label_time": task.split.train_times, "time_attr": TIME,
        "temporal_strategy": settings.task.temporal_strategy}
    with warnings.catch_warnings():  # PyG nags about pyg-lib when it samples with torch_sparse
        warnings.filterwarnings("ignore", message=".*without a 'pyg-lib' installation")
        return LinkNeighborLoader(data, num_neighbors=list(settings.sampler.fanouts),
                                  edge_label_index=local_links(task), neg_sampling_ratio=settings.task.neg_ratio,
                                  batch_size=settings.trainer.batch_size, shuffle=True, num_workers=workers,
                                  persistent_workers=workers > 0, **timed)


def batch_scores(model: LinkModel, batch, edge_type) -> torch.Tensor:
    """The scores of a batch's links: PyG's typed forward over its subgraph, then the decoder."""
    encoder = model.encoder
    x_dict = {t: batch[t].x if "x" in batch[t] else encoder.embeddings[t](batch[t].n_id)
              for t in batch.node_types}
    z = encoder.inner(x_dict, batch.edge_index_dict)
    z_src, z_dst = z[edge_type[0]], z[edge_type[2]]
    src, dst = batch[edge_type].edge_label_index
    return model.score(torch.cat([z_src, z_dst]), torch.stack([src, z_src.size(0) + dst]))


def train_epoch(model: LinkModel, task: LinkTask, optimizer, loader, device, progress: bool, desc: str) -> dict:
    model.train()
    loss_sum = correct = seen = 0.0
    for batch in tqdm(loader, desc=desc, disable=None if progress else True, leave=False, dynamic_ncols=True):
        batch = batch.to(device)
        out = batch_scores(model, batch, task.edge_type)
        labels = batch[task.edge_type].edge_label.float()
        loss = F.binary_cross_entropy_with_logits(out, labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        loss_sum += loss.item() * out.numel()
        correct += int(((out > 0) == (labels > 0.5)).sum())
        seen += out.numel()
    return {"loss": loss_sum / max(seen, 1), "train_acc": correct / max(seen, 1)}
