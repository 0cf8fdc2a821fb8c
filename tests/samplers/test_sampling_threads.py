"""The sampling stage sets its own torch CPU thread count (pipeline.sampler_threads): in the
sampler process under async, around each `sample` call under serial (the trainer's threads
restored for its step), stated in the start-up line; auto takes no more than the idle cores. A
sampler built outside the pipeline chooses the same way (core/cores.py)."""
import logging
import os
import subprocess
import sys

import pytest
import torch

from conveyor.core import ConveyorError
from conveyor.core.cores import idle_cores, recent_idle_cores, usable_cores
from conveyor.loader.seeds import epoch_seed_batches
from conveyor.pipeline import PipelineSettings, batch_source
from conveyor.samplers import SampledBatch, SamplerSpec, build_sampler
from conveyor.samplers.bsp import BSPSampler
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


class ThreadsSeen(BSPSampler):
    """bsp recording the torch threads each draw ran with (its own sample() around them)."""

    def _sample(self, seeds):
        self.seen.append(torch.get_num_threads())
        return super()._sample(seeds)


def test_a_sampler_a_user_builds_picks_its_own_threads_and_gives_the_callers_back(two_trainer_threads):
    graph = feature_graph()
    sampler = build_sampler("bsp", graph, [3, 2])
    cores = usable_cores()
    # auto: the fewest of torch's threads (2 here), the usable cores and those idle (the same
    # measurement, reused for a few seconds: core/cores.py)
    assert sampler.threads == max(1, min(2, len(cores), recent_idle_cores(cores)))
    mine = ThreadsSeen(graph, [3, 2], threads=1)
    mine.seen = []
    mine.sample(torch.arange(8))
    mine.sample_many([torch.arange(4), torch.arange(4, 8)])
    assert mine.seen == [1, 1, 1] and torch.get_num_threads() == 2
    assert build_sampler("bsp", graph, [3, 2], threads=2).threads == 2
    with pytest.raises(ConveyorError, match="threads must be 'auto' or an integer >= 1"):
        build_sampler("bsp", graph, [3, 2], threads=0)


@pytest.mark.parametrize("given", ["spec", "object"])
def test_the_pipeline_gives_a_sampler_its_own_thread_count(given, two_trainer_threads):
    graph = feature_graph()
    sampler = SamplerSpec("bsp", [3, 2]) if given == "spec" else BSPSampler(graph, [3, 2], threads=2)
    seeds = epoch_seed_batches(graph.train_idx, 16, run_seed=0, epoch=1)[:2]
    settings = PipelineSettings(name="serial", sampler_threads=1)
    with batch_source(graph, sampler, DoubledFeatures(graph.x), "cpu", settings) as source:
        assert [p.batch.num_nodes_per_hop[0].item() for p in source.run(seeds, 0)] == [16, 16]
        assert source.samplers.run_sampler.threads == 1
        assert source.samplers.for_phase("layerwise").threads == 1
