"""`trainer.lr_schedule`: the learning rate per epoch, by `torch.optim.lr_scheduler`.

- `none`: `trainer.lr` throughout.
- `cosine`: `CosineAnnealingLR` from `trainer.lr` down to `trainer.lr_min` over `trainer.epochs`.
- `step`: `StepLR`, times `trainer.lr_gamma` every `trainer.lr_step_size` epochs.
- `plateau`: `ReduceLROnPlateau` on the validation accuracy, times `trainer.lr_gamma` after
  `trainer.lr_patience` evaluations without a better one, never below `trainer.lr_min`.

The scheduler steps once per epoch, after its evaluation (plateau: only after an evaluation), so
an epoch's record holds the lr its batches used. Its state goes into the checkpoint.
"""
from __future__ import annotations

from torch.optim import lr_scheduler

from conveyor.trainer.settings import SCHEDULES, TrainerSettings

__all__ = ["SCHEDULES", "build_scheduler", "step_scheduler"]


def build_scheduler(trainer: TrainerSettings, optimizer):
    """The scheduler `trainer.lr_schedule` names over `optimizer`, or None for `none` (the
    settings refuse a cosine or plateau schedule whose lr_min is not below lr)."""
    if trainer.lr_schedule == "cosine":
        return lr_scheduler.CosineAnnealingLR(optimizer, T_max=trainer.epochs, eta_min=trainer.lr_min)
    if trainer.lr_schedule == "step":
        return lr_scheduler.StepLR(optimizer, step_size=trainer.lr_step_size, gamma=trainer.lr_gamma)
    if trainer.lr_schedule == "plateau":  # threshold 0: "better" is strictly higher, as for the best checkpoint
        return lr_scheduler.ReduceLROnPlateau(optimizer, mode="max", factor=trainer.lr_gamma,
                                              patience=trainer.lr_patience, threshold=0.0, min_lr=trainer.lr_min)
    return None


def step_scheduler(scheduler, record: dict, watched: str = "val_acc") -> None:
    """After the epoch of `record` (and its evaluation, if any); plateau watches `watched`."""
    if scheduler is None:
        return
    if isinstance(scheduler, lr_scheduler.ReduceLROnPlateau):
        if watched in record:
            scheduler.step(record[watched])
    else:
        scheduler.step()
