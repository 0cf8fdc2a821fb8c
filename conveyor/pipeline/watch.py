"""Faults and stalls of the stage processes, seen from the trainer's process (docs/design.md §4,
faults): a stage that raises ends the run with its traceback, one that dies without a word with
how it died, and a pipeline where every stage is alive and ready but no batch comes is stopped
after `pipeline.stall_timeout_s`, with a warning every minute before.
"""
from __future__ import annotations

import logging
import time
from typing import Dict, Optional

from conveyor.core import ConveyorError
from conveyor.core.errors import ProcessDied
from conveyor.pipeline.processes import StageProcesses
from conveyor.pipeline.settings import STAGES
from conveyor.pipeline.shutdown import describe_exit

log = logging.getLogger("conveyor")

STALL_WARN_S = 60.0
DEATH_GRACE_S = 2.0  # how long a stage's death or error report may lag behind its effects


class PipelineError(RuntimeError):
    """A stage process failed or stalled; the message says which, and holds its traceback."""


class StageDied(PipelineError, ProcessDied):
    """A stage process was killed, or exited without reporting an error."""


class StageWatch:
    """Reads the stages' events (ready, log lines, errors) and raises for a failed, dead or
    stalled stage."""

    def __init__(self, stages: StageProcesses, stall_timeout_s: Optional[float]):
        self.stages, self.stall_timeout_s = stages, stall_timeout_s
        self.ready: Dict[str, float] = {}  # stage -> seconds from the start to its "ready"

    def check(self) -> None:
        """Raise a PipelineError (or a stage's ConveyorError) if a stage failed or died. A stage
        that died without a word (killed) is the cause of whatever the other one then reports."""
        errors, dead = self.read_events(), self.stages.dead()
        if not errors and not dead:
            return
        deadline = time.perf_counter() + DEATH_GRACE_S
        while set(dead) - set(errors) and time.perf_counter() < deadline:
            time.sleep(0.02)  # a dying stage's traceback may still be on the way
            errors.update(self.read_events())
        silent = [name for name in dead if name not in errors]
        if silent:
            proc = self.stages.processes[silent[0]]
            raise StageDied(
                f"pipeline: the {silent[0]} stage (process {proc.pid}) {describe_exit(proc.exitcode)} without "
                f"reporting an error; the run is stopped. Its own output above, if any, says more.")
        stage, (pid, type_name, is_conveyor_error, message, trace) = next(iter(errors.items()))
        if is_conveyor_error:  # bad input found by a stage: the user's message, as is
            raise ConveyorError(message)
        raise PipelineError(
            f"pipeline: the {stage} stage (process {pid}) raised {type_name}: {message}\n\n"
            f"Its traceback:\n{trace.rstrip()}\n\nThe run is stopped. pipeline=serial runs the "
            f"same stages in this process, which may make the cause easier to debug.")

    def check_after_failure(self) -> None:
        """After receiving from a queue failed (unpickling, most likely because the sender just
        died): give the kernel a moment to reap the sender, so the stage's own report wins."""
        deadline = time.perf_counter() + DEATH_GRACE_S
        while time.perf_counter() < deadline:
            self.check()
            time.sleep(0.02)

    def read_events(self) -> dict:
        """Log the stages' news; return the errors they reported, by stage."""
        errors, events = {}, self.stages.events
        while not events.empty():
            kind, stage, *payload = events.get()
            if kind == "ready":
                pid, what = payload
                self.ready[stage] = time.perf_counter() - self.stages.started
                log.debug("pipeline: %s (pid %d) ready after %.1fs: %s", stage, pid, self.ready[stage], what)
            elif kind == "log":
                log.debug("pipeline %s: %s", stage, payload[0])
            elif kind == "error":
                errors[stage] = payload
        return errors

    def check_stall(self, wait_start: float) -> None:
        """Stop the run after stall_timeout_s without a batch, counted from when the trainer began
        to wait or the last stage became ready: a stage still starting is not stalled."""
        limit = self.stall_timeout_s
        if limit is None or len(self.ready) < len(STAGES):
            return
        waited = time.perf_counter() - max(wait_start, self.stages.started + max(self.ready.values()))
        if waited > float(limit):
            raise PipelineError(f"pipeline: no batch for {waited:.0f}s although every stage is alive "
                                f"({self.state()}); the run is stopped (pipeline.stall_timeout_s={limit}).")

    def warn_stall(self, waited: float) -> None:
        log.warning("pipeline: waiting for a batch for %.0fs (%s)", waited, self.state())

    def state(self) -> str:
        c = self.stages.control.snapshot()
        return (f"sampled {c['sampled']}, loaded {c['loaded']}, taken {c['ready_taken']}; "
                f"queue depths {c['sampled'] - c['sampled_taken']} and {c['loaded'] - c['ready_taken']}")
