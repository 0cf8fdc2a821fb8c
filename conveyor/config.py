"""The run's `Settings`, built from a composed config once, at the entry point, and checked as
they are built: every key against its stage's declaration (core/fields.py), then what
depends on this machine (trainer/config.py). Below the entry nothing reads a config: the trainer
receives `Settings` and hands each stage its own section.

    settings = load_settings(["data=cora", "trainer.epochs=5"])   # compose, build, check
    settings = settings_from_config(cfg)                           # a config Hydra composed

The defaults of every key are the declarations' (`defaults(Settings)`); conveyor/compose.py gives
them to Hydra under conf/'s YAML, whose option files hold only what each option changes.
"""
from __future__ import annotations

from typing import Sequence

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from conveyor.core import ConveyorError
from conveyor.core.errors import one_line
from conveyor.core.fields import choice, declared, known_keys, unknown_key_message
from conveyor.partition.datasets import DATASETS
from conveyor.partition.settings import DataSettings, data_settings
from conveyor.samplers.settings import SamplerSettings, sampler_settings
from conveyor.settings import Settings
from conveyor.trainer.settings import ModelSettings


def load_settings(overrides: Sequence[str], check_machine: bool = True) -> Settings:
    """Compose conf/ with these command-line overrides, build and check the settings; with
    `check_machine`, also the device, the world size, run.out_dir and the data's folders."""
    from conveyor.compose import compose_config
    return settings_from_config(compose_config(overrides), check_machine)


def settings_from_config(cfg: DictConfig, check_machine: bool = True) -> Settings:
    """The settings of a composed config (Hydra's node, if any, left aside); a ConveyorError
    names the first key that is unknown, missing, of the wrong type or out of range."""
    values = plain_values(OmegaConf.masked_copy(cfg, [key for key in cfg.keys() if key != "hydra"]))
    data = values.get("data", {})
    problem = declared_field(DataSettings, "name").metadata["rule"].problem("data.name", data.get("name"))
    if problem or not data.get("_target_"):  # the dataset decides which data.* keys exist
        problem = problem or choice(DATASETS).problem("data.name", data.get("name"))
    if problem:
        raise ConveyorError(problem)
    own = {"data": data_settings(data["name"], data.get("_target_")),
           "sampler": sampler_settings(values.get("sampler", {}))}
    check_known(values, [*known_keys(Settings), *(f"{name}.{k}" for name, cls in own.items() for k in known_keys(cls))])
    settings = build(Settings, values)
    if check_machine:
        from conveyor.trainer.config import check_machine as check
        check(settings)
        check_mode(settings)
    return settings


def check_mode(settings: Settings) -> None:
    """mode=compare's reference and figure need what conveyor installs only on request: said
    before the run's folder is made or any data read."""
    if settings.mode != "compare":
        return
    from conveyor.compare.reference import require_neighbor_sampling
    from conveyor.core.extras import require_extra
    require_neighbor_sampling()
    require_extra("matplotlib", "mode=compare (its figure, comparison.png)")


def plain_values(cfg: DictConfig) -> dict:
    """The config as plain values, interpolations resolved (a required value stays `???`, for
    its section to name)."""
    try:
        return OmegaConf.to_container(cfg, resolve=True, throw_on_missing=False)
    except OmegaConfBaseException as error:
        key = getattr(error, "full_key", None) or "the config"
        raise ConveyorError(f"{key} cannot be resolved: {one_line(str(error))}") from None


def check_known(values: dict, known: list) -> None:
    """Refuse a key no section declares, naming the close match (a model built by `_target_`
    takes any model.* key: its class's own arguments)."""
    for key in leaf_keys(values):
        if key not in known and not (key.startswith("model.") and values["model"].get("_target_")):
            raise ConveyorError(unknown_key_message(key, known))


def leaf_keys(values: dict, prefix: str = "") -> list:
    """Dotted keys of the leaves of nested dicts (a list is a leaf)."""
    keys = []
    for name, value in values.items():
        keys += leaf_keys(value, f"{prefix}{name}.") if isinstance(value, dict) else [prefix + name]
    return keys


def build(cls, values: dict):
    """A settings section of `values`: nested sections built first, so the first message is the
    innermost key's; a model's undeclared keys are its class's arguments."""
    if issubclass(cls, DataSettings):
        cls = data_settings(values.get("name"), values.get("_target_"))
    if issubclass(cls, SamplerSettings):
        cls = sampler_settings(values)
    fields = {f.name: f for f in declared(cls)}
    kwargs = {name: build(fields[name].default_factory, value) if fields[name].metadata.get("section") else value
              for name, value in values.items() if name in fields}
    if cls is ModelSettings:
        kwargs["arguments"] = {name: value for name, value in values.items() if name not in fields}
    return cls(**kwargs)


def declared_field(cls, name: str):
    return next(f for f in declared(cls) if f.name == name)
