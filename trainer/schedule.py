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

from conveyor.partition import ConveyorError

SCHEDULES = ("none", "cosine", "step", "plateau")


def check_schedule(trainer_cfg) -> None:
    """What the schema's per-key ranges cannot see: cosine and plateau go down to lr_min."""
    name, lr, lr_min = str(trainer_cfg.lr_schedule), float(trainer_cfg.lr), float(trainer_cfg.lr_min)
    if name in ("cosine", "plateau") and lr_min >= lr:
        raise ConveyorError(f"trainer.lr_schedule={name} lowers the lr from trainer.lr={lr:g} to "
                            f"trainer.lr_min={lr_min:g}, which is not lower; set trainer.lr_min "
                            f"below trainer.lr (e.g. 0).")


def build_scheduler(trainer_cfg, optimizer):
    """The configured scheduler over `optimizer`, or None for `none`."""
    name = str(trainer_cfg.lr_schedule)
    if name == "cosine":
        return lr_scheduler.CosineAnnealingLR(optimizer, T_max=int(trainer_cfg.epochs),
                                              eta_min=float(trainer_cfg.lr_min))
    if name == "step":
        return lr_scheduler.StepLR(optimizer, step_size=int(trainer_cfg.lr_step_size),
                                   gamma=float(trainer_cfg.lr_gamma))
    if name == "plateau":  # threshold 0: "better" is strictly higher, as for the best checkpoint
        return lr_scheduler.ReduceLROnPlateau(optimizer, mode="max", factor=float(trainer_cfg.lr_gamma),
                                              patience=int(trainer_cfg.lr_patience), threshold=0.0,
                                              min_lr=float(trainer_cfg.lr_min))
    return None


def step_scheduler(scheduler, record: dict) -> None:
    """After the epoch of `record` (and its evaluation, if any)."""
    if scheduler is None:
        return
    if isinstance(scheduler, lr_scheduler.ReduceLROnPlateau):
        if "val_acc" in record:
            scheduler.step(record["val_acc"])
    else:
        scheduler.step()
