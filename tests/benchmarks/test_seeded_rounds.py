"""benchmarks/seeded_rounds.py: the seed set before an unedited script (the same seed, the same
draws; another seed, others), the loaders' alternating order, and the 'within noise' verdict
(|diff| <= 2 * Welch's standard error) with its figures, as the two example benchmarks use them."""
import math
import random

import numpy
import pytest
import torch

from benchmarks.seeded_rounds import SEED_PRELUDE, Spread, Verdict, ratio_by_round, round_order


def draws(seed_everything, seed: int) -> list:
    """What a script draws from Python's, numpy's and torch's generators after the round's seed."""
    seed_everything(seed)
    return [random.random(), float(numpy.random.rand()), torch.rand(1).item(), torch.randperm(10).tolist()]


def test_a_seed_fixes_python_numpy_and_torch_draws():
    prelude = {}
    exec(SEED_PRELUDE, prelude)  # as the benchmarks' runners put it before the script
    first, again, other = (draws(prelude["seed_everything"], s) for s in (3, 3, 4))
    assert first == again
    assert all(a != b for a, b in zip(first, other))  # each of the three generators moved


def test_loaders_alternate_from_round_to_round():
    assert [round_order(["conveyor", "pyg"], k) for k in range(3)] == [
        ["conveyor", "pyg"], ["pyg", "conveyor"], ["conveyor", "pyg"]]


def test_spread_is_mean_sample_sd_and_range():
    spread = Spread.of([0.5, 0.7, None, 0.6])  # a failed round's None is left out
    assert (spread.n, spread.low, spread.high) == (3, 0.5, 0.7)
    assert spread.mean == pytest.approx(0.6) and spread.sd == pytest.approx(0.1)
    assert spread.text() == "0.600 ± 0.100 (0.500-0.700; n=3)"
    assert Spread.of([None]) is None and Spread.of([0.4]).sd == 0.0


def test_verdict_is_twice_welchs_standard_error():
    conveyor, pyg = Spread.of([0.60, 0.62, 0.64, 0.66, 0.68]), Spread.of([0.64, 0.67, 0.70, 0.73, 0.76])
    verdict = Verdict.of(conveyor, pyg)
    bound = 2 * math.sqrt(conveyor.sd ** 2 / 5 + pyg.sd ** 2 / 5)  # sds 0.0316 and 0.0474
    assert verdict.diff == pytest.approx(-0.06) and verdict.bound == pytest.approx(bound)
    assert bound == pytest.approx(0.0510, abs=1e-4) and verdict.within_noise is False
    assert verdict.text() == "-0.060 (bound 0.051): **gap**"
    closer = Verdict.of(Spread.of([0.66, 0.68, 0.70, 0.72, 0.74]), pyg)
    assert closer.within_noise is True and closer.text().endswith("within noise")
    assert Verdict.of(Spread.of([0.6]), pyg).within_noise is None  # one round: no sd to judge by


def test_epoch_ratio_is_taken_round_by_round():
    conveyor, pyg = {0: 2.0, 1: 3.0, 2: None, 3: 1.0}, {0: 1.0, 1: 2.0, 2: 1.0, 3: 1.0}
    assert ratio_by_round(conveyor, pyg) == "1.50x (1.00-2.00x)"  # round 2 did not run on conveyor's
    assert ratio_by_round({0: 1.0}, {0: 4.0}) == "0.25x" and ratio_by_round({0: None}, {0: 1.0}) == "-"
