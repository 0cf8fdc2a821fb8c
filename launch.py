"""`python launch.py model=sage data=products ...`: compose the Hydra config, hand it to the trainer.

Bad input (unknown names, a missing dataset, invalid keys) ends in one paragraph on stderr and
exit code 2, not a traceback; `python launch.py --help` lists the groups and keys.
Ctrl-C (SIGINT) and SIGTERM stop a run cleanly (stage processes too), keeping its last
checkpoint; the exit code is 128 + the signal number.
"""
import signal
import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

import partition.compose  # noqa: F401 -- registers ${run_id:}, which run.out_dir's default uses
from partition import ConveyorError


def check_before_hydra(overrides: list) -> None:
    """Compose and check the config before Hydra does: its own errors (an unknown group option
    or key, an override it cannot parse) and every bad value end in one paragraph and exit 2,
    before Hydra creates run.out_dir and before any data is loaded."""
    if any(arg.startswith("-") for arg in overrides):
        return  # --help, --cfg, -m ...: Hydra's own flags
    from partition.compose import compose_config
    from trainer.config import check_config
    try:
        check_config(compose_config(overrides))
    except ConveyorError as error:
        print(f"conveyor: error: {error}", file=sys.stderr)
        sys.exit(2)


@hydra.main(config_path="conf", config_name="config", version_base=None)
def main(cfg: DictConfig) -> None:
    from trainer.checkpoint import CHECKPOINT
    from trainer.interrupts import stop_on_signals
    from trainer.modes import run

    stop_on_signals()
    try:
        run(cfg)
    except ConveyorError as error:
        print(f"conveyor: error: {error}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt as stop:
        name = str(stop) if str(stop) in signal.Signals.__members__ else "SIGINT"
        kept = (Path(cfg.run.out_dir) / CHECKPOINT).exists()
        print(f"conveyor: stopped by {name}; " + (
            f"the last complete checkpoint in {cfg.run.out_dir} is kept: continue with "
            f"run.resume=true." if kept else "no epoch had finished, so there is no checkpoint."),
            file=sys.stderr)
        sys.exit(128 + signal.Signals[name].value)


if __name__ == "__main__":
    check_before_hydra(sys.argv[1:])
    main()
