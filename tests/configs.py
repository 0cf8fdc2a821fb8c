"""Compose the real Hydra config (conf/) for tests, as `launch.py` would with these overrides."""
from pathlib import Path

from conveyor.compose import compose_config

REPO = Path(__file__).resolve().parent.parent


def make_config(*overrides: str):
    return compose_config(["trainer.progress=false", "run.device=cpu", *overrides])
