"""`conveyor partition ...`: offline partitioning with the run's own config.

    conveyor partition data=products num_parts=4
    conveyor partition data=synthetic data.scale=0.1 num_parts=8 partition=random sampler.fanouts=[10,10]

(`python launch.py partition ...` from a checkout, `python -m conveyor partition ...` where the
command is not on PATH.) An entry point, so it lives on top, beside the `conveyor` command: it
composes the config, which the partition stage below knows nothing of.

`num_parts=K` (required) and `force=true` (partition again even when matching parts exist) are
this command's own; every other argument is a Hydra override of conf/, as for `launch.py`: `data=`
and `data.*` pick the graph, `sampler.fanouts` sets the hops (L = its length), `partition=` the
method and `partition.*` its seed, splits and folder. The parts go where `launch.py
run.world_size=K` with the same overrides looks for them, so that run reuses them.
"""
from __future__ import annotations

from conveyor.core import ConveyorError

USAGE = ("usage: conveyor partition data=NAME num_parts=K [force=true] [data.KEY=VALUE ...] "
         "[sampler.fanouts=[15,10,5]] [partition=pagraph|random|metis] [partition.dir=DIR]")


def parse(tokens) -> tuple[int, bool, list]:
    num_parts, force, overrides = None, False, []
    for token in tokens:
        key, sep, value = token.partition("=")
        if key in ("-h", "--help"):
            raise ConveyorError(USAGE)
        if not sep:
            raise ConveyorError(f"argument {token!r} is not key=value. {USAGE}")
        if key == "num_parts":
            if not value.isdigit() or int(value) < 1:
                raise ConveyorError(f"num_parts must be an integer >= 1 (one part per data-parallel "
                                    f"rank), got {value!r}.")
            num_parts = int(value)
        elif key == "force":
            force = value.lower() in ("true", "1", "yes")
        else:
            overrides.append(token)
    if num_parts is None:
        raise ConveyorError(f"missing num_parts=K (the number of data-parallel ranks). {USAGE}")
    return num_parts, force, overrides


def settings_of(overrides: list):
    """The run's settings for these overrides: the partitions of `launch.py` with the same
    overrides and run.world_size=K are these (the machine is not checked: no run starts here)."""
    from conveyor.config import load_settings
    try:
        return load_settings(overrides, check_machine=False)
    except ConveyorError as error:
        raise ConveyorError(f"bad argument: {error} {USAGE}") from None


def main(tokens) -> int:
    num_parts, force, overrides = parse(tokens)
    settings = settings_of(overrides)
    from conveyor.partition.configured import make_partitions
    from conveyor.partition.partitioner import format_report

    directory, report, reused = make_partitions(settings.data, settings.partition, len(settings.sampler.fanouts),
                                                num_parts, force)
    print(format_report(report))
    print(f"reused the parts in {directory} (force=true to partition again)" if reused
          else f"wrote {num_parts} parts to {directory}")
    return 0
