"""How a setting is declared, once: a field of a stage's settings dataclass whose metadata holds its
meaning (what `conveyor --help` shows) and the values it accepts (`Rule`), beside its default.

    @dataclass(frozen=True, kw_only=True)
    class SamplerSettings(Section):
        SECTION: ClassVar[str] = "sampler"
        fanouts: list = setting([15, 10, 5], "neighbours drawn per node, one per hop ...",
                                parsed(check_fanouts))

A `Section` checks its fields as it is made, so a stage's settings are valid by construction:
a wrong type is refused without silent coercion (`batch_size=2.5` is not made 2), a value out of
range names the range, a required value left `???` names the key to give. Each message is one
paragraph naming the key (`trainer.batch_size must be an integer >= 1, got 2.5 (a float).`). A
section adds checks across its fields in `check()`.

Every stage declares its own settings in its `settings.py`; the entry point (conveyor/config.py)
builds them from the composed config, and gives Hydra their defaults, so conf/'s YAML holds only
what each option changes. This module is the bottom of the import order, beside ConveyorError.
"""
from __future__ import annotations

import copy
import math
from dataclasses import MISSING, Field, field, fields
from typing import Any, Callable, ClassVar, Iterable, Iterator, Optional, Sequence

from conveyor.core.errors import ConveyorError, did_you_mean

INT64_MAX = 2**63 - 1
BEYOND_INT64 = f"beyond the largest integer conveyor handles (2**63-1 = {INT64_MAX:,}, int64)"
REQUIRED = "???"  # a value the user must give, as the composed config marks it


def _kind(value) -> str:
    return {str: " (a string)", bool: " (a boolean)", float: " (a float)"}.get(type(value), "")


class Rule:
    """What one key accepts: `accepts(value)` and, for the message, `describe` ("an integer >= 1")."""

    def __init__(self, describe: str, accepts: Callable[[Any], bool], nullable: bool = False, hint: str = ""):
        self.describe, self.accepts, self.nullable, self.hint = describe, accepts, nullable, hint

    def problem(self, key: str, value) -> Optional[str]:
        """The message refusing `value` for `key`, or None when it is accepted."""
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
    return Rule(f"one of {', '.join(options)}", lambda v: type(v) is str and v in options, **flags)


def text(**flags) -> Rule:
    return Rule("a non-empty string", lambda v: type(v) is str and v.strip() != "", **flags)


def subset(options: Sequence[str], **flags) -> Rule:
    return Rule(f"a list drawn from {', '.join(options)}",
                lambda v: isinstance(v, (list, tuple)) and all(x in options for x in v), **flags)


def parsed(parse: Callable[[Any], Any], **flags) -> Rule:
    """A value its stage parses where it is used: the parser raises the ConveyorError with the
    message, so the check and the use cannot disagree."""
    def accepts(v) -> bool:
        parse(v)
        return True
    return Rule("", accepts, **flags)


def setting(default, help: str, rule: Optional[Rule] = None) -> Field:
    """A dataclass field declaring one config key: its default (REQUIRED: none, the user gives it),
    its meaning and the values it accepts."""
    metadata = {"help": help, "rule": rule}
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: copy.deepcopy(default), metadata=metadata)
    return field(default=default, metadata=metadata)


def section(cls, help: str = "") -> Field:
    """A dataclass field holding a nested section (`pipeline.pace`), made with its defaults."""
    return field(default_factory=cls, metadata={"help": help, "section": True})


class Section:
    """Base of a stage's settings dataclass (frozen, keyword-only): checks its fields as it is made.
    `SECTION` is its place in the config (`"trainer"`, `"pipeline.pace"`), for the messages."""
    SECTION: ClassVar[str] = ""

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if value == REQUIRED:
                raise ConveyorError(f"{self.key(f.name)} is required and has no value; give it on the "
                                    f"command line, e.g. {self.key(f.name)}=VALUE.")
            rule = f.metadata.get("rule")
            problem = rule.problem(self.key(f.name), value) if rule else None
            if problem:
                raise ConveyorError(problem)
        self.check()

    def check(self) -> None:
        """Checks across fields; a subclass overrides it."""

    @classmethod
    def key(cls, name: str) -> str:
        return f"{cls.SECTION}.{name}" if cls.SECTION else name

    def to_dict(self) -> dict:
        """The settings as the config's plain values (nested sections as dicts)."""
        return {f.name: getattr(self, f.name).to_dict() if f.metadata.get("section") else
                copy.deepcopy(getattr(self, f.name)) for f in fields(self) if is_key(f)}


def is_key(f: Field) -> bool:
    """Whether a field is a config key (or a section of them): it carries a meaning."""
    return "help" in f.metadata


def declared(cls) -> Iterator[Field]:
    """The config keys a settings class declares, in order."""
    return (f for f in fields(cls) if is_key(f))


def default_of(f: Field):
    """A field's default, as the config writes it (REQUIRED for none)."""
    if f.default is not MISSING:
        return f.default
    return f.default_factory() if f.default_factory is not MISSING else REQUIRED


def defaults(cls) -> dict:
    """The defaults of every key `cls` declares, nested as the config nests them: what the entry
    point gives Hydra under conf/'s YAML."""
    return {f.name: defaults(f.default_factory) if f.metadata.get("section") else default_of(f)
            for f in declared(cls)}


def unknown_key_message(key: str, known: Iterable[str]) -> str:
    return (f"unknown config key {key}{did_you_mean(key, known)}; remove it or correct its name "
            f"(`conveyor --help` or `python launch.py --help` lists the keys).")


def known_keys(cls, prefix: str = "") -> list:
    """Every dotted key `cls` declares (nested sections' keys too), for close matches."""
    keys = []
    for f in declared(cls):
        keys += known_keys(f.default_factory, f"{prefix}{f.name}.") if f.metadata.get("section") else [prefix + f.name]
    return keys
