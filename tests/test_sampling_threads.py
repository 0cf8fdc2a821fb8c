"""The sampling stage sets its own torch CPU thread count (pipeline.sampler_threads): in the
sampler process under async, around each `sample` call under serial (the trainer's threads
restored for its step), stated in the start-up line; auto takes no more than the idle cores."""
import logging
import os
import subprocess
import sys

import pytest
import torch

from conveyor.pipeline import PipelineSettings, batch_source
from conveyor.pipeline.cores import idle_cores, usable_cores
from conveyor.pipeline.seeds import epoch_seed_batches
from conveyor.samplers import SampledBatch
from tests.helpers import DoubledFeatures, feature_graph


class ThreadCounter:
    """A sampler that reports the torch threads it ran with: one hop of that many (self-)edges."""

    def sample(self, seeds: torch.Tensor) -> SampledBatch:
        n = seeds.numel()
        edges = torch.zeros(2, torch.get_num_threads(), dtype=torch.long)
        return SampledBatch(seeds.long(), torch.tensor([n, n]), [edges])


def threads_seen(settings, graph, seeds) -> list:
    with batch_source(graph, ThreadCounter(), DoubledFeatures(graph.x), "cpu", settings) as source:
        return [prepared.batch.num_sampled_edges for prepared in source.run(seeds, 0)]


@pytest.fixture
def two_trainer_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def test_serial_samples_with_its_own_threads_and_gives_the_trainer_back_its_own(two_trainer_threads, caplog):
    graph = feature_graph()
    seeds = epoch_seed_batches(graph.train_idx, 16, run_seed=0, epoch=1)[:3]
    with caplog.at_level(logging.INFO, logger="conveyor"):
        with batch_source(graph, ThreadCounter(), DoubledFeatures(graph.x), "cpu",
                          PipelineSettings(name="serial", sampler_threads=1)) as source:
            for prepared in source.run(seeds, 0):
                assert prepared.batch.num_sampled_edges == 1  # sampled with 1 thread
                assert torch.get_num_threads() == 2  # the trainer's step keeps its 2
    assert "sampling: 1 torch thread (pipeline.sampler_threads), in the trainer's process" in caplog.text


def test_the_async_sampler_process_runs_with_the_sampling_threads():
    graph = feature_graph()
    seeds = epoch_seed_batches(graph.train_idx, 16, run_seed=0, epoch=1)[:3]
    settings = PipelineSettings(name="async", depth=2, superbatch=1, threads=1, sampler_threads=2)
    assert threads_seen(settings, graph, seeds) == [2, 2, 2]


@pytest.mark.parametrize("name", ["serial", "async"])
def test_auto_takes_between_one_and_the_idle_cores(name):
    settings = PipelineSettings(name=name)
    threads, how = settings.sampling_threads()
    cores = len(usable_cores())
    idle = int(how.split()[1])  # "auto: <idle> of <cores> cores idle at start"
    assert how == f"auto: {idle} of {cores} cores idle at start" and 0 <= idle <= cores
    share = settings.stage_threads if name == "async" else cores
    assert threads == max(1, min(share, idle))


def test_a_core_another_process_spins_on_is_not_idle():
    core = min(usable_cores())
    spin = subprocess.Popen([sys.executable, "-c", f"import os; os.sched_setaffinity(0, {{{core}}})\nwhile True: pass"])
    try:
        while spin.poll() is None and os.sched_getaffinity(spin.pid) != {core}:
            pass  # until it has pinned itself
        assert idle_cores({core}, window_s=0.5) == 0
    finally:
        spin.kill()
        spin.wait()
