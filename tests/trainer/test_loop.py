"""The training loop's host reads: loss and accuracy stay on the device between log points, and
the figures read back sparsely equal those read per batch (recorded from the code before)."""
import json
import sys

import pytest
import torch

from conveyor.loader.seeds import epoch_seed_batches
from conveyor.partition.datasets import load_configured
from conveyor.trainer.loop.epoch import evaluate, train_epoch
from conveyor.trainer.models.sampled import build_model
from conveyor.trainer.run import build_batch_source, train
from tests.helpers import REPO, make_config

# Every way a tensor's value reaches the host (on a GPU each waits for the device).
HOST_READS = ("item", "tolist", "cpu", "numpy", "__float__", "__int__", "__bool__", "__index__")


@pytest.fixture
def host_reads(monkeypatch):
    """Counts the host reads of tensors made by trainer/ code itself (not by PyG or the batch's
    own CPU-side counts): a list that grows by one name per read."""
    reads = []
    for name in HOST_READS:
        original = getattr(torch.Tensor, name)

        def counting(self, *args, _original=original, _name=name, **kwargs):
            if f"{REPO}/conveyor/trainer/" in sys._getframe(1).f_code.co_filename:
                reads.append(_name)
            return _original(self, *args, **kwargs)
        monkeypatch.setattr(torch.Tensor, name, counting)
    return reads


def cora_model_and_batches(data_root):
    """A SAGE model on cora and the serial batch source, as a run builds them."""
    cfg = make_config("data=cora", f"data.root={data_root}")
    graph = load_configured(cfg.data)
    torch.manual_seed(0)
    model = build_model(cfg.model, graph.x.size(1), int(graph.num_classes), len(cfg.sampler.fanouts))
    return model, build_batch_source(cfg, graph, torch.device("cpu")), graph


@pytest.mark.parametrize("log_every, logged_steps", [(2, [1, 3, 5, 7, 8]), (3, [2, 5, 8]), (1000, [8])])
def test_an_epoch_reads_the_device_once_per_log_window(data_root, host_reads, log_every, logged_steps):
    """9 batches (140 cora nodes, 16 a batch): one read at every log_every-th batch and at the
    last, none else (the loop before made 2 reads a batch: 18)."""
    model, source, graph = cora_model_and_batches(data_root)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    seeds = epoch_seed_batches(graph.train_idx, 16, run_seed=0, epoch=1)
    logged = []
    stats = train_epoch(model, optimizer, source.run(seeds, 0), len(seeds), False,
                        on_log=lambda step, loss: logged.append(step), log_every=log_every)
    assert stats["batches"] == 9 and stats["seeds"] == 140
    assert logged == logged_steps
    assert len(host_reads) == len(logged_steps), host_reads
    host_reads.clear()
    loss, accuracy = evaluate(model, source.run(seeds, 0), len(seeds))
    assert len(host_reads) == 1 and 0 <= accuracy <= 1 and loss > 0


def tensorboard_scalars(out_dir, tag):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    events = EventAccumulator(str(out_dir))
    events.Reload()
    return [(e.step, e.value) for e in events.Scalars(tag)]


def test_sparse_reads_give_the_figures_of_per_batch_reads(tmp_path, data_root):
    """The run recorded with a read per batch (tests/data/losses_276f306.json: 5 batches an
    epoch, 32 seeds each but the last's 12), trained reading every 3rd batch: the same epoch
    losses and test accuracy; batch/loss is the seed-weighted mean of batches 0-2, 3-4, 5-7, 8-9."""
    recorded = json.loads((REPO / "tests" / "data" / "losses_276f306.json").read_text())
    before = recorded["runs"]["serial"]
    out = tmp_path / "run"
    # model.fast_dropout=false: F.dropout's draws, as when the losses were recorded (and, in its overrides,
    # sampler.draws=per_hop: the draws then).
    result = train(make_config(*recorded["overrides"], "model.fast_dropout=false", f"data.root={data_root}",
                               "pipeline=serial", "trainer.inference=sampled",  # evaluated as recorded
                               "trainer.log_every=3", f"run.out_dir={out}"))
    assert [e["loss"] for e in result.history] == pytest.approx(before["epoch_loss"], rel=1e-6)
    assert result.final["test_acc"] == before["test_acc"]
    losses = before["batch_loss"]
    sizes = [32, 32, 32, 32, 12] * 2

    def mean(first, last):
        return (sum(losses[i] * sizes[i] for i in range(first, last + 1))
                / sum(sizes[first:last + 1]))
    expected = [(2, mean(0, 2)), (4, mean(3, 4)), (7, mean(5, 7)), (9, mean(8, 9))]
    logged = tensorboard_scalars(out, "batch/loss")
    assert [step for step, _ in logged] == [step for step, _ in expected]
    assert [value for _, value in logged] == pytest.approx([value for _, value in expected], rel=1e-6)
