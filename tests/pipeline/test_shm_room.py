"""The async pipeline refuses to start, in one paragraph with the fixes, when /dev/shm has no room
for what it places there (pipeline/shm.py): the graph's tensors that are not file-mapped, the
tensors of objects pickled into the stages, the semaphores, each run's seeds and the slots of both
queues at the most a batch can grow them. Docker's default 64 MB is the common case. The estimate
of a batch is a bound: real batches never exceed it."""
import shutil

import pytest
import torch

from conveyor.cache import CacheSettings, CacheSpec, FeatureCache
from conveyor.core import ConveyorError
from conveyor.partition import Graph
from conveyor.pipeline import PipelineSettings
from conveyor.pipeline.phases import EVERY_NEIGHBOUR
from conveyor.pipeline.room import Degrees, PipelineRoom, batch_bound
from conveyor.pipeline.sharing import share_graph
from conveyor.pipeline.shm import SHM, check_shm_room, object_tensors, shared_bytes, shm_shortfall
from conveyor.samplers import SamplerSpec, build_sampler
from tests.helpers import power_law_graph, star_graph

ASYNC = PipelineSettings(name="async", depth=2)


def test_a_need_beyond_the_free_room_is_refused_with_the_fixes():
    free = shutil.disk_usage(SHM).free
    with pytest.raises(ConveyorError) as err:
        check_shm_room({"the slots": free // 2, "the graph": free // 2 + 2**20})
    message = str(err.value)
    assert "pipeline=serial" in message and "--shm-size=" in message and f"{SHM} has" in message
    assert "the slots" in message and "the graph" in message  # what takes the room, by name
    check_shm_room({"the slots": free // 2})
    check_shm_room({"the slots": free + 2**20}, held=2**21)  # what the slots hold already is theirs


def test_share_graph_checks_before_moving_anything():
    graph = Graph.from_edge_index(torch.tensor([[0, 1], [1, 2]]), 4, x=torch.ones(4, 3),
                                  y=torch.zeros(4, dtype=torch.long))
    with pytest.raises(ConveyorError, match="pipeline=serial"):
        share_graph(graph, need={"the slots": shutil.disk_usage(SHM).free + 1})
    assert not graph.indptr.is_shared() and not graph.x.is_shared()  # refused before any tensor moved


def test_a_small_graph_is_shared_with_its_attributes():
    graph = Graph.from_edge_index(torch.tensor([[0, 1], [1, 2]]), 3, dedup=False, x=torch.ones(3, 2),
                                  y=torch.zeros(3, dtype=torch.long), node_attrs={"year": torch.arange(3)},
                                  edge_attrs={"w": torch.ones(2)})
    handle = share_graph(graph)
    assert graph.x.is_shared() and handle.num_classes == graph.num_classes
    assert graph.node_attrs["year"].is_shared() and graph.edge_attrs["w"].is_shared()


def test_what_sharing_moves_is_counted_by_storage_once_and_never_twice():
    x = torch.ones(100, 10)
    assert shared_bytes([x, x[:10], x.t()]) == 4000  # views share one storage
    assert shared_bytes([x.share_memory_()]) == 0  # there already
    cache = FeatureCache(torch.ones(50, 4), torch.arange(50), torch.device("cpu"), "degree")
    cache.resize(10)
    held = shared_bytes(object_tensors(cache))
    assert held == 50 * 4 * 4 + 50 * 4 + 50 * 8  # features, slot map, ranking (on the host no copy of rows)
    assert object_tensors(SamplerSpec("bsp", [5])) == []  # a recipe carries nothing


@pytest.mark.parametrize("chunk, dense", [(1 << 22, 1 << 22), (7, 3)], ids=["one-chunk", "chunked-sorted"])
def test_the_degree_histogram_gives_the_largest_draws_exactly(monkeypatch, chunk, dense):
    monkeypatch.setattr(Degrees, "CHUNK", chunk)  # chunks of 7 nodes, counted by sorting where a degree >= 3
    monkeypatch.setattr(Degrees, "DENSE", dense)
    graph = power_law_graph(num_nodes=300, num_edges=5000)
    degrees, order = Degrees(graph.indptr), graph.in_degree().sort(descending=True).values
    for k in (0, 1, 7, 150, 300):
        for fanout in (-1, 1, 5, 40, 10_000):
            capped = order if fanout < 0 else order.clamp(max=fanout)
            assert degrees.top_edges(k, fanout) == int(capped[:k].sum()), (k, fanout)


def test_a_hub_of_a_hundred_billion_edges_costs_no_degree_sized_tensor():
    indices = torch.zeros(1, dtype=torch.int32).expand(2 * 10**11)  # its size, without its storage
    graph = Graph(indptr=torch.tensor([0, 10**11, 2 * 10**11]), indices=indices, x=torch.ones(2, 4))
    degrees = Degrees(graph.indptr)
    assert degrees.max_degree == 10**11 and degrees.top_edges(2, 10) == 20


@pytest.mark.parametrize("graph", [power_law_graph(), star_graph(), power_law_graph(num_nodes=50, num_edges=2000)],
                         ids=["power-law", "star", "dense"])
@pytest.mark.parametrize("fanouts", [[15, 10, 5], [3], [-1, 2], EVERY_NEIGHBOUR])
@pytest.mark.parametrize("once", [False, True])
def test_no_sampled_batch_exceeds_the_bound(graph, fanouts, once):
    """The bound holds for bsp's batches, drawing at every hop and PyG's once, seeds given as hubs
    (the worst case) or at random, and is reached where the graph allows (a star's hub)."""
    degrees, hubs = Degrees(graph.indptr), graph.in_degree().argsort(descending=True)
    sampler = build_sampler("bsp", graph, fanouts, seed=1, draws="per_node" if once else "per_hop")
    for seeds in (hubs[:8], hubs[:40], torch.randperm(graph.num_nodes)[:32], hubs):
        batch = sampler.sample(seeds)
        bound = batch_bound(seeds.numel(), fanouts, graph.num_nodes, degrees, through_hops=once)
        assert batch.n_id.numel() <= bound.nodes and batch.num_sampled_edges <= bound.edges, (seeds.numel(), bound)


def test_a_star_reaches_its_bound():
    graph = star_graph(leaves=50)
    hub = int(graph.in_degree().argmax())
    batch = build_sampler("bsp", graph, [-1]).sample(torch.tensor([hub]))
    bound = batch_bound(1, [-1], graph.num_nodes, Degrees(graph.indptr))
    assert (batch.n_id.numel(), batch.num_sampled_edges) == (bound.nodes, bound.edges) == (51, 50)


def test_the_slots_count_on_the_cpu_and_grow_with_the_batch_and_the_evaluation():
    graph = power_law_graph()
    graph.x, graph.y = torch.ones(graph.num_nodes, 16), torch.zeros(graph.num_nodes, dtype=torch.long)
    spec = CacheSpec(CacheSettings(policy="degree", dtype="float16"))
    room = PipelineRoom.of(graph, SamplerSpec("bsp", [5, 5]), spec, "cpu", ASYNC, batch_ratio=4.0)
    bound = batch_bound(64 * 4, [5, 5], graph.num_nodes, room.degrees)
    ready = bound.nodes * 16 * 2 + bound.seeds * 8  # float16 rows (the cache converts), int64 labels
    sampled = 8 * (bound.nodes + 3 * bound.edges)
    assert room.slot_bytes(64) == int(1.25 * (4 * ready + 8 * sampled))  # depth 2: 4 + 8 slots
    assert room.slot_bytes(64, "eval") < room.slot_bytes(64) and room.slot_bytes(0) == 0
    assert room.slot_bytes(64, "layerwise-hidden") < room.slot_bytes(64, "layerwise")  # no features
    on_gpu = PipelineRoom.of(graph, SamplerSpec("bsp", [5, 5]), spec, "cuda", ASYNC)
    assert not on_gpu.in_shm and room.in_shm  # device memory, not /dev/shm
    serial = PipelineRoom.of(graph, SamplerSpec("bsp", [5, 5]), spec, "cpu", batch_ratio=4.0)
    assert not serial.in_shm and serial.slot_bytes(64) == ready + sampled  # the one batch in hand
    own = PipelineRoom.of(graph, object(), spec, "cpu", ASYNC)
    assert own.slot_bytes(64) == 0 and own.slot_bytes(64, "layerwise") > 0  # its own fanouts: unknown


def test_a_run_is_checked_for_its_slots_beyond_what_they_hold():
    graph = power_law_graph()
    graph.x, graph.y = torch.ones(graph.num_nodes, 16), torch.zeros(graph.num_nodes, dtype=torch.long)
    room = PipelineRoom.of(graph, SamplerSpec("bsp", [5, 5]), CacheSpec(CacheSettings(policy="none")), "cpu", ASYNC)
    room.check_run([torch.arange(64)], "train", held=0)
    assert room.checked == room.slot_bytes(64)
    room.check_run([torch.arange(8)], "train", held=0)  # smaller: nothing new
    assert room.checked == room.slot_bytes(64)


def test_a_full_shm_allocation_becomes_the_paragraph():
    torch_words = RuntimeError("unable to allocate shared memory(shm) for file </torch_1_2_3>: No space left "
                               "on device (28)")
    semaphore = OSError(28, "No space left on device")
    for error in (torch_words, semaphore):
        paragraph = shm_shortfall(error)
        assert isinstance(paragraph, ConveyorError) and "pipeline=serial" in str(paragraph)
        assert "--shm-size=" in str(paragraph) and "\n" not in str(paragraph)
    assert shm_shortfall(RuntimeError("something else")) is None
    assert shm_shortfall(OSError(2, "No such file")) is None


def test_the_attributes_a_batch_carries_are_counted():
    from conveyor.partition.attributes import AttributeSpec
    graph = power_law_graph()
    graph.x, graph.y = torch.ones(graph.num_nodes, 16), torch.zeros(graph.num_nodes, dtype=torch.long)
    graph.node_attrs = {"year": torch.zeros(graph.num_nodes, dtype=torch.int16)}
    graph.edge_attrs = {"w": torch.ones(graph.num_edges, 3)}
    spec, cache = AttributeSpec(node=("year",), edge=("w",), e_id=True), CacheSpec(CacheSettings(policy="none"))
    plain = PipelineRoom.of(graph, SamplerSpec("bsp", [5]), cache, "cpu", ASYNC)
    carried = PipelineRoom.of(graph, SamplerSpec("bsp", [5]), cache, "cpu", ASYNC, attributes=spec)
    assert (carried.shapes.node_extra, carried.shapes.edge_extra) == (2, 3 * 4 + 8)  # int16; 3 floats and an id
    bound = batch_bound(64, [5], graph.num_nodes, carried.degrees)
    extra = 1.25 * 4 * (bound.nodes * 2 + bound.edges * 20)  # in each of the 4 ready slots
    assert carried.slot_bytes(64) - plain.slot_bytes(64) == pytest.approx(extra, abs=2)
    store = spec.build(graph, "cpu")  # a store says its own fields
    built = PipelineRoom.of(graph, SamplerSpec("bsp", [5]), cache, "cpu", ASYNC, attributes=store)
    assert built.shapes == carried.shapes
    assert PipelineRoom.of(graph, SamplerSpec("bsp", [5]), None, "cpu", ASYNC).shapes.row_bytes == 0  # no x
