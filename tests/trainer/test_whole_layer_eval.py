"""Layer-wise evaluation by whole layers (trainer/loop/plan.py's WholeLayerPlan,
trainer/models/sparse.py's `sage_whole_layer`) gives the figures the batch-by-batch plans gave, bit
for bit: the same logits as the kept LayerwisePlan and the async pipeline's PipelinePlan, and the
same losses and accuracies in a run at a fixed seed (serial and async) as that run evaluated the
earlier way."""
import json

import pytest
import torch

from conveyor.trainer.loop import evaluation
from conveyor.trainer.loop.layerwise import layerwise_logits, runs_whole_layers
from conveyor.trainer.loop.plan import LayerwisePlan, WholeLayerPlan
from conveyor.trainer.models.sampled import SampledGNN
from conveyor.trainer.run import train
from tests.helpers import make_config, power_law_graph

CPU = torch.device("cpu")


def sage(graph, hidden, layers, normalize=False):
    torch.manual_seed(0)
    model = SampledGNN("sage", graph.x.size(1), hidden, graph.num_classes, layers).eval()
    for conv in model.layers:
        conv.normalize = normalize
    return model


@pytest.mark.parametrize("hidden,layers,batch_size,normalize", [
    (64, 3, 300, False),  # widening then narrowing, several batches a layer
    (16, 2, 4096, False),  # one batch a layer
    (2000, 2, 500, True),  # widening to the last layer too (hidden beyond the classes' width), normalised
    (64, 1, 300, False),
])
def test_whole_layers_give_the_batches_logits_bit_for_bit(cora, hidden, layers, batch_size, normalize):
    model, nodes = sage(cora, hidden, layers, normalize), torch.cat([cora.val_idx, cora.test_idx])
    batches = layerwise_logits(model, cora, nodes, batch_size, CPU, plan=LayerwisePlan(cora, nodes, layers, batch_size))
    plan = WholeLayerPlan(cora, nodes, layers, batch_size)
    for _ in range(2):  # the second pass reuses the kept matrices
        assert torch.equal(layerwise_logits(model, cora, nodes, batch_size, CPU, plan=plan), batches)
    assert all(a.kept for a in plan.adjacencies)


def test_whole_layers_on_a_graph_with_self_loops_parallel_edges_and_isolated_targets():
    graph = power_law_graph(num_nodes=400, num_edges=6000)
    graph.x = torch.randn(400, 12, generator=torch.Generator().manual_seed(1))
    graph.y = torch.randint(0, 5, (400,), generator=torch.Generator().manual_seed(2))
    model = SampledGNN("sage", 12, 32, 5, 3).eval()
    nodes = torch.tensor([0, 7, 7, 399, 3, 200])  # a repeated node, unsorted
    batches = layerwise_logits(model, graph, nodes, 50, CPU, plan=LayerwisePlan(graph, nodes, 3, 50))
    assert torch.equal(layerwise_logits(model, graph, nodes, 50, CPU), batches)  # chosen without a plan


def test_the_async_pipelines_plan_gives_the_same_logits(cora):
    from conveyor.cache import CacheSettings, CacheSpec
    from conveyor.pipeline import PipelineSettings, batch_source
    from conveyor.samplers import SamplerSpec
    from conveyor.trainer.loop.plan import PipelinePlan
    model, nodes = sage(cora, 64, 2), torch.cat([cora.val_idx, cora.test_idx])
    whole = layerwise_logits(model, cora, nodes, 300, CPU, plan=WholeLayerPlan(cora, nodes, 2, 300))
    with batch_source(cora, SamplerSpec("bsp", [5, 5]), CacheSpec(CacheSettings(policy="degree", capacity=0.3)),
                      "cpu", PipelineSettings(name="async", threads=1)) as source:
        piped = layerwise_logits(model, cora, nodes, 300, CPU, plan=PipelinePlan(source, cora, nodes, 2, 300))
    assert torch.equal(piped, whole)


def test_which_models_and_runs_take_whole_layers(cora):
    sage_model = sage(cora, 16, 2)
    assert runs_whole_layers(sage_model, cora, CPU)
    gcn = SampledGNN("gcn", cora.x.size(1), 16, cora.num_classes, 2)
    assert not runs_whole_layers(gcn, cora, CPU)  # only SAGE's layers have the whole-layer form
    assert not runs_whole_layers(sage_model, cora, CPU, feature_dtype=torch.float16)  # rounded as the cache does
    assert not runs_whole_layers(sage_model, cora, CPU, lambda: torch.autocast("cpu", dtype=torch.bfloat16))
    assert not runs_whole_layers(sage_model, cora, torch.device("meta"))


@pytest.mark.parametrize("pipeline", ["serial", "async"])
def test_a_runs_figures_are_the_ones_the_batches_gave(tmp_path, monkeypatch, data_root, pipeline):
    """The same run at seed 0, evaluated by whole layers and (the switch turned off) batch by batch
    as before (async: the batches drawn by the stage processes, PipelinePlan): every epoch's loss,
    validation and test figures the same, to the last bit."""
    plans = []

    class Counted(WholeLayerPlan):
        def __init__(self, *args):
            plans.append(self)
            super().__init__(*args)

    def figures(name):
        out = tmp_path / name
        train(make_config("data=cora", f"data.root={data_root}", "model=sage", f"pipeline={pipeline}",
                          "trainer.epochs=3", "trainer.inference=layerwise", f"run.out_dir={out}"))
        history = json.loads((out / "metrics.json").read_text())["epochs"]
        return [{k: e[k] for k in ("loss", "val_acc", "val_loss", "test_acc", "test_loss")} for e in history]

    monkeypatch.setattr(evaluation, "WholeLayerPlan", Counted)
    whole = figures("whole")
    assert len(plans) == 1 and all(a is not None for a in plans[0].adjacencies)  # made once, used by every evaluation
    monkeypatch.setattr(evaluation, "runs_whole_layers", lambda *args: False)
    assert figures("batches") == whole
    assert len(plans) == 1
