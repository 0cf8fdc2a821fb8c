"""`task=link`: link prediction on conveyor's pipeline, as PyG users train it with
`RandomLinkSplit` and `LinkNeighborLoader` (docs/design.md §5, the link task).

`LinkTask` is what `train()` (run.py) asks where the link task differs from node classification:
- the graph: the edges split as RandomLinkSplit splits them (link_split.py); training samples the
  training edges' graph only, so no validation or test edge reaches a training batch;
- the model: the configured node model as the encoder, its output `model.hidden` wide, and a
  decoder (`task.decoder`: dot or mlp) over node pairs (models/decoder.py);
- the batches: positions in the training links, cut into batches of `trainer.batch_size` links
  (shuffled per epoch; a DDP rank its own share, in the same number of batches as every other
  rank), drawn by `samplers.link.LinkSampler` around the configured sampler: `task.neg_ratio`
  random negatives per link, drawn in the sampler stage from the run's sampler stream (so a
  resumed run and the async pipeline replay them);
- the epoch: BCE on the links' scores (loop/link.py); evaluation: ROC-AUC, Hits@K
  (`task.hits_k`) and Recall@K (`task.recall_k`, loop/link_ranking.py) of the validation links
  on training's graph and of the test links on the training and validation edges' graph, from
  layer-wise exact embeddings. Every rank evaluates every link (the same weights give the same
  figures: nothing to reduce).

A typed graph (partition/hetero.py) predicts one edge type's links (`task.edge_type`), split
with its reverse relation (typed_link_split.py: PyG's RandomLinkSplit, or by time); its links
are global ids, negatives are drawn among the edge type's source and destination node types,
the encoder is the typed model (trainer/models/hetero.py) with `model.hidden` outputs for every
node type, and Recall@K ranks the destination type's nodes.
"""
from __future__ import annotations

import logging
import math
from contextlib import nullcontext

import torch
from torch import Tensor

from conveyor.cache.options import parse_dtype
from conveyor.core import ConveyorError
from conveyor.loader.seeds import EpochPlan, EqualPlan
from conveyor.partition import Graph, is_typed
from conveyor.samplers import SamplerSpec
from conveyor.samplers.link import LinkSpec, Negatives
from conveyor.trainer.link_split import split_links
from conveyor.trainer.loop.layerwise import can_run_layerwise
from conveyor.trainer.loop.link import link_embeddings, link_figures
from conveyor.trainer.loop.link_ranking import split_recall
from conveyor.trainer.loop.plan import LayerwisePlan
from conveyor.trainer.models.decoder import LinkModel
from conveyor.trainer.typed_link_split import TIME, link_edge_type, split_typed_links, temporal_sampler

log = logging.getLogger("conveyor")
METRIC = "auc"  # the validation figure that picks the best epoch, early stopping and the plateau schedule


class LinkTask:
    """The link task of a run over `graph` (the whole graph; module doc)."""

    def __init__(self, settings, graph: Graph):
        self.settings, task = settings, settings.task
        self.edge_type = link_edge_type(graph.schema, task.edge_type) if is_typed(graph) else None
        if self.edge_type is None:
            self.split = split_links(graph, task.val_ratio, task.test_ratio, settings.run.seed)
        else:
            self.split = split_typed_links(graph, self.edge_type, task.val_ratio, task.test_ratio,
                                           settings.run.seed, task.split)
        Negatives("binary", task.neg_ratio).check_room(settings.trainer.batch_size, "task.neg_ratio")
        recall = (f"recall@{task.recall_k}",) if task.recall_k else ()
        self.figure_names = ("auc", f"hits@{task.hits_k}", *recall, "loss", "acc")
        self.plans = {}  # split -> its layer-wise batches, kept from the first evaluation
        log.info("task: link prediction, %s; decoder %s, %g negatives per link", self.split.describe(),
                 task.decoder, task.neg_ratio)

    @property
    def graph(self) -> Graph:
        """The graph training samples: the training edges only."""
        return self.split.train_graph

    def model(self, encoder: torch.nn.Module) -> LinkModel:
        if self.settings.trainer.inference == "sampled":
            raise ConveyorError("task=link evaluates from exact embeddings, computed layer by layer (its test "
                                "links' graph is not the one training samples): trainer.inference=sampled is "
                                "for node classification; leave it at auto or layerwise.")
        if not can_run_layerwise(encoder):
            raise ConveyorError(f"task=link evaluates with exact embeddings, computed layer by layer, but the "
                                f"model ({type(encoder).__name__}) cannot run so: it needs `num_layers` and "
                                f"`inference_per_layer` (docs/design.md §5). Use a built-in model or a PyG "
                                f"BasicGNN without jk, or add them to yours.")
        model = self.settings.model
        return LinkModel(encoder, self.settings.task.decoder, model.hidden, model.dropout)

    def sampler(self, device) -> LinkSpec:
        """The training batches' sampler: the configured one around each batch's endpoints."""
        seed, times = self.settings.run.seed, self.split.train_times
        ends = {} if self.edge_type is None else {"src_nodes": self.type_range(0), "dst_nodes": self.type_range(2)}
        negatives = Negatives("binary", self.settings.task.neg_ratio)
        if times is not None:  # a temporal split: each link's subgraph not later than the link (PyG's)
            return LinkSpec(temporal_sampler(self.settings, seed, device), self.split.train_links, None, negatives,
                            seed, edge_label_time=times, time_attr=TIME, **ends)
        return LinkSpec(SamplerSpec.of(self.settings.sampler, seed, device), self.split.train_links, None,
                        negatives, seed, **ends)

    def type_range(self, end: int) -> tuple:
        """(first global id, count) of the edge type's source (`end` 0) or destination (2) type."""
        schema = self.split.train_graph.schema
        t = schema.node_type(self.edge_type[end])
        return schema.offsets[t], schema.node_counts[t]

    def candidates(self, graph: Graph) -> Tensor:
        """The destinations Recall@K ranks: the destination type's nodes, or every node."""
        if self.edge_type is None:
            return torch.arange(graph.num_nodes)
        first, count = self.type_range(2)
        return torch.arange(first, first + count)

    def known_pairs(self, graph: Graph) -> Tensor:
        """[2, E] the message-passing graph's pairs of the predicted relation (all its edges)."""
        edges = graph.edge_index()
        if self.edge_type is None:
            return edges
        relation = graph.schema.relation(self.edge_type)
        return edges[:, graph.edge_attrs["edge_type"].long() == relation]

    def seed_plan(self, ctx, run_seed: int):
        """The training links in batches: all of them alone, a rank's share under DDP."""
        count, batch_size = self.split.train_links.size(1), self.settings.trainer.batch_size
        if ctx.world_size == 1:
            return EpochPlan(torch.arange(count), batch_size, run_seed)
        share = torch.arange(count)[ctx.rank::ctx.world_size]
        batches = math.ceil(math.ceil(count / ctx.world_size) / batch_size)
        if count // ctx.world_size < batches:
            raise ConveyorError(f"{count} training links are too few for {ctx.world_size} ranks at "
                                f"trainer.batch_size={batch_size}; use fewer ranks or a larger batch size.")
        return EqualPlan(share, batches, ctx.rank_seed(run_seed))

    def figures(self, model: LinkModel, device, autocast=nullcontext, progress: bool = False) -> dict:
        """Validation's and test's figures (val_auc, val_hits@K, val_recall@K, val_loss, val_acc,
        test_...) of `model` (a run's, or the comparison's PyG reference's: the same ruler)."""
        split, figures = self.split, {}
        for name, graph, links, labels in (("val", split.train_graph, split.val_links, split.val_labels),
                                           ("test", split.test_graph, split.test_links, split.test_labels)):
            values = self.split_figures(model, name, graph, links, labels, device, autocast, progress)
            figures.update({f"{name}_{key}": value for key, value in values.items()})
        return figures

    def split_figures(self, model: LinkModel, name: str, graph: Graph, links: Tensor, labels: Tensor, device,
                      autocast, progress: bool) -> dict:
        """One split's figures from the exact embeddings of its links' endpoints (and, for
        Recall@K, of every candidate destination)."""
        trainer, task = self.settings.trainer, self.settings.task
        wanted = torch.cat([links.reshape(-1), self.candidates(graph)]) if task.recall_k else links.reshape(-1)
        nodes = torch.unique(wanted)
        if name not in self.plans:
            self.plans[name] = LayerwisePlan(graph, nodes, model.num_layers, trainer.eval_batch_size)
        z = link_embeddings(model, graph, nodes, trainer.eval_batch_size, device, autocast,
                            parse_dtype(self.settings.cache.dtype, None), self.plans[name], progress).to(device)
        scores = model.score(z, torch.searchsorted(nodes, links).to(device)).float().cpu()
        values = link_figures(scores, labels, task.hits_k)
        if task.recall_k:
            values[f"recall@{task.recall_k}"] = split_recall(model, z, nodes, links, labels, self.candidates(graph),
                                                             self.known_pairs(graph), task.recall_k, device)
        return values
