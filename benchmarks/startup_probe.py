"""The start-up benchmark's probe (benchmarks/startup.py): runs `python launch.py ARGS` of the checkout
it is started in (this release or a previous one) and writes when each start-up milestone passed, in
time.monotonic() seconds (one clock for every process of the machine), to $STARTUP_PROBE_OUT as JSON;
after the first training step it stops the run with SIGINT, as Ctrl-C would.

    cd CHECKOUT && python -c "import runpy; runpy.run_path('.../startup_probe.py', run_name='__main__')" ARGS

It reads only what both releases have, so that they are measured the same way: the `conveyor`
logger's records (the run's "device ..." line once its imports and checks are done, the graph's
line once the run has its graph), `PipelineLoader.start` returning (the stage processes started),
torch's global hooks (the first module forward: the first batch is in the trainer; the first
optimizer step: it has trained).
"""
import importlib.abc
import importlib.util
import json
import logging
import os
import runpy
import signal
import sys
import time

EVENTS = {"probe": time.monotonic()}  # the interpreter is up and this file runs


def mark(name: str) -> None:
    EVENTS.setdefault(name, time.monotonic())  # the first time only
    with open(os.environ["STARTUP_PROBE_OUT"], "w") as out:
        json.dump(EVENTS, out)


def log_milestones(record) -> bool:
    """The run's first line (imports and checks done) and its graph line (the graph is loaded): a
    filter of the `conveyor` logger, which the run keeps (it replaces the logger's handlers)."""
    message = str(record.msg)
    if message.startswith("device "):
        mark("run_started")
    elif message == "%r" and "run_started" in EVENTS:
        mark("graph")
    return True


class AfterImport(importlib.abc.MetaPathFinder):
    """Calls `patch(module)` once the module `name` has been imported (by the run, when it imports it)."""

    def __init__(self, name: str, patch):
        self.name, self.patch = name, patch

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        run_module = spec.loader.exec_module

        def exec_module(module):
            run_module(module)
            self.patch(module)
        spec.loader.exec_module = exec_module
        return spec


def patch_pipeline_loader(module) -> None:
    start = module.PipelineLoader.start

    def timed_start(self):
        loader = start(self)
        mark("stages_started")
        return loader
    module.PipelineLoader.start = timed_start


def on_first_forward(module, args) -> None:
    if "stages_started" in EVENTS:
        mark("first_forward")


def on_first_step(optimizer, args, kwargs) -> None:
    if "first_step" not in EVENTS:
        EVENTS["conveyor"] = sys.modules["conveyor"].__file__  # the release's own, not an installed one
        mark("first_step")
        signal.raise_signal(signal.SIGINT)  # the run stops as on Ctrl-C: its stage processes too


def main() -> None:
    import torch  # both releases import it before anything of theirs runs (conveyor/__init__)
    from torch.optim.optimizer import register_optimizer_step_post_hook
    mark("probe")
    logging.getLogger("conveyor").addFilter(log_milestones)
    sys.meta_path.insert(0, AfterImport("conveyor.loader.pipeline_loader", patch_pipeline_loader))
    torch.nn.modules.module.register_module_forward_pre_hook(on_first_forward)
    register_optimizer_step_post_hook(on_first_step)
    sys.argv = ["launch.py"] + sys.argv[1:]
    runpy.run_path("launch.py", run_name="__main__")


if __name__ == "__main__":
    main()
