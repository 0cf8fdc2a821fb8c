"""The real run settings for tests, as `launch.py` builds them with these overrides: conf/
composed, then built and checked by conveyor/config.py."""
from pathlib import Path

from conveyor.config import load_settings

REPO = Path(__file__).resolve().parent.parent


def make_config(*overrides: str):
    """The `Settings` of a run with these overrides (checked: bad input raises its ConveyorError)."""
    return load_settings(["trainer.progress=false", "run.device=cpu", *overrides])
