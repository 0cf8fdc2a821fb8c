"""`conveyor --help`: each group's options, and every key with its default and its meaning.

The meanings are the comments of conf/'s YAML, the one place they are written: a key's
trailing comment (continued by comment lines aligned under it) or the comment lines right above
it. A file's first comment block (or else its `name:` key's comment) says what the option is.
A key takes its meaning from the first file that gives one: the chosen options' files, then
config.yaml, then the group's other options (none.yaml's `reserve` is explained in degree.yaml).
"""
from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

from omegaconf import OmegaConf

from .compose import CONF, compose_config

WIDTH, KEY_COLUMN = 110, 36
KEY_LINE = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z_]\w*):(?P<value>.*)$")
TRAILING = re.compile(r"\s#\s?(?P<text>.*)$")  # YAML: a comment starts with # after a space
HEADER = """\
conveyor: pipelined GNN training (GraphSAGE, GCN, GAT) on large graphs.

Usage: conveyor [GROUP=OPTION ...] [KEY=VALUE ...]     (from a checkout: python launch.py ...)
  e.g. conveyor model=sage data=products trainer.epochs=5 run.out_dir=runs/p1
  The defaults below follow the options given before --help: conveyor data=cora --help.
  Partition offline with the same overrides: conveyor partition ... num_parts=K."""
FOOTER = """\
Outputs go to run.out_dir: metrics.json, TensorBoard event files, run.log,
checkpoints/last.pt (resume with run.resume=true). See README.md and docs/design.md."""


@dataclass
class Comments:
    """What one YAML file says about itself (`about`) and about its keys (dotted key -> meaning),
    and its keys' values as written (dotted key -> text)."""
    about: str
    keys: dict
    values: dict


def read_comments(path: Path, prefix: str = "") -> Comments:
    """The comments of one YAML file; `prefix` (e.g. "cache.") is its package, unless the file
    says `# @package _global_`."""
    lines = path.read_text().splitlines()
    if any(line.strip() == "# @package _global_" for line in lines):
        prefix = ""
    about, keys, values, above, open_keys = [], {}, {}, [], []
    continued = None  # (key, column of its trailing comment): an aligned comment line continues it
    in_header = True
    for line in lines:
        text = line.strip()
        if text.startswith("# @package"):
            continue
        if not text:
            in_header, above, continued = False, [], None
            continue
        if text.startswith("#"):
            comment = text[1:].strip()
            if in_header:
                about.append(comment)
            elif continued and line.index("#") == continued[1]:
                keys[continued[0]] += " " + comment
            else:
                above.append(comment)
            continue
        in_header, continued = False, None
        match = KEY_LINE.match(line)
        if match is None:  # a list item (the defaults list)
            above = []
            continue
        indent = len(match["indent"])
        open_keys = [(i, k) for i, k in open_keys if i < indent] + [(indent, match["key"])]
        key = prefix + ".".join(k for _, k in open_keys)
        trailing = TRAILING.search(match["value"])
        values[key] = (match["value"][:trailing.start()] if trailing else match["value"]).strip()
        meaning = " ".join(above + ([trailing["text"].strip()] if trailing else []))
        if meaning:
            keys[key] = meaning
        if trailing:
            continued = (key, match.start("value") + trailing.start() + 1)
        above = []
    return Comments(" ".join(about), keys, values)


def option_files() -> dict:
    """group -> {option -> its YAML file}."""
    return {group.name: {path.stem: path for path in sorted(group.glob("*.yaml"))}
            for group in sorted(CONF.iterdir()) if group.is_dir()}


def key_meanings(choices: dict) -> dict:
    """dotted key -> meaning, for the options chosen in each group (group -> option).

    The key whose value is the option's own name (`model.name: sage`, `cache.policy: degree`)
    means that option: its comment, or else what the option says about itself. Only the
    chosen file speaks for it; another option's file describes another option."""
    files = option_files()
    chosen = [(group, option, files[group][option]) for group, option in choices.items()]
    others = [(group, option, path) for group, options in files.items() for option, path in options.items()
              if choices.get(group) != option]
    meanings = {}
    for group, option, path in chosen + [("", None, CONF / "config.yaml")] + others:
        comments = read_comments(path, f"{group}." if group else "")
        for key, value in comments.values.items():
            meaning = comments.keys.get(key)
            if value == option:  # the key naming this option
                if choices.get(group) != option:
                    continue
                meaning = meaning or first_sentence(comments.about)
            if meaning:
                meanings.setdefault(key, meaning)
    return meanings


def describe_option(group: str, path: Path) -> str:
    """An option's first sentence about itself."""
    comments = read_comments(path, f"{group}.")
    return first_sentence(comments.about or comments.keys.get(f"{group}.name", ""))


def first_sentence(text: str) -> str:
    return re.split(r"(?<=\.)\s", text, maxsplit=1)[0]


def help_text(overrides: list) -> str:
    cfg = compose_config(overrides, with_hydra=True)
    choices = {group: str(option) for group, option in cfg.hydra.runtime.choices.items()
               if "/" not in group}  # hydra/...: Hydra's own groups
    values = OmegaConf.to_container(cfg, resolve=False)
    values.pop("hydra")
    return "\n".join([HEADER, "", *group_lines(choices), "", *key_lines(values, key_meanings(choices)),
                      "", FOOTER])


def group_lines(choices: dict) -> list:
    lines = ["== Config groups: GROUP=OPTION picks one (* the one chosen) =="]
    for group, options in option_files().items():
        lines.append(f"{group}:")
        width = max(map(len, options)) + 2
        for option, path in options.items():
            mark = "*" if choices.get(group) == option else " "
            lines += wrap(f"  {mark} {option:<{width}}", describe_option(group, path), 6 + width)
    return lines


def key_lines(values: dict, meanings: dict) -> list:
    lines = ["== Keys and their defaults: KEY=VALUE overrides one =="]
    for section, content in values.items():
        if isinstance(content, dict):
            lines.append(f"{section}:")
        for key, value in leaves(content, section):
            lines += wrap(f"  {key}={show(value)}", meanings.get(key, ""), KEY_COLUMN)
    return lines


def leaves(value, key: str):
    """(dotted key, value) of every leaf under `key` (a list is a leaf)."""
    if isinstance(value, dict):
        for name, child in value.items():
            yield from leaves(child, f"{key}.{name}")
    else:
        yield key, value


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
