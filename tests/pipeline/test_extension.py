"""A sampler and a feature source of the user's own, written here, handed to the pipeline without
editing conveyor (as PyG's `NodeLoader(node_sampler=...)`): in the caller's process
(`pipeline=serial`) and in the stage processes (`pipeline=async`, which pickles them there).
docs/design.md §2.6 states what they must provide."""
import torch

from conveyor.loader.seeds import epoch_seed_batches
from conveyor.pipeline import AsyncBatches, PipelineSettings, SerialBatches, batch_source
from conveyor.samplers import SampledBatch
from conveyor.samplers.checks import assert_valid_batch, same_batch
from tests.helpers import DoubledFeatures, feature_graph


class FirstNeighbours:
    """Each node of a hop takes its first min(deg, k) in-neighbours, by id: no randomness, so no
    `manual_seed`, and no `sample_many` (the pipeline calls `sample` once per batch)."""

    def __init__(self, graph, fanouts):
        self.indptr, self.indices, self.fanouts = graph.indptr, graph.indices.long(), list(fanouts)

    def sample(self, seeds: torch.Tensor) -> SampledBatch:
        n_id, counts, edges = seeds.long(), [seeds.numel()], []
        for fanout in self.fanouts:
            targets = torch.arange(counts[-1])
            start, degree = self.indptr[n_id[targets]], self.indptr[n_id[targets] + 1] - self.indptr[n_id[targets]]
            taken = degree.clamp(max=fanout)
            target = torch.repeat_interleave(targets, taken)
            offset = torch.arange(int(taken.sum())) - torch.repeat_interleave(taken.cumsum(0) - taken, taken)
            neighbour = self.indices[torch.repeat_interleave(start, taken) + offset]
            new = torch.unique(neighbour[~torch.isin(neighbour, n_id)])
            n_id = torch.cat([n_id, new])
            local = torch.full((int(n_id.max()) + 1,), -1, dtype=torch.long)
            local[n_id] = torch.arange(n_id.numel())
            edges.append(torch.stack([local[neighbour], target]))
            counts.append(n_id.numel())
        return SampledBatch(n_id, torch.tensor(counts), edges)




def test_a_users_sampler_and_feature_source_feed_both_pipelines():
    graph = feature_graph()
    sampler, features = FirstNeighbours(graph, [4, 3]), DoubledFeatures(graph.x)
    seeds = epoch_seed_batches(graph.train_idx, 16, run_seed=0, epoch=1)[:8]
    expected = [sampler.sample(s) for s in seeds]
    for batch, s in zip(expected, seeds):
        assert_valid_batch(batch, graph, s, [4, 3])  # the user's sampler keeps the contract

    serial = batch_source(graph, sampler, features, "cpu", PipelineSettings(name="serial"))
    assert isinstance(serial, SerialBatches)
    served = list(serial.run(seeds, 0))
    settings = PipelineSettings(name="async", depth=2, superbatch=3, threads=1)
    with batch_source(graph, sampler, features, "cpu", settings) as pipelined:
        assert isinstance(pipelined, AsyncBatches)
        for mine, theirs, own, s in zip(served, pipelined.run(seeds, 0), expected, seeds, strict=True):
            for prepared in (mine, theirs):
                assert same_batch(prepared.batch, own)
                assert torch.equal(prepared.x, 2 * graph.x[own.n_id])
                assert torch.equal(prepared.y.long(), graph.y[s])
            assert theirs.cost.cache_misses == own.n_id.numel()  # the stage used its stats() too
    assert features.gathered == sum(b.n_id.numel() for b in expected)  # serial gathered here; async in its copy


def test_the_protocols_take_a_users_classes_that_subclass_nothing():
    """samplers.Sampler and cache.FeatureSource are structural: the user's classes above subclass
    nothing of conveyor's, yet are both; an object lacking a method is refused before any process
    starts, naming what it lacks."""
    import pytest

    from conveyor.cache import CacheSpec, FeatureRecipe, FeatureSource
    from conveyor.cache.settings import CacheSettings
    from conveyor.core import ConveyorError
    from conveyor.samplers import Sampler, SamplerRecipe, SamplerSpec

    graph = feature_graph()
    sampler, features = FirstNeighbours(graph, [4, 3]), DoubledFeatures(graph.x)
    assert FirstNeighbours.__mro__ == (FirstNeighbours, object)
    assert isinstance(sampler, Sampler) and not isinstance(sampler, SamplerRecipe)
    assert isinstance(features, FeatureSource) and not isinstance(features, Sampler)
    assert isinstance(SamplerSpec("bsp", [4, 3]), SamplerRecipe)
    assert isinstance(CacheSpec(CacheSettings(policy="degree")), FeatureRecipe)
    for name in ("serial", "async"):
        with pytest.raises(ConveyorError, match="has neither sample"):
            batch_source(graph, object(), features, "cpu", PipelineSettings(name=name))

    class NoStats:
        feature_dim, dtype = graph.x.size(1), graph.x.dtype

        def gather(self, n_id, out=None):
            return graph.x[n_id]

    with pytest.raises(ConveyorError, match="lacks stats"):
        batch_source(graph, sampler, NoStats(), "cpu", PipelineSettings(name="async"))
