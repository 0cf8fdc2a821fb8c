"""Sizes that cannot fit are refused with the estimate before anything is allocated, never by the
kernel's OOM killer: the model's (trainer/models/sizes.py: hidden, classes, layers, features) at
the config check, before any data is read; the synthetic generator's (data.num_features=10**8,
before its folder is made); a batch's (fanouts x batch, pipeline/room.py) in fit() and before a
run of either batch source; a checkpoint's recorded sizes in conveyor.load (test_hostile_doors.py).
What may still be allocated is psutil's available memory within the cgroup's limit
(core/memory.py): inside a memory cgroup of its own the same command is refused at its limit."""
import os
import subprocess
import sys

import pytest
import torch

import conveyor
from conveyor.core import ConveyorError
from conveyor.core.memory import cgroup_room, host_room
from conveyor.partition import Graph
from conveyor.partition.datasets.synthetic import EDGE_PHASE, check_synthetic_room, generator_bytes
from conveyor.pipeline.room import check_batch_room
from conveyor.trainer.models.sizes import COPIES, check_model_size, least_model_bytes
from tests.helpers import REPO, launch, memory_cgroup, refusal

HUGE = 10**8  # a hidden width or feature count no machine holds a model of


def test_the_bound_counts_every_weight_matrix_four_times():
    assert least_model_bytes(256, 47, 3) == COPIES * (256 * 256 + 256 * 47)
    assert least_model_bytes(256, 47, 3, features=100) == COPIES * (100 * 256 + 256 * 256 + 256 * 47)
    assert least_model_bytes(10**9, 47, 1, features=100) == COPIES * 100 * 47  # one layer: no hidden width


@pytest.mark.parametrize("override, words", [
    (f"model.hidden={HUGE}", f"model.hidden={HUGE} with 47 classes, 100 features and 3 layers needs at least"),
    ("data.num_classes=1000000000000", "with 1000000000000 classes, 100 features and 3 layers needs at least"),
    (f"data.num_features={HUGE}", f"with 47 classes, {HUGE} features and 3 layers needs at least"),
    (f"sampler.fanouts=[{','.join(['2'] * 40)}] model.hidden=200000", "and 40 layers needs at least"),
])
def test_an_impossible_model_is_refused_with_the_estimate(tmp_path, override, words):
    message = refusal("data=synthetic", f"data.root={tmp_path / 'data'}", f"run.out_dir={tmp_path / 'run'}",
                      "run.device=cpu", *override.split())
    assert words in message and "Lower model.hidden" in message and "OOM killer" in message, message


def test_a_size_that_fits_passes_and_the_room_is_the_machines():
    check_model_size(256, 47, 3, torch.device("cpu"), features=100)
    room = host_room()
    assert 0 < room <= os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") + 2**40  # RAM (+ swap)
    with pytest.raises(ConveyorError, match="at least 2 classes"):
        check_model_size(int((room / COPIES) ** 0.5) + 10**5, None, 3, torch.device("cpu"))


def test_launch_with_a_huge_hidden_exits_2_before_any_work(tmp_path):
    out, data = tmp_path / "run", tmp_path / "data"
    result = launch("data=synthetic", f"data.root={data}", f"run.out_dir={out}", f"model.hidden={HUGE}")
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert "for the model's weights" in result.stderr and not data.exists() and not out.exists()


def test_the_synthetic_generator_refuses_before_it_makes_a_folder(tmp_path):
    """data.num_features=10**7 with a model small enough to pass (hidden 1): the generator's own
    check, at the config check and again in the loader; no folder, no .staging left."""
    data, features = tmp_path / "data", 10**7
    result = launch("data=synthetic", f"data.root={data}", f"run.out_dir={tmp_path / 'run'}", "model.hidden=1",
                    f"data.num_features={features}", "sampler.fanouts=[2,2]")
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert f"the synthetic graph of 48,981 nodes, 1,237,183 edges, {features:,} features" in result.stderr
    assert "Lower data.scale or data.num_features" in result.stderr and not data.exists()
    with pytest.raises(ConveyorError, match="for the graph itself"):
        conveyor.partition.datasets.load_dataset("synthetic", root=data, scale=0.02, num_features=features)
    assert not data.exists()


def test_the_generators_estimate_covers_what_it_took_at_products_scale():
    """Generating scale=1.0 (2,449,029 nodes, 61,859,140 edges, 100 features) peaked at 3,219 MiB
    of RSS on the development machine: the estimate's larger phase stays below (a lower bound) and
    within a factor of two of it."""
    phases = generator_bytes(2_449_029, 61_859_140, 100, 47)
    assert phases["for drawing its edges"] == 8 * EDGE_PHASE * 61_859_140
    assert 3219 / 2 < max(phases.values()) / 2**20 < 3219


def test_a_cached_synthetic_graph_is_never_refused(synthetic_small, data_root):
    assert check_synthetic_room(data_root, 0.002, 0, 100, 47).is_dir()  # no size check: nothing is generated


def test_a_batch_beyond_the_memory_is_refused_before_it_is_drawn():
    hub = torch.zeros(1, dtype=torch.int32).expand(2 * 10**11)  # a hub's 10**11 in-edges, without storage
    graph = Graph(indptr=torch.tensor([0, 10**11, 2 * 10**11]), indices=hub, x=torch.ones(2, 4))
    with pytest.raises(ConveyorError) as error:
        check_batch_room(graph, [-1, -1], 2, "cpu")
    message = str(error.value)
    assert "a batch of 2 seeds at fanouts [-1, -1] (up to 2 nodes and 400,000,000,000 edges)" in message
    assert "for its ids and edges" in message and "Lower the batch size or the fanouts" in message
    check_batch_room(graph, [1, 1], 2, "cpu")  # 4 edges
    with pytest.raises(ConveyorError, match="for the model's messages and activations"):
        check_batch_room(graph, [10**9], 2, "cpu", hidden=10**3)  # 2e9 edges' messages of 1,000 floats



def test_inside_a_memory_cgroup_its_limit_is_the_room(tmp_path):
    """The products-shaped graph at scale 0.2 needs ~0.6 GiB to generate: in a cgroup of 256 MiB
    the command is refused in one paragraph naming the cgroup's room, not killed by it."""
    folder = memory_cgroup(256 << 20)
    if folder is None:
        pytest.skip("needs root and a cgroup v1 memory controller")
    try:
        command = (f"echo $$ > {folder}/cgroup.procs && exec {sys.executable} launch.py data=synthetic "
                   f"data.scale=0.2 data.root={tmp_path / 'data'} run.out_dir={tmp_path / 'run'} run.device=cpu")
        result = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=120, cwd=REPO)
        inside = subprocess.run(["sh", "-c", f"echo $$ > {folder}/cgroup.procs && exec {sys.executable} -c "
                                 f"'from conveyor.core.memory import cgroup_room; print(cgroup_room())'"],
                                capture_output=True, text=True, timeout=60, cwd=REPO)
    finally:
        folder.rmdir()
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert "the synthetic graph of 489,806 nodes" in result.stderr and "Lower data.scale" in result.stderr
    assert 0 < int(inside.stdout) <= 256 << 20 and cgroup_room() != int(inside.stdout)
