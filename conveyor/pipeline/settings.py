"""The pipeline's settings (`pipeline.*`), declared once (core/fields.py): serial or async,
and the async pipeline's queues, pacing, CUDA MPS and stall limit."""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any, ClassVar, Dict, Optional, Tuple

from conveyor.core import ConveyorError
from conveyor.core.cores import idle_threads, usable_cores
from conveyor.core.fields import REQUIRED, Rule, Section, choice, integer, number, section, setting

STAGES = ("sampler", "loader")
PIPELINES = ("auto", "serial", "async")
# pipeline=auto runs the stages in this process below this many edges: such a graph's epoch takes
# less than the stage processes cost to start and feed (Cora's 10K edges: 1.36x PyG's epoch async).
AUTO_MIN_EDGES = 1_000_000


@dataclass(frozen=True, kw_only=True)
class PaceSettings(Section):
    SECTION: ClassVar[str] = "pipeline.pace"
    interval: int = setting(10, "iterations between its decisions", integer(1))
    patience: int = setting(5, "a queue full this many iterations, its consumer not waiting, holds its producer "
                               "closer", integer(2))
    wait_fraction: float = setting(0.05, "a consumer waiting longer than this share, its producer held back as "
                                         "long, lets it run further ahead", number(0, 1))


MPS_ENABLED = Rule("auto, true or false", lambda v: type(v) is bool or v in ("auto", "true", "false"))


@dataclass(frozen=True, kw_only=True)
class MPSSettings(Section):
    SECTION: ClassVar[str] = "pipeline.mps"
    enabled: Any = setting("auto", "auto: when a control daemon is running; true: require one; false: never",
                           MPS_ENABLED)
    warmup: int = setting(20, "iterations timed before the shares are chosen (the stages then restart once)",
                          integer(3))
    floor: int = setting(10, "lowest CUDA_MPS_ACTIVE_THREAD_PERCENTAGE a stage gets", integer(1, 100))
    sampler: Optional[int] = setting(None, "the sampler stage's fixed percentage instead of a measured one "
                                           "(give both, e.g. 30)", integer(1, 100, nullable=True))
    loader: Optional[int] = setting(None, "the loader stage's fixed percentage (give both, e.g. 20)",
                                    integer(1, 100, nullable=True))

    def check(self) -> None:
        if (self.sampler is None) != (self.loader is None):
            raise ConveyorError("pipeline.mps.sampler and pipeline.mps.loader must be given together (fixed "
                                "SM percentages), or both left null (measured).")

    @property
    def mode(self) -> str:
        """auto | true | false (the command line gives true and false as booleans)."""
        return str(self.enabled).lower()

    @property
    def fixed(self) -> Optional[Dict[str, int]]:
        """The fixed SM percentage per stage, or None: measured."""
        return None if self.sampler is None else {"sampler": self.sampler, "loader": self.loader}


THREADS = Rule("auto or an integer >= 1", lambda v: v == "auto" or type(v) is int and v >= 1)


@dataclass(frozen=True, kw_only=True)
class PipelineSettings(Section):
    SECTION: ClassVar[str] = "pipeline"
    OPTIONS: ClassVar[dict] = {  # the config group's options (conf/pipeline/*.yaml), for --help
        "auto": f"async where the stage processes pay for themselves, serial where they cannot: a graph "
                f"below {AUTO_MIN_EDGES:,} edges, or a process with one core (the start-up line says which)",
        "async": "Sampler, feature loader and trainer in three processes joined by queues (TurboGNN): while "
                 "the trainer computes batch i, the loader gathers batch i+1 and the sampler samples batch i+2.",
        "serial": "sample, gather and train one after the other in one process: the reference"}

    name: str = setting(REQUIRED, "how the stages run (the option chosen in group pipeline)", choice(PIPELINES))
    depth: int = setting(4, "async: most batches a producer may have waiting in its queue: bounds the memory",
                         integer(1))
    superbatch: int = setting(4, "async: batches the sampler draws per call: one fused kernel launch for all "
                                 "of them", integer(1, 64))
    threads: Any = setting("auto", "async: torch CPU threads per stage process; auto: a quarter of the cores, "
                                   ">= 1", THREADS)
    sampler_threads: Any = setting("auto", "torch CPU threads for sampling (the sampler process under async, the "
                                           "sampling step under serial); auto: the cores this process may run on "
                                           "(a quarter under async), at most those idle at start", THREADS)
    pace: PaceSettings = section(PaceSettings, "async: the pace controller, deciding every `interval` iterations")
    mps: MPSSettings = section(MPSSettings, "async: CUDA MPS (GPU runs): each stage process gets its own share "
                                            "of the SMs")
    stall_timeout_s: Optional[float] = setting(
        600, "async: stop the run when no batch arrives this long with every stage alive and ready; null: never",
        number(0, low_open=True, nullable=True, hint="seconds"))

    @property
    def stage_threads(self) -> int:
        """torch CPU threads per stage process (auto resolved on this machine)."""
        return max(1, (os.cpu_count() or 1) // 4) if self.threads == "auto" else self.threads

    def choose(self, graph) -> Tuple[str, str]:
        """serial or async for `graph`, and why (the start-up line's words): `name` as given, or
        for auto serial on a small graph or one core, where the stage processes cannot pay for
        themselves (their start-up and hand-overs cost more than the sampling they hide), else async."""
        if self.name != "auto":
            return self.name, f"pipeline={self.name}"
        cores, edges = len(usable_cores()), int(graph.num_edges)
        if cores < 2:
            return "serial", "auto: this process may run on 1 core, which stage processes would take from the trainer"
        if edges < AUTO_MIN_EDGES:
            return "serial", (f"auto: a small graph, {edges:,} edges (< {AUTO_MIN_EDGES:,}): stage processes "
                              f"would cost more than they hide")
        return "async", f"auto: {edges:,} edges, {cores} cores"

    def resolved(self, graph) -> "PipelineSettings":
        """These settings with `name` serial or async (`choose`)."""
        return self if self.name != "auto" else dataclasses.replace(self, name=self.choose(graph)[0])

    def sampling_threads(self) -> Tuple[int, str]:
        """torch CPU threads for sampling, and how they were chosen (for the start-up line): auto
        takes no more threads than there are cores idle at start (core/cores.py says why)."""
        if self.sampler_threads != "auto":
            return self.sampler_threads, "pipeline.sampler_threads"
        share = self.stage_threads if self.name == "async" else len(usable_cores())  # serial: the trainer waits
        return idle_threads(share)

    @property
    def slots(self) -> int:
        """Slots of the ready queue: one per batch it may hold, one the loader fills, one the
        trainer reads."""
        return self.depth + 2

    @property
    def sampled_slots(self) -> int:
        """Slots of the sampled queue: a sampled slot travels on with its batch until the trainer
        is done with it (stages.py), so as many as the two queues' batches: the ready queue's
        slots, plus one per batch the sampled queue may hold, one the sampler fills and one the
        loader reads."""
        return 2 * (self.depth + 2)
