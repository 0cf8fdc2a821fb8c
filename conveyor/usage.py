"""`conveyor --help`: each group's options, and every key with its default and its meaning.

Everything shown comes from the stages' settings declarations (their `settings.py`, the fields of
core/fields.py), the same ones the config check reads: a key's meaning is its field's `help`,
an option's description its group's `OPTIONS`. The defaults are the composed config's, so they
follow the options given before `--help` (`conveyor data=cora --help` shows cora's).
"""
from __future__ import annotations

import textwrap

from omegaconf import OmegaConf

from conveyor.compose import CONF, compose_config
from conveyor.core.fields import declared, default_of
from conveyor.partition.settings import data_settings
from conveyor.samplers.settings import sampler_settings
from conveyor.settings import Settings

WIDTH, KEY_COLUMN = 110, 36
HEADER = """\
conveyor: pipelined GNN training (GraphSAGE, GCN, GAT) on large graphs.

Usage: conveyor [GROUP=OPTION ...] [KEY=VALUE ...]     (from a checkout: python launch.py ...)
  e.g. conveyor model=sage data=products trainer.epochs=5 run.out_dir=runs/p1
  The defaults below follow the options given before --help: conveyor data=cora --help.
  Partition offline with the same overrides: conveyor partition ... num_parts=K.
  Prepare cora, citeseer and pubmed without GitHub (from PyPI): conveyor prepare planetoid [--root DIR]."""
FOOTER = """\
Outputs go to run.out_dir: metrics.json, TensorBoard event files, run.log,
checkpoints/last.pt (resume with run.resume=true)."""
TARGET_ARGUMENT = "an argument of model._target_'s class"


def sections() -> dict:
    """The settings class of each section of the config (`data`'s: that of the chosen dataset)."""
    return {f.name: f.default_factory for f in declared(Settings) if f.metadata.get("section")}


def option_files() -> dict:
    """group -> its options (conf/<group>/*.yaml), sorted."""
    return {group.name: sorted(path.stem for path in group.glob("*.yaml"))
            for group in sorted(CONF.iterdir()) if group.is_dir() and any(group.glob("*.yaml"))}


def help_text(overrides: list) -> str:
    cfg = compose_config(overrides, with_hydra=True)
    choices = {group: str(option) for group, option in cfg.hydra.runtime.choices.items()
               if "/" not in group}  # hydra/...: Hydra's own groups
    values = OmegaConf.to_container(cfg, resolve=False)
    values.pop("hydra")
    return "\n".join([HEADER, "", *group_lines(choices), "", *key_lines(values), "", FOOTER])


def group_lines(choices: dict) -> list:
    lines = ["== Config groups: GROUP=OPTION picks one (* the one chosen) =="]
    for group, options in option_files().items():
        lines.append(f"{group}:")
        width = max(map(len, options)) + 2
        described = getattr(sections()[group], "OPTIONS", {})
        for option in options:
            mark = "*" if choices.get(group) == option else " "
            lines += wrap(f"  {mark} {option:<{width}}", described.get(option, ""), 6 + width)
    return lines


def key_lines(values: dict) -> list:
    lines = ["== Keys and their defaults: KEY=VALUE overrides one =="]
    data = data_settings(values["data"]["name"], values["data"].get("_target_"))
    classes = {**sections(), "data": data, "sampler": sampler_settings(values["sampler"])}
    for name, value in values.items():
        if name in classes:
            lines.append(f"{name}:")
            lines += section_lines(classes[name], value, name)
        else:
            lines += wrap(f"  {name}={show(value)}", meaning(Settings, name), KEY_COLUMN)
    return lines


def section_lines(cls, values: dict, prefix: str) -> list:
    """Each key of a section, in its declaration's order, then a model class's own arguments."""
    lines, fields = [], {f.name: f for f in declared(cls)}
    for name, field in fields.items():
        if field.metadata.get("section"):
            lines += section_lines(field.default_factory, values[name], f"{prefix}.{name}")
        else:  # a key the composed config leaves out (your own dataset's or sampler's): its declared default
            value = values[name] if name in values else default_of(field)
            lines += wrap(f"  {prefix}.{name}={show(value)}", field.metadata["help"], KEY_COLUMN)
    for name in sorted(values.keys() - fields.keys()):
        lines += wrap(f"  {prefix}.{name}={show(values[name])}", TARGET_ARGUMENT, KEY_COLUMN)
    return lines


def meaning(cls, name: str) -> str:
    return next(f.metadata["help"] for f in declared(cls) if f.name == name)


def show(value) -> str:
    """A default as one writes it on the command line."""
    if isinstance(value, list):
        return "[" + ",".join(show(item) for item in value) + "]"
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    return "??? (required)" if value == "???" else str(value)


def wrap(left: str, text: str, column: int) -> list:
    """`left`, then `text` from `column` on (on a line of its own when `left` is too long)."""
    if not text:
        return [left]
    body = textwrap.wrap(text, WIDTH - column) or [""]
    pad = " " * column
    if len(left) + 2 > column:
        return [left] + [pad + line for line in body]
    return [left.ljust(column) + body[0]] + [pad + line for line in body[1:]]
