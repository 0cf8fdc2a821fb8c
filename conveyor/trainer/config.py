"""What the settings' own declarations cannot check, because it depends on this machine: the
device, the world size, a writable out_dir, the data's folders, an importable model class, the
extra a chosen part needs (triton for sampler=fused: core/extras.py). The
entry point (conveyor/config.py) runs it once, after building the settings, before any data is
loaded."""
from __future__ import annotations

import contextlib
import errno
import os
import tempfile
from pathlib import Path

import torch

from conveyor.core import ConveyorError
from conveyor.core.device import resolve_device
from conveyor.core.errors import one_line
from conveyor.core.symlink_safety import path_kind
from conveyor.partition.datasets import check_root, dataset_entry
from conveyor.samplers import sampler_entry
from conveyor.trainer.models.sizes import check_model_size
from conveyor.trainer.outputs.outdir import owns_out_dir
from conveyor.trainer.settings import ModelSettings, TrainingSettings

CHECKPOINTS = "checkpoints"  # the folder trainer/outputs/checkpoint.py writes into
PROBE_TRIES = 20  # another rank's probe may remove the folder this one is writing in, each time


def check_typed(settings: TrainingSettings) -> None:
    """A typed graph (data=mag, synthetic_mag) trains in one process: refused before any work."""
    if not dataset_entry(settings.data.name, settings.data._target_).typed:
        return
    if settings.run.world_size > 1:
        raise ConveyorError(f"data={settings.data.name} is a typed graph, which trains in one process for now (its "
                            f"partitions are not typed); set run.world_size=1.")


def check_machine(settings: TrainingSettings) -> None:
    device = resolve_device(settings.run.device)
    check_typed(settings)
    check_world_size(settings.run.world_size, device)
    if owns_out_dir():  # rank 0 only: ranks probing a fresh folder at once would race
        check_out_dir(Path(settings.run.out_dir))
    classes, features = known_widths(settings.data)
    check_model_size(settings.model.hidden, classes, len(settings.sampler.fanouts), device, features,
                     copies=settings.run.world_size if device.type == "cpu" else 1)
    check_data_paths(settings.data)
    check_model_target(settings.model)
    check_sampler(settings, device)


def check_sampler(settings: TrainingSettings, device) -> None:
    """What the sampler is asked to draw, asked of its registry entry (samplers/registry.py), its
    extra included: named here, not in the sampler process."""
    entry = sampler_entry(settings.sampler.name, settings.sampler._target_, device)
    typed = dataset_entry(settings.data.name, settings.data._target_).typed
    entry.check(typed=typed, draws=settings.sampler.draws, where=f" (data={settings.data.name})")
    if settings.task.name == "link" and settings.task.split == "temporal":
        from conveyor.trainer.typed_link_split import check_temporal_sampler
        check_temporal_sampler(settings, device)


def known_widths(data) -> tuple:
    """The data's classes and feature width where known before it loads (its registry entry's:
    synthetic's settings, Planetoid's fixed sizes, a custom x.npy's header), else None: the first
    layer's weights (features x hidden) are most of a wide model's."""
    return dataset_entry(data.name, data._target_).known_widths(data)


def check_world_size(world_size: int, device: torch.device) -> None:
    """One rank per GPU, or per CPU core: more ranks than that only thrash (and each holds a
    copy of the model and a partition, so memory grows with them)."""
    if device.type == "cuda":
        most, what = torch.cuda.device_count(), "CUDA device(s)"
    else:
        most, what = len(os.sched_getaffinity(0)), "CPU core(s) available to this process"
    if world_size > most:
        raise ConveyorError(f"run.world_size={world_size} but this machine has {most} {what}, one "
                            f"per rank; lower run.world_size to at most {most}.")


def check_out_dir(out_dir: Path) -> None:
    """Refuse an out_dir the run could not write its checkpoints into, before an epoch is lost."""
    check_name_lengths(out_dir)  # first: a longer name fails every look at the path with an OSError
    try:  # a symlink loop reads as "does not exist" below, then fails the lock and Hydra's mkdir
        out_dir.resolve(strict=False)
    except (OSError, RuntimeError) as error:  # RuntimeError before Python 3.13, ELOOP after
        raise ConveyorError(f"run.out_dir={out_dir} cannot be followed ({error}); fix or remove "
                            f"the symbolic link, or choose another run.out_dir.") from None
    for path in (out_dir, out_dir / CHECKPOINTS):
        if path_kind(path) == "other":  # one stat: a rank probing the fresh folder may remove it meanwhile
            raise ConveyorError(f"run.out_dir: {path} exists and is not a directory; choose another "
                                f"run.out_dir, or move the file away.")
    folders = (out_dir / CHECKPOINTS, out_dir, *out_dir.absolute().parents)
    existing, missing, error = probe_write(folders)
    if error is None:
        return
    attempt = f"making {missing}" if missing else f"writing a file in {existing}"
    special = (" (the file system there takes no new folders, as /proc does)"
               if error.errno == errno.ENOENT else "")
    raise ConveyorError(f"run.out_dir={out_dir} is not writable: {attempt} fails with "
                        f"{error.strerror or error} (errno {error.errno}){special}; choose a "
                        f"run.out_dir you can write to, or fix the permissions of {existing}.") from None


def check_name_lengths(out_dir: Path) -> None:
    """Refuse a folder name longer than the file system it falls on takes (NAME_MAX, 255 bytes
    on most), each measured against the deepest folder of the path that exists."""
    folder = Path(out_dir.absolute().anchor)
    most = os.pathconf(folder, "PC_NAME_MAX")
    for name in out_dir.absolute().parts[1:]:
        if len(os.fsencode(name)) > most:
            raise ConveyorError(f"run.out_dir={out_dir} has a folder name of {len(os.fsencode(name))} "
                                f"bytes ({name[:40]}...), but the file system at {folder} takes names "
                                f"of at most {most} bytes; choose a shorter run.out_dir.")
        folder = folder / name
        if folder.is_dir():
            most = os.pathconf(folder, "PC_NAME_MAX")


def probe_write(folders: tuple) -> tuple:
    """(existing, missing, error): the deepest of `folders` that exists, the one to make in it,
    and the OSError writing there meets (None: writable). Tried again when another run's probe
    (torchrun agents start together) removed that folder meanwhile."""
    for _ in range(PROBE_TRIES):
        existing = next(p for p in folders if path_kind(p) != "missing")
        missing = folders[folders.index(existing) - 1] if existing != folders[0] else None
        try:  # a real write: permission bits do not tell root, a read-only mount or a full quota
            try_write(existing, missing)
            return existing, missing, None
        except OSError as caught:
            error = caught
            if not isinstance(error, FileNotFoundError):  # vanished in between (it was there): again
                break
    return existing, missing, error


def try_write(existing: Path, missing: Path | None) -> None:
    """Make the folder `missing` in `existing` as the run will, and remove it again; or, with
    every folder there, write a file into `existing`. Raises the OSError the run would meet."""
    if missing is None:
        with tempfile.TemporaryFile(dir=existing):
            return
    try:
        missing.mkdir()
    except FileExistsError:  # made meanwhile (another run starting): writable
        return
    with contextlib.suppress(OSError):  # another run put its lock in meanwhile: it is theirs
        missing.rmdir()


def check_data_paths(data) -> None:
    """The folders the data is read from or kept in, named with what they must be before any
    work (the loader reads them only after the out_dir is set up), and what its registry entry
    checks first (room for a generated graph, OGB's extra, custom's folder)."""
    entry = dataset_entry(data.name, data._target_)
    if data.root is not None or entry.root:  # custom and memory read no root
        check_root(data.root if data.root is not None else data.root_folder())
    entry.check_settings(data)


def check_model_target(model: ModelSettings) -> None:
    """Name a `model._target_` that does not import before the data loads: the model itself is
    built after it (trainer/models/adapter.py), as it needs the feature and class counts."""
    if model._target_ is None:
        return
    from hydra.utils import get_object  # a class, or a function that returns a module
    try:
        get_object(str(model._target_))
    except Exception as error:  # Hydra's wrapper; its cause says what failed to import
        reason = one_line(str(error.__cause__ or error))
        raise ConveyorError(f"model._target_={model._target_} cannot be imported ({reason}) Give "
                            f"a class as module.Class, e.g. torch_geometric.nn.GAT, whose module "
                            f"is importable (on PYTHONPATH).") from None
