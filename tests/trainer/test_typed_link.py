"""task=link on a typed graph (trainer/typed_link_split.py, trainer/link_task.py): one edge type
split with its reverse, as PyG's RandomLinkSplit(edge_types, rev_edge_types) splits it or by time,
with nothing held out leaking through either relation; negatives drawn among the edge type's node
types; `conveyor task=link data=synthetic_movielens` and `fit(HeteroData, to_hetero(...),
task="link", edge_type=...)` learning the ratings, with Recall@K, and a resume replaying a run."""
import random

import pytest
import torch
from torch_geometric.transforms import RandomLinkSplit

import conveyor
from conveyor.core import ConveyorError
from conveyor.partition.datasets.synthetic_movielens import RATES, REV_RATES, generate
from conveyor.samplers.link import LinkSampler, Negatives
from conveyor.trainer.run import train
from conveyor.trainer.typed_link_split import check_temporal_sampler, reverse_of, split_typed_links
from tests.helpers import make_config

USERS = 30  # generate(0.05): 30 users (global ids 0..29), then 487 movies


@pytest.fixture(scope="module")
def movielens():
    return generate(0.05, 0, num_features=24)


def pairs(edge_index) -> set:
    return set(map(tuple, edge_index.t().tolist()))


def relation_pairs(graph, edge_type) -> set:
    """The graph's edges of `edge_type` as (user, movie) global-id pairs (a reverse edge flipped)."""
    edges = graph.edge_index()[:, graph.edge_attrs["edge_type"].long() == graph.schema.relation(edge_type)]
    return pairs(edges if edge_type == RATES else edges.flip(0))


@pytest.mark.parametrize("how", ["random", "temporal"])
def test_no_held_out_link_reaches_a_message_graph_through_either_relation(movielens, how):
    split = split_typed_links(movielens, RATES, 0.1, 0.1, seed=3, how=how)
    every = relation_pairs(movielens, RATES)
    train_rates, train_rev = relation_pairs(split.train_graph, RATES), relation_pairs(split.train_graph, REV_RATES)
    test_rates, test_rev = relation_pairs(split.test_graph, RATES), relation_pairs(split.test_graph, REV_RATES)
    assert train_rates == train_rev == pairs(split.train_links) and test_rates == test_rev
    val_pos = pairs(split.val_links[:, split.val_labels == 1])
    test_pos = pairs(split.test_links[:, split.test_labels == 1])
    assert len(val_pos) == len(test_pos) == 325 and len(train_rates) == len(every) - 650 == 2604
    assert not (val_pos | test_pos) & train_rates and not test_pos & test_rates and val_pos <= test_rates
    for links, labels in ((split.val_links, split.val_labels), (split.test_links, split.test_labels)):
        negatives = links[:, labels == 0]
        assert negatives.size(1) == 325 and not pairs(negatives) & every
        assert negatives[0].max() < USERS <= negatives[1].min()  # (user, movie) pairs
    if how == "temporal":  # train on the past, test on the future
        time = dict(zip(map(tuple, movielens.to_data()[RATES].edge_index.t().tolist()),
                        movielens.to_data()[RATES].time.tolist()))
        times = [[time[(u, m - USERS)] for u, m in links] for links in (train_rates, val_pos, test_pos)]
        assert max(times[0]) <= min(times[1]) and max(times[1]) <= min(times[2])


def test_the_random_split_is_pygs_with_the_reverse_edge_type(movielens):
    split = split_typed_links(movielens, RATES, 0.1, 0.1, seed=3)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(3)
        random.seed(3)
        train, val, test = RandomLinkSplit(0.1, 0.1, edge_types=RATES, rev_edge_types=REV_RATES,
                                           add_negative_train_samples=False)(movielens.to_data())
    offset = torch.tensor([[0], [USERS]])
    assert torch.equal(split.val_links, val[RATES].edge_label_index + offset)
    assert torch.equal(split.test_links, test[RATES].edge_label_index + offset)
    assert torch.equal(split.train_links, train[RATES].edge_label_index + offset)
    assert reverse_of(movielens.schema, RATES) == REV_RATES


def test_training_negatives_are_drawn_among_the_edge_types_node_types(movielens):
    links = torch.tensor([[0, 1, 2], [USERS, USERS + 5, USERS + 9]])
    sampler = LinkSampler(None, movielens.num_nodes, links, negatives=Negatives("binary", 50), seed=0,
                          src_nodes=(0, USERS), dst_nodes=(USERS, 487))
    seeds, extras = sampler.links(torch.arange(3))
    src, dst = seeds[extras["edge_label_index"]]
    assert src.numel() == 153 and src.max() < USERS <= dst.min() and dst.max() < USERS + 487
    assert len(set(dst[3:].tolist())) > 50  # spread over the movies


def test_a_typed_split_is_refused_where_it_cannot_be(movielens):
    with pytest.raises(ConveyorError, match="has no 'time' attribute"):
        split_typed_links(generate(0.05, 0, 24).__class__(**{**movielens.__dict__, "typed": {
            k: v for k, v in movielens.typed.items() if not k.endswith(".time")}}), RATES, 0.1, 0.1, 0, "temporal")
    with pytest.raises(ConveyorError, match="no edge type"):
        split_typed_links(movielens, ("user", "likes", "movie"), 0.1, 0.1, 0)


MOVIELENS_LINK = ["task=link", "data=synthetic_movielens", "data.scale=0.05", "data.num_features=24",
                  "sampler.fanouts=[5,5]", "model.hidden=16", "trainer.batch_size=256", "trainer.lr=0.01",
                  "trainer.eval_every=1", "task.val_ratio=0.1", "task.test_ratio=0.1"]


def test_the_command_learns_ratings_and_a_resume_replays_it(tmp_path):
    common = [*MOVIELENS_LINK, f"data.root={tmp_path / 'data'}", "trainer.epochs=2", "pipeline=serial"]
    straight = train(make_config(*common, f"run.out_dir={tmp_path / 'straight'}"))
    train(make_config(*common, "trainer.epochs=1", f"run.out_dir={tmp_path / 'resumed'}"))
    resumed = train(make_config(*common, "run.resume=true", f"run.out_dir={tmp_path / 'resumed'}"))
    final = straight.final
    assert final["test_auc"] > 0.75 and final["val_auc"] > 0.75, final  # random scores: 0.5
    assert 0 < final["test_recall@20"] <= 1 and 0 < final["test_hits@20"] <= 1
    for one, two in zip(straight.history, resumed.history, strict=True):
        for key in ("loss", "train_acc", "val_auc", "test_auc", "test_recall@20"):
            assert two[key] == pytest.approx(one[key], rel=1e-5, abs=1e-4), key


def test_fit_trains_a_to_hetero_encoder_on_a_heterodata(tmp_path):
    from torch_geometric.nn import GraphSAGE, to_hetero

    data = generate(0.05, 0, num_features=24).to_data()
    del data["movie"].y  # not read: task=link learns the edges
    model = to_hetero(GraphSAGE((-1, -1), 16, 2, 16), data.metadata(), aggr="sum")
    result = conveyor.fit(data, model, task="link", edge_type=RATES, epochs=2, fanouts=[5, 5], batch_size=256,
                          out_dir=tmp_path, overrides=["pipeline=serial", "model.hidden=16", "trainer.lr=0.01",
                                                       "trainer.progress=false", "task.recall_k=10"])
    assert result.model is model and result.final["test_auc"] > 0.75, result.final
    assert 0 < result.final["test_recall@10"] <= 1


TEMPORAL_LINK = [*MOVIELENS_LINK, "task.split=temporal"]


def temporal_batches(tmp_path, strategy: str = "uniform", seed: int = 0):
    """The training batches of one epoch of a temporal split, as the trainer's sampler stage draws
    them, with the split and the graph they were drawn from."""
    from conveyor.loader.seeds import EpochPlan
    from conveyor.trainer.link_task import LinkTask

    settings = make_config(*TEMPORAL_LINK, f"data.root={tmp_path / 'data'}", f"run.out_dir={tmp_path / 'run'}",
                           f"task.temporal_strategy={strategy}", f"run.seed={seed}")
    task = LinkTask(settings, generate(0.05, 0, num_features=24))
    sampler = task.sampler("cpu").build(task.graph, "cpu")
    plan = EpochPlan(torch.arange(task.split.train_links.size(1)), 256, seed)
    sampler.manual_seed(plan.sampler_seed(1))
    positions = plan.positions(1)
    return task, positions, [sampler.sample(p) for p in positions]


@pytest.mark.parametrize("strategy", ["uniform", "last"])
def test_no_temporal_training_batch_holds_an_edge_later_than_its_link(tmp_path, strategy):
    """Every sampled edge of every training batch of a temporal split is at or before the time of the
    link whose subgraph holds it (PyG's temporal LinkNeighborLoader, edge_label_time), checked
    exactly, edge by edge; the same graph without time would have drawn later ones."""
    from conveyor.samplers.temporal import time_of

    task, positions, batches = temporal_batches(tmp_path, strategy)
    _, edge_time = time_of(task.graph, "time")
    later_candidates = drawn = 0
    for p, batch in zip(positions, batches):
        link_time = task.split.train_times[p]
        owner = batch.extras["batch"]  # each node's link (negatives: the positive whose time they take)
        assert torch.equal(batch.extras["edge_label_time"], link_time.repeat(2)[:owner.numel() // 2])
        for edges, pos in zip(batch.edge_index_per_hop, batch.edge_pos_per_hop):
            limit = link_time[owner[edges[1]]]
            assert bool((edge_time[pos] <= limit).all())
            drawn += pos.numel()
            rows = batch.n_id[edges[1]]
            later_candidates += int(sum((edge_time[task.graph.indptr[r]:task.graph.indptr[r + 1]] > t).sum()
                                        for r, t in zip(rows[:50].tolist(), limit[:50].tolist())))
    assert drawn > 10_000 and later_candidates > 1000  # the bound was met by choice, not by chance
    assert len(batches) == 11 and task.split.train_times.shape == (task.split.train_links.size(1),)


def test_temporal_training_batches_repeat_from_the_seed(tmp_path):
    _, _, first = temporal_batches(tmp_path)
    _, _, again = temporal_batches(tmp_path)
    _, _, other = temporal_batches(tmp_path, seed=1)
    for one, two in zip(first, again, strict=True):
        assert torch.equal(one.n_id, two.n_id) and all(torch.equal(a, b) for a, b in zip(one.edge_pos_per_hop,
                                                                                          two.edge_pos_per_hop))
    assert not torch.equal(first[0].n_id, other[0].n_id)


def test_a_temporal_run_trains_serial_equals_async_and_resumes_exactly(tmp_path):
    """`task.split=temporal` trains on batches drawn by time: the loss falls and the training links
    are told from their negatives; the async pipeline draws what the serial one draws, and a resumed
    run replays the straight one."""
    common = [*TEMPORAL_LINK, f"data.root={tmp_path / 'data'}", "trainer.epochs=3"]
    serial = train(make_config(*common, "pipeline=serial", f"run.out_dir={tmp_path / 'serial'}"))
    pipelined = train(make_config(*common, "pipeline=async", f"run.out_dir={tmp_path / 'async'}"))
    train(make_config(*common, "pipeline=serial", "trainer.epochs=1", f"run.out_dir={tmp_path / 'resumed'}"))
    resumed = train(make_config(*common, "pipeline=serial", "run.resume=true", f"run.out_dir={tmp_path / 'resumed'}"))
    history = serial.history
    assert history[-1]["loss"] < history[0]["loss"] - 0.1 and history[-1]["train_acc"] > 0.75, history
    for other in (pipelined.history, resumed.history):
        for one, two in zip(history, other, strict=True):
            for key in ("loss", "train_acc", "val_auc", "test_auc", "test_recall@20"):
                assert two[key] == pytest.approx(one[key], rel=1e-5, abs=1e-4), key


def test_a_temporal_split_refuses_a_sampler_that_cannot_draw_by_time(tmp_path):
    with pytest.raises(ConveyorError, match=r"sampler bsp \(task.split=temporal\) .*sampler.draws=per_hop"):
        make_config(*TEMPORAL_LINK, "sampler.draws=per_hop", f"run.out_dir={tmp_path / 'run'}")
    settings = make_config(*TEMPORAL_LINK, f"run.out_dir={tmp_path / 'run'}")
    own = settings.replace(sampler={"_target_": "my.Sampler"})
    with pytest.raises(ConveyorError, match=r"task.split=temporal draws each training link's subgraph by time"):
        check_temporal_sampler(own, "cpu")
    with pytest.raises(ConveyorError, match="task.temporal_strategy"):
        make_config(*TEMPORAL_LINK, "task.temporal_strategy=first", f"run.out_dir={tmp_path / 'run'}")
    from conveyor.samplers import temporal
    from conveyor.trainer import settings as trainer_settings
    assert trainer_settings.TEMPORAL_STRATEGIES == temporal.TEMPORAL_STRATEGIES  # the setting's names: the sampler's


def test_compare_with_a_temporal_split_needs_pygs_temporal_sampling(tmp_path):
    """PyG's reference would have to draw by time as the run does: without pyg-lib it cannot, and
    the comparison is refused before any work rather than set against untimed batches."""
    import torch_geometric.typing as pyg_typing

    overrides = ["mode=compare", *TEMPORAL_LINK, f"run.out_dir={tmp_path / 'run'}", "compare.seeds=1"]
    if pyg_typing.WITH_PYG_LIB:
        make_config(*overrides)
    else:
        with pytest.raises(ConveyorError, match="mode=compare with task.split=temporal.*needs pyg-lib"):
            make_config(*overrides)
        assert not (tmp_path / "run").exists()
