"""One road from both doors (#46): `conveyor.NeighborLoader`'s keywords become the settings the
command line builds (`SamplerSettings`), and the trainer's run (`fit()`, the command line) makes
its sampler of those settings as the loader does, so the same seed, fanouts and `sampler.draws`
draw the same subgraph through both; the draws differ only when the setting does."""
import pytest
import torch

from conveyor import NeighborLoader
from conveyor.config import load_settings
from conveyor.loader.seeds import EpochPlan
from conveyor.samplers import SamplerSpec
from conveyor.samplers.subgraph import pyg_edges
from conveyor.trainer.context import LocalContext
from tests.helpers import feature_graph

SEED, BATCH, FANOUTS = 3, 40, [4, 3]


def loader_first_batch(graph, **keywords):
    with NeighborLoader(graph, num_neighbors=FANOUTS, batch_size=BATCH, input_nodes=graph.train_idx, shuffle=True,
                        pipeline="serial", seed=SEED, **keywords) as loader:
        return next(iter(loader))


def trainer_first_batch(graph, *overrides):
    """Epoch 1's first batch as the trainer draws it: its settings as the command line (and fit())
    builds them, its seed plan and its sampler made of them (trainer/run.py, trainer/context.py)."""
    settings = load_settings(["data=memory", f"run.seed={SEED}", f"trainer.batch_size={BATCH}",
                              "sampler.fanouts=[4,3]", *overrides], check_machine=False)
    plan = LocalContext(settings, graph=graph).seed_plan(settings.run.seed)
    assert isinstance(plan, EpochPlan)
    sampler = SamplerSpec.of(settings.sampler, settings.run.seed, "cpu").build(graph, "cpu")
    sampler.manual_seed(plan.sampler_seed(1))
    return sampler.sample(plan.nodes[plan.positions(1)[0]])


@pytest.mark.parametrize("draws", [None, "per_node", "per_hop"])
def test_both_doors_draw_the_same_subgraph(draws):
    graph = feature_graph()
    ours = loader_first_batch(graph, **({"draws": draws} if draws else {}))
    trained = trainer_first_batch(graph, *([f"sampler.draws={draws}"] if draws else []))
    edge_index, *_ = pyg_edges(trained)
    assert torch.equal(ours.n_id, trained.n_id)
    assert torch.equal(ours.edge_index, edge_index)
    assert ours.batch_size == BATCH


def test_the_setting_changes_the_draws_and_per_node_is_the_default():
    graph = feature_graph()
    default, per_node, per_hop = (trainer_first_batch(graph, *extra) for extra in
                                  ([], ["sampler.draws=per_node"], ["sampler.draws=per_hop"]))
    assert torch.equal(default.n_id, per_node.n_id)
    assert not torch.equal(per_node.n_id, per_hop.n_id)  # per_hop: every reached node draws again
    hop2 = per_node.edge_index_per_hop[1]  # per_node: hop 2 repeats hop 1's draws, then the new nodes'
    assert torch.equal(hop2[:, :per_node.edge_index_per_hop[0].size(1)], per_node.edge_index_per_hop[0])


def test_a_sampler_that_cannot_draw_so_is_refused_in_both_doors():
    graph = feature_graph()
    with pytest.raises(Exception, match="sampler pyg .* does not draw sampler.draws=per_hop"):
        loader_first_batch(graph, node_sampler="pyg", draws="per_hop")
    with pytest.raises(Exception, match="sampler.draws must be one of per_hop, per_node"):
        loader_first_batch(graph, draws="sideways")
