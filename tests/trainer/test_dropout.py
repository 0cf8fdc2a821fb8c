"""trainer/models/dropout.py: torch's dropout distribution from 16-bit slices of random words. Fixed
seeds; each bound is 5 standard deviations of what it measures (a false failure ~1 in 1.7M)."""
import math

import pytest
import torch
import torch.nn.functional as F
from scipy import stats

from conveyor.trainer.models.dropout import SLICES, dropout, keep_mask

N = 1_000_000


def keep_probability(p: float) -> float:
    return 1 - round(p * SLICES) / SLICES


@pytest.mark.parametrize("p", [0.1, 0.25, 0.5, 0.9, 0.3337])
def test_the_keep_fraction_is_one_minus_p(p):
    torch.manual_seed(0)
    mask = keep_mask((N,), p)
    q = keep_probability(p)
    assert abs(q - (1 - p)) <= 2 ** -17  # p at 16-bit precision
    sigma = math.sqrt(q * (1 - q) / N)
    assert abs(mask.double().mean().item() - q) <= 5 * sigma, (p, mask.double().mean().item())


def test_each_slice_of_a_word_keeps_alike_and_neighbours_are_independent():
    """The four slices of a word (positions i % 4) each keep with probability 1 - p; neighbours
    within a word and across two words are uncorrelated: sample correlation ~ N(0, 1/n)."""
    torch.manual_seed(1)
    p = 0.5
    mask = keep_mask((4 * N,), p).double().view(N, 4)
    sigma = math.sqrt(0.25 / N)
    assert (mask.mean(0) - 0.5).abs().max().item() <= 5 * sigma, mask.mean(0)
    flat = mask.flatten()
    for name, a, b in [("within a word, slices 0-1", mask[:, 0], mask[:, 1]),
                       ("within a word, slices 2-3", mask[:, 2], mask[:, 3]),
                       ("across words, slice 3 and the next 0", mask[:-1, 3], mask[1:, 0]),
                       ("every neighbour", flat[:-1], flat[1:])]:
        r = torch.corrcoef(torch.stack([a, b]))[0, 1].item()
        assert abs(r) * math.sqrt(a.numel()) <= 5, (name, r)
    # The four slices of a word jointly: each of the 16 keep patterns as often (chi-square; p < 5.7e-7
    # is 5 sigma), and one word's pattern independent of the next word's (256 pairs).
    pattern = (mask.long() * torch.tensor([1, 2, 4, 8])).sum(1)
    assert stats.chisquare(torch.bincount(pattern, minlength=16).numpy()).pvalue > 5.7e-7
    pairs = pattern[:-1] * 16 + pattern[1:]
    assert stats.chisquare(torch.bincount(pairs, minlength=256).numpy()).pvalue > 5.7e-7


def test_kept_elements_are_scaled_exactly_and_dropped_ones_are_zero():
    torch.manual_seed(2)
    x = torch.randn(1000, 64)  # no exact zeros
    for p in (0.5, 0.3):
        y = dropout(x, p)
        kept = y != 0
        assert torch.equal(y[kept], x[kept] * (1.0 / (1.0 - p)))
        assert 0 < kept.sum() < x.numel()


def test_the_gradient_is_the_same_mask_times_the_scale():
    torch.manual_seed(3)
    x = torch.randn(500, 33, requires_grad=True)  # 16500 elements: not a whole number of words
    p = 0.4
    y = dropout(x, p)
    g = torch.randn_like(y)
    y.backward(g)
    keep = y.detach() != 0
    assert torch.equal(x.grad, g * keep * (1.0 / (1.0 - p)))


def test_p_zero_and_p_one_and_eval():
    torch.manual_seed(4)
    x = torch.randn(100, 10, requires_grad=True)
    zero = dropout(x, 0.0)
    assert torch.equal(zero, x)
    zero.sum().backward()
    assert torch.equal(x.grad, torch.ones_like(x))
    x.grad = None
    one = dropout(x, 1.0)
    assert torch.equal(one, torch.zeros_like(x))
    one.sum().backward()
    assert torch.equal(x.grad, torch.zeros_like(x))
    assert dropout(x, 0.5, training=False) is x
    with pytest.raises(ValueError, match="between 0 and 1"):
        dropout(x, 1.5)


def test_the_same_seed_gives_the_same_mask_and_fast_false_is_f_dropout():
    x = torch.randn(300, 40)
    torch.manual_seed(5)
    a = dropout(x, 0.5)
    torch.manual_seed(5)
    b = dropout(x, 0.5)
    c = dropout(x, 0.5)  # the stream moves on
    assert torch.equal(a, b) and not torch.equal(b, c)
    torch.manual_seed(6)
    slow = dropout(x, 0.5, fast=False)
    torch.manual_seed(6)
    assert torch.equal(slow, F.dropout(x, 0.5, training=True))


@pytest.mark.parametrize("name, by_default", [("sage", True), ("gcn", True), ("mlp", True), ("gat", False)])
def test_model_fast_dropout_is_for_the_built_in_models_unless_set(name, by_default):
    """null (the default): conveyor's masks for the built-in models only; model=gat names PyG's GAT
    by model._target_, which then draws F.dropout's masks as written. true/false: for every model."""
    from conveyor.trainer.models.sampled import build_model
    from tests.helpers import make_config
    for setting, fast in (("null", by_default), ("true", True), ("false", False)):
        settings = make_config(f"model={name}", f"model.fast_dropout={setting}").model
        model = build_model(settings, 8, 3, 2)
        assert model.fast_dropout is fast, (name, setting, type(model).__name__)
        model.train()
        x = torch.randn(20, 8)
        layers = [(torch.tensor([[1, 2], [0, 1]]), 20, 10), (torch.tensor([[1], [0]]), 10, 4)]
        torch.manual_seed(7)
        a = model(x, layers)
        torch.manual_seed(7)
        assert torch.equal(a, model(x, layers))  # the run's seed replays the masks either way
