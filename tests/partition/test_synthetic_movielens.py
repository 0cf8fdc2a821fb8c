"""data=synthetic_movielens (partition/datasets/synthetic_movielens.py): a MovieLens-shaped typed
graph of users, movies and timestamped ratings, exact at a fixed seed, offline, cached."""
import torch

from conveyor.config import load_settings
from conveyor.partition.datasets import load_configured
from conveyor.partition.datasets import synthetic_movielens as movielens
from conveyor.partition.datasets.synthetic_movielens import RATES, REV_RATES, generate, sizes
from tests.helpers import refusal


def test_exact_statistics_at_a_fixed_seed():
    graph = generate(0.02, 0, num_features=24)
    data = graph.to_data()
    rates = data[RATES]
    assert (data["user"].num_nodes, data["movie"].num_nodes) == (12, 195) == sizes(0.02)[:2]
    assert torch.bincount(rates.edge_index[0]).tolist() == [97, 19, 65, 97, 34, 10, 90, 97, 97, 79, 97, 97]
    assert torch.bincount((rates.rating * 2).long(), minlength=11).tolist() == [0, 10, 12, 36, 66, 104, 129, 159,
                                                                               148, 97, 118]
    assert (int(rates.time.min()), int(rates.time.max())) == (907807861, 1498564013)
    assert torch.bincount(data["movie"].y, minlength=movielens.GENRES).tolist()[:4] == [96, 28, 22, 9]
    assert [int(data["movie"][f"{s}_mask"].sum()) for s in ("train", "val", "test")] == [117, 29, 49]


def test_shape_as_movielens_reverse_and_no_repeats():
    data = generate(0.05, 3, num_features=30).to_data()
    rates, rev = data[RATES], data[REV_RATES]
    assert data.node_types == ["user", "movie"] and "x" not in data["user"]
    assert data["movie"].x.shape == (data["movie"].num_nodes, 30) and rates.time.dtype == torch.int64
    flags = data["movie"].x[:, :movielens.GENRES]
    assert set(flags.unique().tolist()) == {0.0, 1.0} and flags.sum(1).min() >= 1 and flags.sum(1).max() <= 3
    assert torch.equal(data["movie"].y, flags.argmax(1))  # the first genre: the label
    keys = rates.edge_index[0] * data["movie"].num_nodes + rates.edge_index[1]
    assert keys.unique().numel() == keys.numel()  # no user rates a movie twice
    assert torch.equal(rev.edge_index, rates.edge_index.flip(0)) and torch.equal(rev.time, rates.time)
    assert torch.equal(rev.rating, rates.rating)
    assert movielens.FIRST_TIME <= int(rates.time.min()) and int(rates.time.max()) <= movielens.LAST_TIME
    assert set((rates.rating * 2).unique().long().tolist()) <= set(range(1, 11))
    assert torch.bincount(rates.edge_index[0]).min() >= 5


def test_seeded_cached_and_configured(tmp_path):
    first = movielens.load_synthetic_movielens(tmp_path, scale=0.02, seed=1, num_features=24)
    again = movielens.load_synthetic_movielens(tmp_path, scale=0.02, seed=1, num_features=24)
    other = generate(0.02, 2, num_features=24)
    assert torch.equal(first.indices, again.indices) and not torch.equal(first.indptr, other.indptr)
    assert (tmp_path / "synthetic_movielens" / "scale0.02_seed1_f24").is_dir()
    settings = load_settings(["data=synthetic_movielens", "data.scale=0.02", "data.seed=1", "data.num_features=24",
                              f"data.root={tmp_path}"], check_machine=False)
    assert torch.equal(load_configured(settings.data).indices, first.indices)


def test_bad_sizes_are_refused():
    assert "num_features" in refusal("data=synthetic_movielens", "data.num_features=5")
    assert "data.scale" in refusal("data=synthetic_movielens", "data.scale=9")
