"""Start-up work done before the trainer's own imports, so that the stage processes' start overlaps
them (docs/design.md §5, start-up).

The trainer imports PyG (its layers; PyG imports torch._dynamo, for `is_torch_instance`): seconds
of one core. Nothing the run needs to load its graph or to start the fork server its stage
processes come from (pipeline/forkserver.py: a process of its own that imports torch and the stage
code) waits for PyG. So the command line (conveyor/cli.py) calls `begin(settings)` before it
imports the trainer: the run's graph is loaded (a fraction of a second for the default graph) and,
where the run's pipeline will be async, the fork server started, whose imports then run on
another core beside PyG's; the run takes the graph with `configured_graph` where it would have
loaded it.

Not in a thread beside the imports: a graph's loading may import PyG itself (Planetoid's files),
and two threads importing PyG at once see its modules half made (circular imports). What the run
sees is unchanged: the same graph (the same data settings, loaded the same way), an error of its
loading raised where the run asks for the graph (after the out_dir checks, as before), and its
log records held until then and replayed there (once the run's log is open). Only the
single-process training run of the command line begins early (a resumed one does not: its
checkpoint is checked first); conveyor.fit is handed its graph,
the comparison and data-parallel ranks load their own.
"""
from __future__ import annotations

import logging
import os

from conveyor.partition import Graph
from conveyor.partition.datasets import load_configured
from conveyor.pipeline.forkserver import start_early

_pending: list = []  # the EarlyGraph begun, until the run takes its graph


class EarlyGraph:
    """`load_configured(data)` now, then the fork server where `pipeline` will run async;
    `result()`: the graph, or its loading's error raised, its log records replayed first."""

    def __init__(self, data, pipeline):
        self.data, self.graph, self.error, self.records = data, None, None, []
        self.started_forkserver = False
        logger = logging.getLogger("conveyor")
        level = logger.level
        logger.setLevel(logging.DEBUG)  # its INFO records made, as once the run's log is open
        logger.addFilter(self.hold)
        try:
            self.graph = load_configured(data)
            if pipeline.choose(self.graph)[0] == "async":
                start_early()
                self.started_forkserver = True
        except Exception as error:  # noqa: BLE001 - raised again where the run asks for the graph
            self.error = error
        finally:
            logger.removeFilter(self.hold)
            logger.setLevel(level)

    def hold(self, record: logging.LogRecord) -> bool:
        self.records.append(record)
        return False

    def result(self) -> Graph:
        logger = logging.getLogger("conveyor")
        for record in self.records:
            if record.levelno >= logger.getEffectiveLevel():
                logger.handle(record)
        if self.error is not None:
            raise self.error
        return self.graph


def begin(settings) -> None:
    """Load the graph of a single-process training run now, and start its fork server where its
    pipeline will be async (for `configured_graph` to hand over)."""
    distributed = settings.run.world_size > 1 or int(os.environ.get("WORLD_SIZE", 1)) > 1
    _pending.clear()  # one at a time (in a process that runs the command line again)
    # A resumed run reads its checkpoint first: a damaged or planted one ends the run before any
    # work, the graph's build included, so it loads the graph where the run asks for it.
    if settings.mode == "train" and not distributed and not settings.run.resume:
        _pending.append(EarlyGraph(settings.data, settings.pipeline))


def configured_graph(data) -> Graph:
    """The graph `data` describes: the one `begin` loads (once), else `load_configured(data)`."""
    begun = _pending.pop() if _pending else None
    return begun.result() if begun is not None and begun.data == data else load_configured(data)
