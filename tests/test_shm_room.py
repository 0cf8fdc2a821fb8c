"""The async pipeline refuses to start, in one paragraph with the fixes, when /dev/shm has no room
for what it shares (pipeline/shm.py); Docker's default 64 MB is the common case."""
import shutil

import pytest
import torch

from conveyor.core import ConveyorError
from conveyor.partition import Graph
from conveyor.pipeline.sharing import share_graph
from conveyor.pipeline.shm import SHM, check_shm_room


def test_a_need_beyond_the_free_room_is_refused_with_the_fixes():
    free = shutil.disk_usage(SHM).free
    with pytest.raises(ConveyorError) as err:
        check_shm_room(free)  # plus the slots' quarter: more than is free
    message = str(err.value)
    assert "pipeline=serial" in message and "--shm-size" in message and f"{SHM} has" in message
    check_shm_room(free // 2)


def test_share_graph_checks_before_moving_anything():
    huge = torch.zeros(1).expand(4, shutil.disk_usage(SHM).free // 8)  # its bytes as counted, no storage
    graph = Graph.from_edge_index(torch.tensor([[0, 1], [1, 2]]), 4, x=huge, y=torch.zeros(4, dtype=torch.long))
    with pytest.raises(ConveyorError, match="pipeline=serial"):
        share_graph(graph)
    assert not graph.indptr.is_shared()  # refused before any tensor moved


def test_a_small_graph_is_shared():
    graph = Graph.from_edge_index(torch.tensor([[0, 1], [1, 2]]), 3, x=torch.ones(3, 2),
                                  y=torch.zeros(3, dtype=torch.long))
    handle = share_graph(graph)
    assert graph.x.is_shared() and handle.num_classes == graph.num_classes
