"""The `conveyor` command (`python launch.py` from a checkout, `python -m conveyor`):
`conveyor model=sage data=products ...` composes the Hydra config once, builds the run's settings
from it and checks them once (conveyor/config.py), locks `run.out_dir`, and hands the settings to
the trainer; `conveyor partition ...` makes partitions
offline (conveyor/partition_command.py); `conveyor prepare planetoid [--root DIR]` prepares Cora,
CiteSeer and PubMed offline (conveyor/partition/datasets/planetoid_files.py).

Bad input (unknown names, a missing dataset, invalid keys) ends in one paragraph on stderr and
exit code 2, not a traceback, before any folder is made or data loaded; `--help` lists the groups
and every key with its default and meaning. Ctrl-C (SIGINT) and SIGTERM stop a run cleanly (stage
processes too), keeping its last checkpoint; the exit code is 128 + the signal number.

Hydra's own flags (`-m` sweeps, `--cfg job`, `--hydra-help`, ...) hand the arguments to Hydra's
main: each job it starts is then checked and locked as it begins.
"""
import signal
import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

from conveyor.compose import CONF, compose_config, target_added  # also registers ${run_id:}, which run.out_dir uses
from conveyor.config import settings_from_config
from conveyor.core import ConveyorError
from conveyor.core.errors import ProcessDied
from conveyor.settings import Settings

HELP_FLAGS = ("--help", "-h")
HYDRA_OUTPUT = ".hydra"  # where a run keeps its composed config, as Hydra's own runs do


def main() -> None:
    """The console command: the arguments are Hydra overrides (GROUP=OPTION, KEY=VALUE)."""
    args = sys.argv[1:]
    if args[:1] == ["partition"]:
        partition(args[1:])
    elif args[:1] == ["prepare"]:
        prepare(args[1:])
    elif any(arg in HELP_FLAGS for arg in args):
        print_help(args)
    elif any(arg.startswith("-") for arg in args):  # -m, --cfg, --hydra-help, ...: Hydra's own
        sys.argv[1:] = target_added(args)
        hydra_job()
    else:
        composed = compose_or_fail(args)
        settings = checked(composed)
        try:
            save_config(settings, composed.hydra, args)
        except ConveyorError as error:  # a link planted in .hydra/, a full disk
            fail(error)
        start(settings)


def compose_or_fail(overrides: list) -> DictConfig:
    try:
        return compose_config(overrides, with_hydra=True)
    except ConveyorError as error:
        fail(error)


def checked(cfg: DictConfig) -> Settings:
    """The run's settings, built and checked once (conveyor/config.py; a default run.out_dir is
    resolved here, once, so every later reader names the same folder), with run.out_dir locked:
    before any folder is made or data loaded."""
    from conveyor.trainer.outputs.outdir import lock_out_dir, owns_out_dir
    try:
        settings = settings_from_config(cfg)
        if owns_out_dir():  # one run per run.out_dir (trainer/outputs/outdir.py), before anything is written there
            lock_out_dir(settings.run.out_dir)
    except ConveyorError as error:
        fail(error)
    return settings


def save_config(settings: Settings, hydra_node: DictConfig, overrides: list) -> None:
    """`.hydra/` in run.out_dir, as Hydra's own runs write it: the run's config (its settings,
    resolved), Hydra's node (the option chosen in each group) and the overrides given."""
    from conveyor.core.symlink_safety import own_folder
    from conveyor.trainer.outputs.files import write_atomically
    from conveyor.trainer.outputs.outdir import owns_out_dir
    if not owns_out_dir():
        return
    folder = own_folder(Path(settings.run.out_dir).expanduser() / HYDRA_OUTPUT)
    for name, tree in (("config.yaml", settings.to_dict()), ("hydra.yaml", {"hydra": hydra_node}),
                       ("overrides.yaml", list(overrides))):
        write_atomically(folder / name, OmegaConf.to_yaml(tree).encode())  # never through a planted link


@hydra.main(config_path=str(CONF), config_name="config", version_base=None)
def hydra_job(cfg: DictConfig) -> None:
    """One job of a run Hydra's own flags started (e.g. each run of a `-m` sweep): Hydra composed
    its config; it is checked and locked as the job starts."""
    start(checked(cfg))


def start(settings: Settings) -> None:
    """Run the checked settings: ConveyorErrors as one paragraph, a stop signal as its exit code.
    The graph's loading and the stage processes' fork server start first, beside the trainer's
    imports (PyG's above all: trainer/early.py)."""
    from conveyor.trainer.early import begin
    from conveyor.trainer.loop.interrupts import stop_on_signals
    from conveyor.trainer.outputs.checkpoint import CHECKPOINT
    from conveyor.trainer.outputs.outdir import remove_if_refused

    stop_on_signals()
    out_dir = settings.run.out_dir
    try:
        begin(settings)
        from conveyor.modes import run
        run(settings)
    except ConveyorError as error:
        remove_if_refused(out_dir)  # refused before its first checkpoint: nothing left behind
        fail(error)
    except ProcessDied as error:  # a stage or a rank killed: its message is all there is
        print(f"conveyor: error: {' '.join(str(error).split())}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt as stop:
        name = str(stop) if str(stop) in signal.Signals.__members__ else "SIGINT"
        kept = (Path(out_dir) / CHECKPOINT).exists()
        print(f"conveyor: stopped by {name}; " + (
            f"the last complete checkpoint in {out_dir} is kept: continue with "
            f"run.resume=true." if kept else "no epoch had finished, so there is no checkpoint."),
            file=sys.stderr)
        sys.exit(128 + signal.Signals[name].value)


def partition(tokens: list) -> None:
    from conveyor.partition_command import main as partition_main
    try:
        sys.exit(partition_main(tokens))
    except ConveyorError as error:
        fail(error)


def prepare(tokens: list) -> None:
    from conveyor.partition.datasets.planetoid_files import main as prepare_main
    try:
        sys.exit(prepare_main(tokens))
    except ConveyorError as error:
        fail(error)


def print_help(overrides: list) -> None:
    """`--help`, with the options and defaults the other arguments choose (`data=cora --help`)."""
    from conveyor.usage import help_text
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


if __name__ == "__main__":
    main()
