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
- the epoch: BCE on the links' scores (loop/link.py); evaluation: ROC-AUC and Hits@K
  (`task.hits_k`) of the validation links on training's graph and of the test links on the
  training and validation edges' graph, from layer-wise exact embeddings. Every rank evaluates
  every link (the same weights give the same figures: nothing to reduce).
"""
from __future__ import annotations

import logging
import math

import torch

from conveyor.cache.options import parse_dtype
from conveyor.core import ConveyorError
from conveyor.loader.seeds import EpochPlan, EqualPlan
from conveyor.partition import Graph
from conveyor.samplers import SamplerSpec
from conveyor.samplers.link import LinkSpec, Negatives
from conveyor.trainer.link_split import split_links
from conveyor.trainer.loop.layerwise import can_run_layerwise
from conveyor.trainer.loop.link import link_figures, link_scores
from conveyor.trainer.loop.plan import LayerwisePlan
from conveyor.trainer.models.decoder import LinkModel

log = logging.getLogger("conveyor")
METRIC = "auc"  # the validation figure that picks the best epoch, early stopping and the plateau schedule


class LinkTask:
    """The link task of a run over `graph` (the whole graph; module doc)."""

    def __init__(self, settings, graph: Graph):
        self.settings, task = settings, settings.task
        self.split = split_links(graph, task.val_ratio, task.test_ratio, settings.run.seed)
        Negatives("binary", task.neg_ratio).check_room(settings.trainer.batch_size, "task.neg_ratio")
        self.figure_names = ("auc", f"hits@{task.hits_k}", "loss", "acc")
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
        seed = self.settings.run.seed
        return LinkSpec(SamplerSpec.of(self.settings.sampler, seed, device), self.split.train_links, None,
                        Negatives("binary", self.settings.task.neg_ratio), seed)

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

    def figures(self, run) -> dict:
        """Validation's and test's figures (val_auc, val_hits@K, val_loss, val_acc, test_...)."""
        split, trainer, figures = self.split, run.settings.trainer, {}
        for name, graph, links, labels in (("val", split.train_graph, split.val_links, split.val_labels),
                                           ("test", split.test_graph, split.test_links, split.test_labels)):
            if name not in self.plans:
                self.plans[name] = LayerwisePlan(graph, torch.unique(links), run.model.num_layers,
                                                 trainer.eval_batch_size)
            scores = link_scores(run.model, graph, links, trainer.eval_batch_size, run.ctx.device,
                                 run.precision.autocast, parse_dtype(run.settings.cache.dtype, None),
                                 self.plans[name], trainer.progress and run.ctx.is_main)
            values = link_figures(scores, labels, self.settings.task.hits_k)
            figures.update({f"{name}_{key}": value for key, value in values.items()})
        return figures
