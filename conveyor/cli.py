"""The `conveyor` command (`python launch.py` from a checkout, `python -m conveyor`):
`conveyor model=sage data=products ...` composes the Hydra config and hands it to the trainer.

Bad input (unknown names, a missing dataset, invalid keys) ends in one paragraph on stderr and
exit code 2, not a traceback; `--help` lists the groups and every key with its default and meaning.
Ctrl-C (SIGINT) and SIGTERM stop a run cleanly (stage processes too), keeping its last
checkpoint; the exit code is 128 + the signal number.
"""
import signal
import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

from conveyor.partition import ConveyorError
from conveyor.partition.compose import (  # also registers ${run_id:}, which run.out_dir uses
    CONF,
    compose_config,
    target_added,
)

HELP_FLAGS = ("--help", "-h")


def check_before_hydra(overrides: list) -> None:
    """Compose and check the config before Hydra does: its own errors (an unknown group option
    or key, an override it cannot parse) and every bad value end in one paragraph and exit 2,
    before Hydra creates run.out_dir and before any data is loaded."""
    if any(arg.startswith("-") for arg in overrides):
        return  # --cfg, --hydra-help, -m ...: Hydra's own flags
    from conveyor.trainer.config import check_config
    try:
        check_config(compose_config(overrides))
    except ConveyorError as error:
        fail(error)


def print_help(overrides: list) -> None:
    """`--help`, with the options and defaults the other arguments choose (`data=cora --help`)."""
    from .usage import help_text
    try:
        print(help_text([arg for arg in overrides if arg not in HELP_FLAGS]), flush=True)
    except ConveyorError as error:
        fail(error)
    except BrokenPipeError:  # `conveyor --help | head`: the reader has all it wanted
        sys.stdout = None  # nothing left to flush at exit, so no second error there


def fail(error: ConveyorError) -> None:
    # One paragraph even where a message quotes a library's multi-line text.
    print(f"conveyor: error: {' '.join(str(error).split())}", file=sys.stderr)
    sys.exit(2)


@hydra.main(config_path=str(CONF), config_name="config", version_base=None)
def run_config(cfg: DictConfig) -> None:
    from conveyor.trainer.checkpoint import CHECKPOINT
    from conveyor.trainer.interrupts import stop_on_signals
    from conveyor.trainer.modes import run

    stop_on_signals()
    try:
        run(cfg)
    except ConveyorError as error:
        fail(error)
    except KeyboardInterrupt as stop:
        name = str(stop) if str(stop) in signal.Signals.__members__ else "SIGINT"
        kept = (Path(cfg.run.out_dir) / CHECKPOINT).exists()
        print(f"conveyor: stopped by {name}; " + (
            f"the last complete checkpoint in {cfg.run.out_dir} is kept: continue with "
            f"run.resume=true." if kept else "no epoch had finished, so there is no checkpoint."),
            file=sys.stderr)
        sys.exit(128 + signal.Signals[name].value)


def main() -> None:
    """The console command: the arguments are Hydra overrides (GROUP=OPTION, KEY=VALUE)."""
    args = sys.argv[1:]
    if any(arg in HELP_FLAGS for arg in args):
        print_help(args)
        return
    check_before_hydra(args)
    sys.argv[1:] = target_added(args)  # what Hydra's own compose reads: as checked
    run_config()


if __name__ == "__main__":
    main()
