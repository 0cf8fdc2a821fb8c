"""The run's settings: the trainer's own sections (`run.*`, `trainer.*`, `model.*`, `compare.*`),
declared once (core/fields.py), and `Settings`, every stage's section together, which the
entry point (conveyor/config.py) builds from the composed config and checks as it does, once. The
trainer hands each stage its own section: `settings.sampler` to the sampler, `settings.cache` to
the cache, `settings.pipeline` to the batch source, `settings.data` to the loader.

Importing this module loads no model code (PyG), so `--help` and the config check stay quick; the
names the sections accept live here and the modules that use them import them from here.
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any, ClassVar, Dict, Optional

from conveyor.cache.settings import CacheSettings
from conveyor.core import ConveyorError
from conveyor.core.fields import (
    REQUIRED,
    Rule,
    Section,
    boolean,
    choice,
    integer,
    number,
    section,
    setting,
    text,
    unknown_key_message,
)
from conveyor.partition.settings import DataSettings, PartitionSettings
from conveyor.pipeline.settings import PipelineSettings
from conveyor.samplers.settings import SamplerSettings
from conveyor.trainer.model_registry import MODEL_REGISTRY, model_entry

INFERENCE = ("auto", "layerwise", "sampled")  # trainer/loop/layerwise.py
GCN_DEGREES = ("batch", "graph")  # trainer/models/gcn.py
PRECISIONS = ("auto", "32", "tf32", "bf16-mixed")  # trainer/loop/precision.py
SCHEDULES = ("none", "cosine", "step", "plateau")  # trainer/loop/schedule.py
TASKS = ("node", "link")  # node classification (trainer/run.py) | link prediction (trainer/link_task.py)
DECODERS = ("dot", "mlp")  # trainer/models/decoder.py
LINK_SPLITS = ("random", "temporal")  # a typed graph's links (trainer/typed_link_split.py)
TEMPORAL_STRATEGIES = ("uniform", "last")  # samplers/temporal.py (PyG's temporal_strategy)
OUT_DIR = "runs/${now:%Y-%m-%d_%H-%M-%S}_${data.name}_${model.name}_${run_id:}"  # resolved when composed


@dataclass(frozen=True, kw_only=True)
class RunSettings(Section):
    SECTION: ClassVar[str] = "run"
    seed: int = setting(0, "every random choice (batch order, sampling, dropout, init) derives from it", integer())
    device: str = setting("auto", "auto (cuda when visible, else cpu) | cpu | cuda | cuda:N", text())
    world_size: int = setting(1, "data-parallel ranks", integer(1))
    out_dir: str = setting(OUT_DIR, "the run's own folder, locked while a run writes into it; run_id: the "
                                    "process id", text(hint="the run's own folder"))
    resume: bool = setting(False, "continue the run in run.out_dir from its last checkpoint", boolean())
    dist_timeout_s: float = setting(300, "run.world_size > 1: a rank stuck this long in a collective fails "
                                         "the job (at least 10: the ranks' start-up takes seconds)",
                                    number(10, hint="seconds, e.g. 300"))

    def check(self) -> None:  # `~` expanded once, here, so the lock, the checks and every write agree
        object.__setattr__(self, "out_dir", os.path.expanduser(self.out_dir))


@dataclass(frozen=True, kw_only=True)
class TrainerSettings(Section):
    SECTION: ClassVar[str] = "trainer"
    epochs: int = setting(10, "passes over the training nodes", integer(1))
    batch_size: int = setting(1024, "seed (training) nodes per mini-batch", integer(1))
    eval_batch_size: int = setting(4096, "seed nodes per evaluation batch (validation and test)", integer(1))
    eval_every: int = setting(1, "epochs between evaluations (the last epoch is always evaluated)",
                              integer(1, hint="epochs between evaluations"))
    inference: str = setting(
        "auto", "how val/test are evaluated: layerwise (every in-neighbour, one layer at a time over the nodes "
        "that need it, as PyG's and DGL's products examples: exact, their published figures; layer outputs wait "
        "in host memory, one batch of eval_batch_size nodes on the device) | sampled (subgraphs at the training "
        "fanouts: cheaper when val+test are a small part of a huge graph, e.g. papers100m) | auto: layerwise if "
        "the model can, else sampled", choice(INFERENCE))
    layerwise_max_nodes: Optional[int] = setting(
        10_000_000, "inference=auto evaluates layer-wise only on graphs of at most this many nodes (ogbn-products' "
        "2.4M: layer-wise); above, sampled over the val/test nodes' neighbourhoods (papers100m's 111M nodes: a "
        "layer-wise pass would keep two float32 layer outputs of every node within L-1 hops in memory). The "
        "start-up line says which; null: no limit", integer(1, nullable=True, hint="nodes; null: no limit"))
    max_batches: Optional[int] = setting(
        None, "train on at most this many batches an epoch, the first of its order (Lightning's "
              "limit_train_batches), for benchmarks and smoke runs; null: every batch",
        integer(1, nullable=True, hint="batches an epoch; null: all"))
    patience: Optional[int] = setting(
        None, "early stopping: stop after this many evaluations without a better val acc; null or 0: off",
        integer(0, nullable=True, hint="evaluations without a better val acc; null or 0: off"))
    lr: float = setting(0.003, "Adam's learning rate", number(0, low_open=True))
    weight_decay: float = setting(0.0, "Adam's L2 penalty", number(0))
    lr_schedule: str = setting(
        "none", "none | cosine (lr -> lr_min over the epochs) | step (x lr_gamma every lr_step_size epochs) | "
        "plateau (x lr_gamma after lr_patience evaluations without a better val acc); torch.optim.lr_scheduler, "
        "stepped after each epoch; fixed on resume", choice(SCHEDULES))
    lr_min: float = setting(0.0, "cosine: the lr it anneals to; plateau: the lowest lr",
                            number(0, hint="cosine: the final lr; plateau: the lowest"))
    lr_step_size: int = setting(10, "step: epochs between decays", integer(1, hint="step: epochs between decays"))
    lr_gamma: float = setting(0.1, "step, plateau: each decay multiplies the lr by this",
                              number(0, 1, low_open=True, high_open=True, hint="the factor of each decay"))
    lr_patience: int = setting(10, "plateau: evaluations without a better val acc before a decay",
                               integer(0, hint="plateau: evaluations without a better val acc"))
    progress: bool = setting(True, "tqdm progress bar (on a terminal only)", boolean())
    precision: Any = setting("auto", "32 | tf32 | bf16-mixed (autocast; CPU too) | auto: tf32 on CUDA, 32 on CPU",
                             Rule(f"one of {', '.join(PRECISIONS)}", lambda v: str(v) in PRECISIONS))
    log_every: int = setting(50, "batches between reads of the loss from the device (progress bar, TensorBoard "
                                 "batch/loss: the mean since the last read); the epoch's figures are exact "
                                 "whatever it is", integer(1, hint="batches between reads of the loss from the "
                                                                   "device"))

    def check(self) -> None:
        """What the per-key ranges cannot see: cosine and plateau go down to lr_min."""
        if self.lr_schedule in ("cosine", "plateau") and self.lr_min >= self.lr:
            raise ConveyorError(f"trainer.lr_schedule={self.lr_schedule} lowers the lr from trainer.lr={self.lr:g} "
                                f"to trainer.lr_min={self.lr_min:g}, which is not lower; set trainer.lr_min "
                                f"below trainer.lr (e.g. 0).")

    @property
    def largest_batch_ratio(self) -> float:
        """The run's largest batch (training or evaluation) over its training batch, in seeds
        (pipeline/memory.py: the room an auto cache leaves for it)."""
        return max(self.eval_batch_size, self.batch_size) / self.batch_size


@dataclass(frozen=True, kw_only=True)
class ModelSettings(Section):
    """A built-in model (`name`), or any class (`_target_`), whose other keys are its own arguments
    (`arguments`: the class checks them)."""
    SECTION: ClassVar[str] = "model"
    OPTIONS: ClassVar[dict] = {  # the config group's options (conf/model/*.yaml), for --help
        **{name: entry.help for name, entry in MODEL_REGISTRY.items()},  # trainer/model_registry.py
        "gat": "GAT: PyG's torch_geometric.nn.GAT, run layer by layer over the sampled hops "
               "(trainer/models/adapter.py). "
               "Any class works the same way: model._target_=my.module.Class (docs/design.md §5, the contract)."}

    name: str = setting(REQUIRED, "the model (the option chosen in group model): sage, gcn, mlp or rgcn, or any "
                                "name for a model._target_", text())
    hidden: int = setting(256, "hidden_channels: each hidden layer's width (GAT: over all heads)", integer(1))
    dropout: float = setting(0.5, "between layers", number(0, 1, high_open=True))
    input_dropout: float = setting(0.0, "on the raw features (the Planetoid YAMLs set 0.5)",
                                   number(0, 1, high_open=True))
    gcn_degrees: str = setting(
        "batch", "GCN's normalisation in training: batch (GCNConv's own, over the batch's edges, as PyG's "
        "NeighborLoader training) | graph (the whole graph's degrees: with every fanout -1, full-batch GCN "
        "exactly, as Kipf and Welling train it). Layer-wise evaluation always reads the whole graph's "
        "(trainer/models/gcn.py)", choice(GCN_DEGREES))
    fast_dropout: Optional[bool] = setting(
        None, "conveyor's CPU dropout masks, cut from 16-bit slices of random words (trainer/models/dropout.py): "
        "torch's distribution with p to 1/65536, 3-4x faster than F.dropout. null: for the built-in models "
        "(sage, gcn, mlp) only; any other (a model._target_, so model=gat too, or a module given to fit) "
        "draws F.dropout's masks, as written. true: for every model (a PyG model's dropouts between its "
        "layers too); false: for none (F.dropout's draws, as runs before it)", boolean(nullable=True))
    _target_: Optional[str] = setting(None, "the model class (module.Class, e.g. torch_geometric.nn.GAT), built "
                                            "with in_channels, out_channels, num_layers, hidden_channels "
                                            "(model.hidden) and the other model.* keys; null: the built-in name",
                                      text(nullable=True, hint="a class, e.g. torch_geometric.nn.GAT"))
    arguments: Dict[str, Any] = field(default_factory=dict)  # the _target_ class's own keys (heads, ...)

    def check(self) -> None:
        if self._target_ is None:
            model_entry(self.name)  # an unknown built-in name: refused here, before any work
            if self.arguments:
                raise ConveyorError(unknown_key_message(f"model.{next(iter(self.arguments))}",
                                                        [self.key(f.name) for f in dataclasses.fields(self)]))
            if self.gcn_degrees == "graph" and not model_entry(self.name).degrees:
                raise ConveyorError(f"model.gcn_degrees=graph normalises GCN by the whole graph's degrees, but "
                                    f"model={self.name} is no GCN; use model=gcn, or leave model.gcn_degrees "
                                    f"at batch.")

    def uses_fast_dropout(self, given: bool = False) -> bool:
        """Whether the model's dropouts take conveyor's masks (`fast_dropout`; null: for a built-in
        model only, never for a `_target_` or a module handed to fit, `given`, which run as written)."""
        if self.fast_dropout is not None:
            return self.fast_dropout
        return self._target_ is None and not given

    def to_dict(self) -> dict:
        values = {**super().to_dict(), **self.arguments}
        return values if self._target_ is not None else {k: v for k, v in values.items() if k != "_target_"}


@dataclass(frozen=True, kw_only=True)
class TaskSettings(Section):
    """What the run learns (group `task`): the nodes' classes, or which node pairs are linked
    (trainer/link_task.py: the edges split as PyG's RandomLinkSplit, an encoder and a decoder)."""
    SECTION: ClassVar[str] = "task"
    OPTIONS: ClassVar[dict] = {  # the config group's options (conf/task/*.yaml), for --help
        "node": "node classification: the training nodes' labels, cross-entropy, accuracy",
        "link": "link prediction: the edges split into train/val/test as PyG's RandomLinkSplit (val and test "
                "edges out of training's graph), the model as an encoder with a decoder over node pairs, "
                "binary cross-entropy against random negatives, ROC-AUC and Hits@K from layer-wise embeddings"}

    name: str = setting(REQUIRED, "the task (the option chosen in group task): node or link", choice(TASKS))
    val_ratio: float = setting(0.05, "link: the share of the edges held out for validation (RandomLinkSplit's "
                                     "num_val)", number(0, 1, high_open=True, hint="link: share of the edges"))
    test_ratio: float = setting(0.1, "link: the share of the edges held out for testing (RandomLinkSplit's "
                                     "num_test)", number(0, 1, high_open=True, hint="link: share of the edges"))
    neg_ratio: float = setting(1.0, "link: random negative pairs drawn per training edge in each batch (binary, "
                                    "in the sampler stage: LinkNeighborLoader's neg_sampling_ratio)",
                               number(0, low_open=True, hint="link: negatives per positive"))
    decoder: str = setting("dot", "link: a pair's score from its two embeddings: dot (their inner product) | mlp "
                                  "(an MLP on their elementwise product, OGB's LinkPredictor)", choice(DECODERS))
    hits_k: int = setting(20, "link: Hits@K, the share of positive val/test links scored above the K-th best "
                              "negative (OGB's)", integer(1, hint="link: K of Hits@K"))
    recall_k: int = setting(20, "link: Recall@K, each source's share of its held-out links among its K best-scored "
                                "destinations not yet linked (PyG's LinkPredRecall); 0: not computed",
                            integer(0, hint="link: K of Recall@K"))
    edge_type: Optional[list] = setting(None, "link on a typed graph: the edge type to predict, [src, rel, dst] (or "
                                              "[src, dst]); null: the graph's first", Rule(
                                                  "a list [src, rel, dst] or [src, dst] of node and relation names",
                                                  lambda v: isinstance(v, (list, tuple)) and len(v) in (2, 3)
                                                  and all(isinstance(x, str) for x in v), nullable=True))
    split: str = setting("random", "link on a typed graph: random (PyG's RandomLinkSplit with the reverse edge type) "
                                   "| temporal (by the edge type's `time`: train on the past, test on the future)",
                         choice(LINK_SPLITS))
    temporal_strategy: str = setting("uniform", "link, task.split=temporal: a training link's neighbours among those "
                                                "not later than it: uniform (PyG's default) | last (the latest)",
                                     choice(TEMPORAL_STRATEGIES))

    def check(self) -> None:
        if self.val_ratio + self.test_ratio >= 1:
            raise ConveyorError(f"task.val_ratio={self.val_ratio:g} and task.test_ratio={self.test_ratio:g} hold out "
                                f"all the edges, leaving none to train on; keep their sum below 1 (e.g. 0.05 "
                                f"and 0.1).")


@dataclass(frozen=True, kw_only=True)
class TrainingSettings(Section):
    """Every section a training run reads, each checked as it was made; the trainer hands them out one
    by one. The entry point's `conveyor.settings.Settings` adds what picks the mode."""
    run: RunSettings = section(RunSettings)
    trainer: TrainerSettings = section(TrainerSettings)
    model: ModelSettings = section(ModelSettings)
    data: DataSettings = section(DataSettings)
    sampler: SamplerSettings = section(SamplerSettings)
    cache: CacheSettings = section(CacheSettings)
    partition: PartitionSettings = section(PartitionSettings)
    pipeline: PipelineSettings = section(PipelineSettings)
    task: TaskSettings = section(TaskSettings)

    def replace(self, **sections) -> "TrainingSettings":
        """A copy with some sections' keys changed: `replace(run={"seed": 1})`."""
        changed = {name: dataclasses.replace(getattr(self, name), **keys) if isinstance(keys, dict) else keys
                   for name, keys in sections.items()}
        return dataclasses.replace(self, **changed)
