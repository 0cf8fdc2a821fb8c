"""Compose the real Hydra config (conf/) for tests, as `launch.py` would with these overrides."""
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

REPO = Path(__file__).resolve().parent.parent


def make_config(*overrides: str):
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base=None):
        return compose(config_name="config", overrides=["trainer.progress=false", "run.device=cpu", *overrides])
