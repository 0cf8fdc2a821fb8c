"""A "module.attribute" string as the object it names, imported when first used: how the registries
(samplers/registry.py, partition/datasets/registry.py) keep a member's module unloaded until it is
built, and how a `_target_` names your own class. A missing extra is named as such (core/extras.py)."""
from __future__ import annotations

import importlib
from typing import Callable, Optional

from conveyor.core.errors import ConveyorError
from conveyor.core.extras import EXTRAS, require_extra


def load_target(target: str, what: str):
    """The attribute `module.attr` names, imported; `what`: who names it, for the message."""
    module, _, attribute = str(target).rpartition(".")
    try:
        return getattr(importlib.import_module(module), attribute)
    except ModuleNotFoundError as error:
        if error.name in EXTRAS:
            require_extra(error.name, what)
        raise ConveyorError(f"{what}: {target} cannot be imported ({error}); give it as module.attribute whose "
                            f"module is importable (on PYTHONPATH).") from None
    except (ImportError, AttributeError, ValueError) as error:
        raise ConveyorError(f"{what}: {target} cannot be imported ({error}); give it as module.attribute whose "
                            f"module is importable (on PYTHONPATH).") from None


def registrar(registry: dict, name: str, target: Optional[str], make: Callable, attribute: str) -> Callable:
    """Register `make(name, target)` as `registry[name]`: now, where `target` ("module.attr") is
    given (a member kept unloaded until used), else as a decorator of the member, which also
    carries its entry as `attribute` (so `_target_` finds it)."""
    if target is not None:
        registry[name] = make(name, target)
        return lambda member: member

    def decorate(member):
        registry[name] = make(name, f"{member.__module__}.{member.__qualname__}")
        setattr(member, attribute, registry[name])
        return member
    return decorate


def registered(registry: dict, target: str, field: str, attribute: str, kind: str, decorator: str):
    """The entry of the member `target` ("module.attr", a `_target_`) names: the one it carries
    (its module registered it when imported), or the one registry entry built from it; refused
    by name otherwise. `field`: the entries' target field; `kind`: "sampler", "dataset"."""
    what = f"{'data' if kind == 'dataset' else kind}._target_"
    found = [entry for entry in registry.values() if getattr(entry, field) == target]
    entry = getattr(load_target(target, what), attribute, None) or (found[0] if len(found) == 1 else None)
    if entry is None:
        raise ConveyorError(f"{what}={target} is not a registered {kind}; decorate it with @{decorator}('name', ...) "
                            f"(docs/contributing.md, a {kind}).")
    return entry
