"""Recall@K of task=link (trainer/loop/link_ranking.py): by hand, as PyG's LinkPredRecall, and
the ranking that leaves the known pairs out, for the dot and the mlp decoder."""
import pytest
import torch

from conveyor.trainer.loop.link_ranking import recall_at_k, split_recall, top_destinations
from conveyor.trainer.models.decoder import LinkModel


def test_recall_by_hand():
    sources = torch.tensor([0, 1, 2])
    top = torch.tensor([[5, 6], [7, 5], [6, -1]])  # -1: no pick left
    truth = torch.tensor([[0, 0, 0, 1, 2, 2], [5, 8, 9, 9, 6, 6]])  # node 2's pair twice: one truth
    # 0 finds 5 of {5, 8, 9}: 1/3; 1 finds none of {9}: 0; 2 finds 6 of {6}: 1
    assert recall_at_k(sources, top, truth) == pytest.approx((1 / 3 + 0 + 1) / 3)


def test_recall_is_pygs_link_pred_recall():
    from torch_geometric.metrics import LinkPredRecall

    g = torch.Generator().manual_seed(0)
    top = torch.stack([torch.randperm(40, generator=g)[:10] for _ in range(25)])
    truth = torch.unique(torch.stack([torch.randint(0, 25, (120,), generator=g),
                                      torch.randint(0, 40, (120,), generator=g)]), dim=1)
    metric = LinkPredRecall(k=10)
    metric.update(top, truth)
    sources = torch.arange(25)
    have = torch.isin(sources, truth[0])  # PyG averages over the rows with a truth
    assert recall_at_k(sources[have], top[have], truth) == pytest.approx(float(metric.compute()), abs=1e-6)


def test_the_known_pairs_are_never_recommended_dot_and_mlp():
    torch.manual_seed(0)
    z_src, z_dst = torch.randn(3, 4), torch.randn(6, 4)
    known = torch.tensor([[0, 0, 2], [1, 4, 0]])
    for decoder in ("dot", "mlp"):
        model = LinkModel(torch.nn.Identity(), decoder, 4).eval()
        scores = model.score(torch.cat([z_src, z_dst]), torch.stack(
            [torch.arange(3).repeat_interleave(6), 3 + torch.arange(6).repeat(3)])).view(3, 6)
        scores[known[0], known[1]] = -torch.inf
        top = top_destinations(model, z_src, z_dst, known, 6)
        assert torch.equal(top[:, :4], torch.topk(scores, 4, dim=1).indices)
        assert top[0, -2:].tolist() == [-1, -1] and top[2, -1] == -1 and top[1].min() >= 0
        assert not any((top[r] == c).any() for r, c in known.t().tolist())


def test_split_recall_ranks_the_destination_type_only():
    """Global ids: sources 0..1 (users), destinations 2..5 (movies); embeddings that put user 0
    nearest movie 3 and user 1 nearest movie 5, with user 0's pair (0, 3) already known."""
    nodes = torch.arange(6)
    z = torch.tensor([[1.0, 0], [0, 1], [0, 0], [5, 0], [2, 0], [0, 3]])
    links = torch.tensor([[0, 1, 0], [4, 5, 2]])
    labels = torch.tensor([1.0, 1.0, 0.0])
    model = LinkModel(torch.nn.Identity(), "dot").eval()
    known = torch.tensor([[0], [3]])
    assert split_recall(model, z, nodes, links, labels, torch.arange(2, 6), known, 1, "cpu") == 1.0
    assert split_recall(model, z, nodes, links, labels, torch.arange(2, 6), torch.empty(2, 0, dtype=torch.long),
                        1, "cpu") == 0.5  # (0, 3) ranks first for user 0 when not known
