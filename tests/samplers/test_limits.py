"""Cost and limits: fanouts capped by the largest degree (same sample), a world size the machine
can run, and a pipeline stall timeout honoured however short it is."""
import os
import signal
import time

import pytest
import torch

from conveyor.core import ConveyorError
from conveyor.loader.seeds import epoch_seed_batches
from conveyor.pipeline import AsyncBatches, PipelineError
from conveyor.samplers import build_sampler
from conveyor.samplers.bsp import BSPSampler, sample_positions
from conveyor.samplers.checks import assert_valid_batch
from conveyor.trainer.config import check_world_size
from conveyor.trainer.run import build_batch_source
from tests.helpers import feature_graph, make_config

HUGE = 10**12  # beyond int32, so a buffer or tensor sized or typed by it would fail


def test_a_fanout_above_every_degree_draws_exactly_what_the_largest_degree_draws():
    """Capping is invisible: no node has more neighbours than the largest degree, so the picks and
    the random stream after them are the same as with the fanout as written."""
    start, deg = torch.tensor([0, 3, 10, 10]), torch.tensor([3, 7, 0, 5])
    drawn = []
    for fanout in (deg.max().item(), 50):
        generator = torch.Generator().manual_seed(0)
        pos, edges = sample_positions(start, deg, fanout, generator)
        # edges[0] is left for the caller to fill (uninitialised here): compare what is drawn.
        drawn.append((pos, edges[1], torch.rand(3, generator=generator)))
    for capped, written in zip(*drawn):
        assert torch.equal(capped, written)


def test_bsp_caps_fanouts_by_the_largest_degree(cora):
    max_degree = int(cora.in_degree().max())
    sampler = BSPSampler(cora, [100_000, HUGE], seed=3)
    assert sampler.fanouts == [max_degree, max_degree]
    seeds = cora.train_idx[:64]
    batch = sampler.sample(seeds)
    assert_valid_batch(batch, cora, seeds, [HUGE, HUGE])  # every node took all its neighbours
    same = BSPSampler(cora, [max_degree, max_degree], seed=3).sample(seeds)
    assert torch.equal(batch.n_id, same.n_id)
    assert all(torch.equal(a, b) for a, b in zip(batch.edge_index_per_hop, same.edge_index_per_hop))


def test_fused_caps_fanouts_so_a_huge_one_fits_its_int32_buffers():
    graph = feature_graph(num_nodes=200, num_edges=1500)
    max_degree = int(graph.in_degree().max())
    sampler = build_sampler("fused", graph, [HUGE, 4], seed=1)
    assert sampler.fanouts == [max_degree, 4]
    seeds = torch.arange(0, 200, 9)
    assert_valid_batch(sampler.sample(seeds), graph, seeds, [HUGE, 4])


def test_more_ranks_than_cores_or_gpus_is_refused():
    cores = len(os.sched_getaffinity(0))
    check_world_size(cores, torch.device("cpu"))
    with pytest.raises(ConveyorError, match=f"run.world_size={cores + 1} but this machine has {cores} CPU"):
        check_world_size(cores + 1, torch.device("cpu"))


def test_a_stall_timeout_below_a_minute_is_honoured(tmp_path):
    """A stage that is alive but sends nothing (here: stopped) ends the run after
    pipeline.stall_timeout_s, not at the next once-a-minute stall warning."""
    graph = feature_graph()
    cfg = make_config("pipeline=async", "sampler=bsp", "sampler.fanouts=[5,5]", "cache=none",
                      "pipeline.depth=1", "pipeline.stall_timeout_s=1", f"run.out_dir={tmp_path}")
    source = build_batch_source(cfg, graph, torch.device("cpu"))
    assert isinstance(source, AsyncBatches)
    stopped = []
    try:
        with pytest.raises(PipelineError, match=r"no batch for \d+s .*pipeline.stall_timeout_s=1"):
            for step, _ in enumerate(source.run(epoch_seed_batches(graph.train_idx, 4, 0, 1), 0)):
                if step == 0:  # both stages are up: stop the sampler where it stands
                    os.kill(source.processes["sampler"].pid, signal.SIGSTOP)
                    stopped.append(time.monotonic())
        assert time.monotonic() - stopped[0] < 30  # the warning comes every 60 s
    finally:
        if stopped:
            os.kill(source.processes["sampler"].pid, signal.SIGCONT)
        source.close()
