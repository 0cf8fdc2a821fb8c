"""Compose conf/ (`conveyor.conf`) as the `conveyor` command does, Hydra's own errors as
one-paragraph ConveyorErrors.

Every key's default is its declaration's (the stages' `settings.py`): registered here in Hydra's
ConfigStore, as `conveyor_defaults` (the primary config's first default: conf/config.yaml) and,
for the datasets with options of their own, `<dataset>_settings` in group `data` (the first
default of conf/data/<dataset>.yaml). So conf/'s option files hold only what each option changes.
The nodes are plain values, not typed structured configs: OmegaConf's typed nodes would convert
silently ('3' to 3, 1 to 1.0, 'yes' to true) and refuse in their own words; the declarations
refuse without converting, naming the key, the range and the fix (conveyor/config.py).

Hydra reports an unknown group option, an unknown key or an override it cannot parse in ten lines
ending in a search path; every entry point (`conveyor` and `launch.py`, `conveyor partition`,
`conveyor.fit`, the tests) composes through here, so the user reads one paragraph naming the
option or key and the choices instead. The entry points sit on top of the stages: nothing below
them composes a config or knows where conf/ lies.
"""
from __future__ import annotations

import os
import re
import threading
from pathlib import Path
from typing import Sequence

from omegaconf import OmegaConf

import conveyor.conf
from conveyor.core.errors import ConveyorError, did_you_mean, one_line
from conveyor.core.fields import defaults, known_keys, unknown_key_message
from conveyor.partition.settings import COMMON, DATA_SETTINGS
from conveyor.samplers.settings import REGISTRY, SamplerSettings
from conveyor.settings import Settings

HYDRA_HELD = threading.RLock()  # held while Hydra's global instance composes a config

# The Hydra YAML: the package conveyor.conf, wherever it was imported from (the wheel's
# conveyor/conf/, a checkout's conf/).
CONF = Path(conveyor.conf.__file__).resolve().parent
TARGETS = ("model._target_", "sampler._target_")  # a class, given on the command line with or without `+`


def run_id() -> str:
    """`${run_id:}` in run.out_dir's default: this process's id, or under torchrun the
    launcher's (the same for every rank of one job), so runs started in one second differ."""
    return str(os.getppid() if "LOCAL_RANK" in os.environ else os.getpid()) + sweep_job()


def sweep_job() -> str:
    """`-N` for job N of a Hydra `-m` sweep, whose jobs share one process (and often a second)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode
    if not HydraConfig.initialized() or HydraConfig.get().mode != RunMode.MULTIRUN:
        return ""
    return f"-{HydraConfig.get().job.num}"


OmegaConf.register_new_resolver("run_id", run_id, replace=True, use_cache=True)


def register_defaults() -> None:
    """The declared defaults, where conf/'s YAML finds them (see the module doc)."""
    from hydra.core.config_store import ConfigStore

    store = ConfigStore.instance()
    store.store(name="conveyor_defaults", node=defaults(Settings))
    for name, cls in DATA_SETTINGS.items():
        own = {key: value for key, value in defaults(cls).items() if key not in COMMON}
        store.store(group="data", name=f"{name}_settings", node=own)
    for name, entry in REGISTRY.items():  # a sampler's own options (samplers/registry.py)
        if entry.options is not None:
            shared = defaults(SamplerSettings)  # its own keys, and the shared ones it defaults otherwise
            own = {key: value for key, value in defaults(entry.options).items()
                   if key not in shared or shared[key] != value}
            store.store(group="sampler", name=f"{name}_settings", node=own)


register_defaults()


def compose_config(overrides: Sequence[str], with_hydra: bool = False):
    """The composed run config (a DictConfig) for these command-line overrides; `with_hydra`
    keeps Hydra's own node too (`hydra.runtime.choices`: the option chosen in each group)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    check_group_choices(overrides)
    with HYDRA_HELD:  # Hydra's one global instance: two threads composing at once (two fit()s) would clash
        GlobalHydra.instance().clear()
        try:
            with initialize_config_dir(config_dir=str(CONF), version_base=None):
                return compose(config_name="config", overrides=target_added(overrides),
                               return_hydra_config=with_hydra)
        except (HydraException, OmegaConfBaseException) as error:
            raise ConveyorError(explain_hydra_error(error)) from None
        finally:
            GlobalHydra.instance().clear()


def check_group_choices(overrides: Sequence[str]) -> None:
    """A config group takes one option's name: `data=[1]` or `model={a:1}` would reach Hydra's
    defaults list, which fails on it with a TypeError traceback."""
    for arg in overrides:
        group, _, value = arg.lstrip("+~").partition("=")
        if (CONF / group).is_dir() and value[:1] in ("[", "{"):
            choices = sorted(path.stem for path in (CONF / group).glob("*.yaml"))
            raise ConveyorError(f"cannot set {group}={value}: {group} takes the name of one option, "
                                f"one of {', '.join(choices)} (e.g. {group}={choices[0]}); set its "
                                f"keys one at a time, e.g. {group}.KEY=VALUE.")


def target_added(overrides: Sequence[str]) -> list[str]:
    """The overrides with `model._target_=X`, `+model._target_=X` or `++model._target_=X` as
    `++model._target_=X` (add or replace; `sampler._target_` likewise): PyG users write it with or
    without Hydra's `+`, as README does. The `conveyor` command passes its arguments through here to Hydra as well."""
    return [f"++{arg.lstrip('+')}" if arg.lstrip("+").startswith(tuple(f"{t}=" for t in TARGETS)) else arg
            for arg in overrides]


def explain_hydra_error(error: Exception) -> str:
    from hydra.errors import MissingConfigException, OverrideParseException

    if isinstance(error, MissingConfigException) and error.missing_cfg_file and error.options:
        group, _, option = str(error.missing_cfg_file).rpartition("/")
        choices = sorted(error.options)
        return (f"unknown {group} option {option!r}{did_you_mean(option, choices)}; choose one of "
                f"{', '.join(choices)} (e.g. {group}={choices[0]}).")
    if isinstance(error, OverrideParseException):
        return (f"cannot parse the override {error.override!r}: {one_line(error.message)} Write "
                f"KEY=VALUE, quoting a value with spaces or brackets, e.g. sampler.fanouts=[10,5].")
    unknown = re.match(r"Could not override '([^']+)'", str(error))
    if unknown:  # the cause names the key itself: model.a in `model={a:1}`, not model
        key = getattr(error.__cause__, "full_key", None) or unknown.group(1)
        return unknown_key_message(key, _default_keys())
    merging = re.match(r"Error merging override [+~]*([^=]+)=(.*)", str(error), re.DOTALL)
    if merging:  # a value of another shape than the key's: a dict for a list, a list for a group
        return shape_message(merging.group(1), merging.group(2), error.__cause__)
    return f"bad command-line argument: {one_line(str(error))}"


def shape_message(key: str, value: str, cause) -> str:
    """`key=value` where the value cannot take the place of the key's default: say what the
    default is, so the form to write is plain."""
    default = OmegaConf.select(OmegaConf.create(defaults(Settings)), key, default=None)
    if OmegaConf.is_list(default):
        items = OmegaConf.to_container(default)
        kind = ("a list of positive integers" if items and all(type(v) is int and v > 0 for v in items)
                else "a list")
        fix = f"{key} takes {kind}, e.g. {key}=[{','.join(map(str, items))}] (its default)"
    elif OmegaConf.is_dict(default):
        fix = (f"{key} is a group of keys ({', '.join(default.keys())}); set them one at a time, "
               f"e.g. {key}.{next(iter(default.keys()))}=VALUE")
    else:  # no shape to name: OmegaConf's own words
        fix = f"{one_line(str(cause)).rstrip('.')}; give {key} a value of the form of its default ({default!r})"
    return f"cannot set {key}={value}: {fix}."


def _default_keys() -> list[str]:
    """Every key of every section and dataset, for close matches."""
    return known_keys(Settings) + [f"data.{key}" for cls in DATA_SETTINGS.values() for key in known_keys(cls)
                                   if key not in COMMON]
