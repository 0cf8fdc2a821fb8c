"""An auto cache sized after the warm-up's training batches leaves room for the run's largest
batch: the evaluation's (trainer.eval_batch_size, 4x the training batch by default)."""
import psutil
import torch

from conveyor.cache import build_cache
from conveyor.pipeline.memory import batch_room
from conveyor.pipeline.slots import SlotWriter
from tests.helpers import make_config, skewed_graph


def test_the_largest_batch_is_the_evaluation_batch_by_default():
    assert make_config().trainer.largest_batch_ratio == 4.0  # 4096 / 1024
    assert make_config("trainer.eval_batch_size=512").trainer.largest_batch_ratio == 1.0
    assert batch_room(1000, 4.0) == 3000 and batch_room(1000, 1.0) == 0


def test_an_auto_cache_leaves_room_for_the_evaluation_batch():
    """Room for 20 rows beside the measured peak; a training batch took 3 rows' worth, so a batch
    4x as large needs 9 more and the cache keeps 11."""
    graph = skewed_graph()  # 64-byte rows
    total = psutil.virtual_memory().total
    peak = total - graph.num_nodes * 4 - 20 * 64
    cache = build_cache("degree", graph, capacity="auto", reserve=0, prefetch=0)
    assert cache.fit_to_free_memory(peak_bytes=peak) == 20
    room = batch_room(3 * 64, make_config().trainer.largest_batch_ratio)
    assert cache.fit_to_free_memory(peak_bytes=peak, batch_room=room) == 11
    assert cache.fit_info["batch_room_bytes"] == 9 * 64 and cache.fit_info["peak_bytes"] == peak


def test_the_loader_counts_its_largest_slot():
    writer = SlotWriter("cpu")
    writer.pack(0, {"x": torch.zeros(2000, 4), "y": torch.zeros(2000, dtype=torch.long)})
    writer.pack(1, {"x": torch.zeros(100, 4), "y": torch.zeros(100, dtype=torch.long)})
    assert writer.largest_slot_bytes == (10000 * 4 + 2500 * 8)  # a quarter more than asked

