"""A run's outputs: `metrics.json`, TensorBoard scalars and a log file, all in `run.out_dir`."""
from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

from torch.utils.tensorboard import SummaryWriter
from torch.utils.tensorboard.summary import hparams
from tqdm import tqdm

from conveyor.core.symlink_safety import own_folder
from conveyor.trainer.outputs.files import open_to_append, write_atomically
from conveyor.trainer.outputs.provenance import provenance

log = logging.getLogger("conveyor")


class RunRecorder:
    def __init__(self, out_dir, config: dict, history: list | None = None, tb_subdir: str = ""):
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.config = config
        self.epochs = list(history or [])
        # TensorBoard names its event files after the time, host and pid, which nobody can plant
        # ahead; a folder of its own planted as a link would still take them elsewhere.
        log_dir = own_folder(self.out_dir / tb_subdir) if tb_subdir else self.out_dir
        self.writer = SummaryWriter(log_dir=str(log_dir))

    def scalar(self, tag: str, value: float, step: int) -> None:
        self.writer.add_scalar(tag, value, step)

    def epoch(self, record: dict) -> None:
        self.epochs.append(record)
        step = record["epoch"]
        for key, value in record.items():
            if key != "epoch" and isinstance(value, (int, float)):
                self.writer.add_scalar(f"epoch/{key}", value, step)
        self.writer.flush()
        self.write(final=None)

    def write(self, final: dict | None) -> Path:
        payload = {"conveyor": provenance(), "config": self.config, "epochs": self.epochs, "final": final}
        return write_atomically(self.out_dir / "metrics.json", json.dumps(payload, indent=1).encode())

    def hparams(self, final: dict) -> None:
        """The run's config beside its final figures, for TensorBoard's HParams tab (one session
        per run folder). As `SummaryWriter.add_hparams`, but into this run's own event file
        rather than a new timestamped subfolder; the figures as `hparam/<name>` scalars."""
        metrics = {f"hparam/{k}": float(v) for k, v in final.items()
                   if isinstance(v, (int, float)) and not isinstance(v, bool)}
        for summary in hparams(hparam_values(self.config), metrics):
            self.writer.file_writer.add_summary(summary)
        step = int(final.get("epochs") or 0)
        for tag, value in metrics.items():
            self.writer.add_scalar(tag, value, step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


def hparam_values(config: dict, prefix: str = "") -> dict:
    """The config's leaves as HParams values: numbers, booleans and strings as they are, lists
    as their text ("[15, 10, 5]"), nulls as "null" (the plugin takes no None)."""
    values = {}
    for key, value in config.items():
        if isinstance(value, dict):
            values.update(hparam_values(value, f"{prefix}{key}."))
        elif isinstance(value, (bool, int, float, str)):
            values[f"{prefix}{key}"] = value
        else:
            values[f"{prefix}{key}"] = "null" if value is None else str(value)
    return values


class TqdmHandler(logging.StreamHandler):
    """Writes through `tqdm.write`, which clears the progress bar, prints the line and redraws the
    bar below it: log lines never break the bar."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            tqdm.write(self.format(record), file=sys.stderr)
        except Exception:  # noqa: BLE001 -- as logging.Handler: report, never raise
            self.handleError(record)


def setup_logging(out_dir) -> None:
    """Log to the console at INFO (the start-up summary, one line per epoch, the end) and to
    `out_dir/run.log` at DEBUG (also the pipeline's internals: processes, queues, pace decisions).
    Hydra's own logging is off: see conf."""
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    root = logging.getLogger("conveyor")
    root.setLevel(logging.DEBUG)
    root.disabled = False  # Hydra's logging config disables the loggers launch.py's check made
    file = RunLogHandler(open_to_append(Path(out_dir) / "run.log"))  # first: a refused log changes nothing
    for handler in list(root.handlers):
        root.removeHandler(handler)
        if isinstance(handler, RunLogHandler):  # an earlier run's log in this process (fit, compare)
            handler.close()
    fmt = logging.Formatter("[%(asctime)s] %(message)s", "%H:%M:%S")
    console = TqdmHandler()
    console.setLevel(logging.INFO)
    for handler in (console, file):
        handler.setFormatter(fmt)
        root.addHandler(handler)
    root.propagate = False
    root.disabled = False  # Hydra's logging config disables the loggers that existed before it


class RunLogHandler(logging.StreamHandler):
    """run.log, opened by files.open_to_append (never through a planted link), closed with it."""

    def close(self) -> None:
        with self.lock:
            if not self.stream.closed:
                self.stream.close()
        super().close()


class HeldRecords(logging.Handler):
    """The conveyor logger's records from before the run's log is open: the out_dir and
    checkpoint checks come first, so that a refused run writes nothing, and their warnings (a
    checkpoint that records no config or data fingerprint) are replayed into the log once it is
    open, or to whatever handles them when the run stops first."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records: list = []
        self.logger = logging.getLogger("conveyor")
        self.logger.addHandler(self)

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def replay(self) -> None:
        self.logger.removeHandler(self)
        for record in self.records:
            self.logger.handle(record)
        self.records = []

