"""The run config's schema: every key a run reads, its type and its range, in one table.

`check_schema(cfg)` refuses, before any work, a key the table does not know (naming the close
match), a value of the wrong type (no silent `int()`: `batch_size=2.5` is refused, not made 2),
a value out of range and a required value left `???`. Values another module parses (fanouts,
cache sizes, pipeline options) are checked by that module's own parser, so each has one checker.
Machine-dependent checks (device, world size, a writable out_dir) live in trainer/config.py.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Optional, Sequence

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue, OmegaConfBaseException

from conveyor.cache.options import parse_bytes, parse_capacity, parse_dtype
from conveyor.cache.policies import POLICIES
from conveyor.partition import ConveyorError
from conveyor.partition.datasets import DATASETS, OPTIONS
from conveyor.partition.errors import did_you_mean, one_line
from conveyor.partition.partitioner import METHODS, SPLITS
from conveyor.pipeline.options import PipelineOptions
from conveyor.samplers import SAMPLERS
from conveyor.samplers.validation import BEYOND_INT64, INT64_MAX, check_fanouts

from .layerwise import INFERENCE
from .models import MODELS
from .precision import PRECISIONS
from .schedule import SCHEDULES

PIPELINES = ("serial", "async")
MODES = ("train", "compare")


def _kind(value) -> str:
    return {str: " (a string)", bool: " (a boolean)", float: " (a float)"}.get(type(value), "")


@dataclass(frozen=True)
class Rule:
    """What one key accepts: `accepts(value)` and, for the message, `describe` ("an integer >= 1")."""
    describe: str
    accepts: Callable[[Any], bool]
    optional: bool = False  # the key may be absent (the code falls back to a default)
    nullable: bool = False  # null is a valid value
    hint: str = ""  # what the value means, for the message

    def problem(self, key: str, value) -> Optional[str]:
        if value is None and self.nullable or self.accepts(value):
            return None
        null = " or null" if self.nullable else ""
        hint = f" ({self.hint})" if self.hint else ""
        if type(value) is int and value > INT64_MAX:  # the range in describe leaves this limit out
            return f"{key} must be {self.describe}{null}{hint}, got {value}, {BEYOND_INT64}; give a smaller value."
        return f"{key} must be {self.describe}{null}{hint}, got {value!r}{_kind(value)}."


def integer(low: int = 0, high: int = INT64_MAX, **flags) -> Rule:
    text = f"an integer >= {low}" if high == INT64_MAX else f"an integer in [{low}, {high}]"
    return Rule(text, lambda v: type(v) is int and low <= v <= high, **flags)


def number(low: float, high: float = math.inf, low_open=False, high_open=False, **flags) -> Rule:
    """A finite int or float in the interval (inf and nan never pass: they train garbage)."""
    if high == math.inf:
        text = f"a finite number {'>' if low_open else '>='} {low:g}"
    else:
        text = f"a number in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"

    def accepts(v) -> bool:
        return (type(v) in (int, float) and math.isfinite(v) and (v > low if low_open else v >= low)
                and (v < high if high_open else v <= high))
    return Rule(text, accepts, **flags)


def boolean(**flags) -> Rule:
    return Rule("true or false", lambda v: type(v) is bool, **flags)


def choice(options: Sequence[str], **flags) -> Rule:
    return Rule(f"one of {', '.join(options)}", lambda v: v in options, **flags)


def text(**flags) -> Rule:
    return Rule("a non-empty string", lambda v: type(v) is str and v.strip() != "", **flags)


def subset(options: Sequence[str], **flags) -> Rule:
    return Rule(f"a list drawn from {', '.join(options)}",
                lambda v: isinstance(v, list) and all(x in options for x in v), **flags)


def parsed(parse: Callable[[Any], Any], **flags) -> Rule:
    """A value another module parses: its parser raises the ConveyorError with the message."""
    def accepts(v) -> bool:
        parse(v)
        return True
    return Rule("", accepts, **flags)


SCHEMA: dict[str, Rule] = {
    "mode": choice(MODES),
    "run.seed": integer(),
    "run.device": text(),  # which devices exist: trainer/config.py
    "run.world_size": integer(1),
    "run.out_dir": text(hint="the run's own folder"),
    "run.resume": boolean(),
    "run.dist_timeout_s": number(0, low_open=True, optional=True),
    "trainer.epochs": integer(1),
    "trainer.batch_size": integer(1),
    "trainer.eval_batch_size": integer(1),
    "trainer.eval_every": integer(1, optional=True, hint="epochs between evaluations"),
    "trainer.inference": choice(INFERENCE),
    "trainer.patience": integer(0, nullable=True, hint="evaluations without a better val acc; null or 0: off"),
    "trainer.lr": number(0, low_open=True),
    "trainer.weight_decay": number(0, optional=True),
    "trainer.lr_schedule": choice(SCHEDULES),
    "trainer.lr_min": number(0, hint="cosine: the final lr; plateau: the lowest"),
    "trainer.lr_step_size": integer(1, hint="step: epochs between decays"),
    "trainer.lr_gamma": number(0, 1, low_open=True, high_open=True, hint="the factor of each decay"),
    "trainer.lr_patience": integer(0, hint="plateau: evaluations without a better val acc"),
    "trainer.progress": boolean(),
    "trainer.precision": Rule(f"one of {', '.join(PRECISIONS)}", lambda v: str(v) in PRECISIONS),
    "trainer.log_every": integer(1, hint="batches between reads of the loss from the device"),
    "sampler.name": choice(SAMPLERS + ("auto",)),
    "sampler.fanouts": parsed(check_fanouts),
    "sampler.deterministic": boolean(optional=True),
    "model.name": choice(MODELS),
    "model.hidden": integer(1),
    "model.dropout": number(0, 1, high_open=True, optional=True),
    "model.input_dropout": number(0, 1, high_open=True, optional=True),
    "cache.policy": choice(POLICIES),
    "cache.capacity": parsed(parse_capacity),
    "cache.reserve": parsed(lambda v: parse_bytes(v, "cache.reserve"), optional=True),
    "cache.prefetch": parsed(lambda v: parse_bytes(v, "cache.prefetch"), optional=True),
    "cache.dtype": parsed(lambda v: parse_dtype(v, None), optional=True),
    "partition.method": choice(METHODS),
    "partition.dir": text(optional=True, nullable=True),
    "partition.seed": integer(optional=True),
    "partition.splits": subset(SPLITS, optional=True),
    "pipeline.name": choice(PIPELINES),
    "compare.seeds": integer(1, optional=True),
    "compare.target_val_acc": number(0, 1, low_open=True, optional=True, nullable=True,
                                     hint="null: 0.98 x the reference's best mean val accuracy"),
    "compare.pyg_workers": Rule("auto or an integer >= 0", lambda v: v == "auto" or type(v) is int and v >= 0,
                                optional=True, hint="the PyG reference's NeighborLoader worker processes"),
    "data.name": choice(DATASETS),
    "data.root": text(nullable=True, optional=True),
    "data.normalize_features": boolean(optional=True),
}
# The async pipeline's keys; PipelineOptions.from_config checks their values as a whole.
CHECKED_AS_A_WHOLE = Rule("", lambda v: True, optional=True)
PIPELINE_KEYS = ("depth", "superbatch", "threads", "pace.interval", "pace.patience",
                 "pace.wait_fraction", "mps.enabled", "mps.warmup", "mps.floor", "mps.sampler",
                 "mps.loader", "stall_timeout_s")
# The dataset options (which dataset takes which: partition.datasets.OPTIONS).
DATA_OPTIONS: dict[str, Rule] = {
    "scale": number(0, 64, low_open=True, optional=True),
    "seed": integer(optional=True),
    "num_features": integer(1, optional=True),
    "num_classes": integer(2, optional=True),
    "path": text(hint="the folder of your arrays"),
    "undirected": boolean(optional=True),
}
# custom counts the classes in y when num_classes is null; synthetic plants a number of them.
CUSTOM_OPTIONS: dict[str, Rule] = {"num_classes": integer(2, optional=True, nullable=True,
                                                          hint="null: one more than the largest label")}


def check_schema(cfg: DictConfig) -> None:
    """Raise a ConveyorError for the first unknown key, missing value or bad value of `cfg`."""
    present = leaf_keys(cfg)
    _check_key(cfg, "data.name", SCHEMA["data.name"], present)  # it decides which data.* keys exist
    rules = dict(SCHEMA)
    rules.update(data_rules(cfg.data.name))
    rules.update({f"pipeline.{k}": CHECKED_AS_A_WHOLE for k in PIPELINE_KEYS})
    if "model._target_" in present:
        rules.update(target_model_rules(present))
    for key in present:
        if key not in rules:
            raise ConveyorError(unknown_key_message(key, rules))
    for key, rule in rules.items():
        _check_key(cfg, key, rule, present)
    if cfg.pipeline.name == "async":
        PipelineOptions.from_config(cfg.pipeline)


def data_rules(name: str) -> dict[str, Rule]:
    """The rules of the options dataset `name` takes (partition.datasets.OPTIONS)."""
    own = CUSTOM_OPTIONS if name == "custom" else {}
    return {f"data.{k}": own.get(k, DATA_OPTIONS[k]) for k in OPTIONS.get(name, ())}


def target_model_rules(present: list) -> dict[str, Rule]:
    """A model built by `model._target_` (trainer/adapter.py): any name, and its other keys are
    the class's own arguments (its constructor checks them)."""
    own = {k: CHECKED_AS_A_WHOLE for k in present if k.startswith("model.")}
    return {**own, "model._target_": text(hint="a class, e.g. torch_geometric.nn.GAT"),
            "model.name": text(), "model.hidden": integer(1, optional=True)}


def _check_key(cfg: DictConfig, key: str, rule: Rule, present: list) -> None:
    if key not in present:
        if not rule.optional:
            raise ConveyorError(f"the config has no {key}; restore it (conf/ sets it) or give it "
                                f"on the command line, e.g. +{key}=VALUE.")
        return
    problem = rule.problem(key, _value(cfg, key))
    if problem:
        raise ConveyorError(problem)


def _value(cfg: DictConfig, key: str):
    try:
        value = OmegaConf.select(cfg, key, throw_on_missing=True, throw_on_resolution_failure=True)
    except MissingMandatoryValue:
        raise ConveyorError(f"{key} is required and has no value; give it on the command line, "
                            f"e.g. {key}=VALUE.") from None
    except OmegaConfBaseException as error:
        raise ConveyorError(f"{key} cannot be resolved: {one_line(str(error))}") from None
    return OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value


def unknown_key_message(key: str, known: Iterable[str]) -> str:
    return (f"unknown config key {key}{did_you_mean(key, known)}; remove it or correct its name "
            f"(`conveyor --help` or `python launch.py --help` lists the keys).")


def leaf_keys(node, prefix: str = "") -> list[str]:
    """Dotted paths of a config's leaves (a list is a leaf)."""
    from omegaconf import DictConfig

    keys = []
    for name in node.keys():
        path = f"{prefix}{name}"
        child = node._get_node(name)
        keys += leaf_keys(child, path + ".") if isinstance(child, DictConfig) else [path]
    return keys
