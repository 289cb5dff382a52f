"""MultiSimilarityLoss: a hand-written loop, autograd, and pytorch-metric-learning."""

import math

import numpy as np
import pytest
import torch

from skdml.losses import LOSSES, MultiSimilarityLoss, get_loss, multi_similarity_pairs

pml = pytest.importorskip("pytorch_metric_learning")
from pytorch_metric_learning import losses as pml_losses  # noqa: E402
from pytorch_metric_learning import miners as pml_miners  # noqa: E402


def batch(seed, n_classes=4, per_class=4, dim=8, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(n_classes).repeat_interleave(per_class)
    x = torch.randn(len(y), dim, generator=g, dtype=dtype) + 1.5 * torch.randn(
        n_classes, dim, generator=g, dtype=dtype)[y]
    return x, y


def loop_reference(x, y, alpha=2.0, beta=50.0, base=0.5, epsilon=0.1, mining=True):
    """The paper's Eq. 5-7, one anchor and one pair at a time, in Python floats."""
    z = (x / x.norm(dim=1, keepdim=True)).tolist()
    y = y.tolist()
    n = len(y)

    def sim(i, j):
        return sum(a * b for a, b in zip(z[i], z[j]))

    total = 0.0
    for i in range(n):
        pos = [j for j in range(n) if j != i and y[j] == y[i]]
        neg = [j for j in range(n) if y[j] != y[i]]
        if mining:
            hardest_neg = max((sim(i, j) for j in neg), default=-math.inf)
            hardest_pos = min((sim(i, j) for j in pos), default=math.inf)
            pos = [j for j in pos if sim(i, j) - epsilon < hardest_neg]
            neg = [j for j in neg if sim(i, j) + epsilon > hardest_pos]
        total += math.log(1 + sum(math.exp(-alpha * (sim(i, j) - base)) for j in pos)) / alpha
        total += math.log(1 + sum(math.exp(beta * (sim(i, j) - base)) for j in neg)) / beta
    return total / n


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("mining", [True, False])
def test_matches_a_hand_written_loop(seed, mining):
    x, y = batch(seed)
    ours = MultiSimilarityLoss(mining=mining)(x, y)
    assert ours.item() == pytest.approx(loop_reference(x, y, mining=mining), rel=1e-10)
    params = dict(alpha=3.0, beta=20.0, base=0.3, epsilon=0.05)
    ours = MultiSimilarityLoss(mining=mining, **params)(x, y)
    assert ours.item() == pytest.approx(loop_reference(x, y, mining=mining, **params), rel=1e-10)


def test_mining_actually_drops_pairs():
    x, y = batch(0)
    S = torch.nn.functional.normalize(x, dim=1) @ torch.nn.functional.normalize(x, dim=1).T
    pos, neg = multi_similarity_pairs(S, y)
    n_pos = (y[:, None] == y[None, :]).sum() - len(y)
    assert 0 < pos.sum() < n_pos and 0 < neg.sum() < (y[:, None] != y[None, :]).sum()
    assert MultiSimilarityLoss()(x, y) != MultiSimilarityLoss(mining=False)(x, y)


@pytest.mark.parametrize("mining", [True, False])
def test_gradcheck(mining):
    x, y = batch(1, n_classes=3, per_class=3, dim=5)
    x.requires_grad_(True)
    # beta=10 keeps the finite differences well conditioned; the mining masks are constant
    # around a generic point
    loss = MultiSimilarityLoss(beta=10.0, mining=mining)
    assert torch.autograd.gradcheck(lambda t: loss(t, y), (x,), eps=1e-6, atol=1e-6)


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("mining", [True, False])
def test_values_and_gradients_match_pml(seed, mining):
    x, y = batch(seed, n_classes=5, per_class=4, dim=16, dtype=torch.float32)
    x_ours = x.clone().requires_grad_(True)
    x_pml = x.clone().requires_grad_(True)
    ours = MultiSimilarityLoss(mining=mining)(x_ours, y)
    theirs_fn = pml_losses.MultiSimilarityLoss(alpha=2, beta=50, base=0.5)
    if mining:
        pairs = pml_miners.MultiSimilarityMiner(epsilon=0.1)(x_pml, y)
        assert sum(len(p) for p in pairs) > 4  # pml returns 0 when at most one pair of each
        theirs = theirs_fn(x_pml, y, pairs)
    else:
        theirs = theirs_fn(x_pml, y)
    ours.backward()
    theirs.backward()
    assert ours.item() == pytest.approx(theirs.item(), rel=1e-5, abs=1e-7)
    torch.testing.assert_close(x_ours.grad, x_pml.grad, rtol=1e-4, atol=1e-6)


def test_edge_cases_and_registry():
    loss = MultiSimilarityLoss()
    # one class: no negatives, mining keeps no positive: exactly 0 and still a graph
    x = torch.randn(4, 3, requires_grad=True)
    out = loss(x, torch.zeros(4, dtype=torch.long))
    assert out.item() == 0.0
    out.backward()
    assert torch.equal(x.grad, torch.zeros_like(x))
    # empty batch
    assert loss(torch.zeros(0, 3), torch.zeros(0, dtype=torch.long)).item() == 0.0
    # huge and tiny norms: the loss works on unit vectors
    x, y = batch(2, dtype=torch.float32)
    ref = loss(x, y)
    for scale in (1e-30, 1e30):
        assert loss(x * scale, y).item() == pytest.approx(ref.item(), rel=1e-4)
    assert LOSSES["multisimilarity"] is MultiSimilarityLoss
    assert get_loss("multisimilarity", beta=40.0).beta == 40.0
    assert "mining=True" in repr(loss)
    with pytest.raises(ValueError, match="alpha must be"):
        MultiSimilarityLoss(alpha=0.0)
    with pytest.raises(ValueError, match="reduction"):
        MultiSimilarityLoss(reduction="max")


def test_reductions():
    x, y = batch(3)
    mean = MultiSimilarityLoss()(x, y)
    total = MultiSimilarityLoss(reduction="sum")(x, y)
    assert total.item() == pytest.approx(mean.item() * len(y))
    nonzero = MultiSimilarityLoss(reduction="mean_nonzero")(x, y)
    per_anchor = MultiSimilarityLoss().tuple_losses(
        torch.nn.functional.normalize(x, dim=1), y)[0]
    expected = per_anchor.sum() / (per_anchor > 0).sum()
    assert nonzero.item() == pytest.approx(expected.item())


def test_no_host_sync_in_the_loss(monkeypatch):
    """The loss never reads a value back (no .item(), no bool() of a tensor)."""
    x, y = batch(0, dtype=torch.float32)

    def forbidden(*args, **kwargs):
        raise AssertionError("host synchronisation in the loss")

    monkeypatch.setattr(torch.Tensor, "item", forbidden)
    monkeypatch.setattr(torch.Tensor, "__bool__", forbidden)
    with_mining = MultiSimilarityLoss()(x, y)
    without = MultiSimilarityLoss(mining=False)(x, y)
    monkeypatch.undo()
    assert np.isfinite(with_mining.item()) and np.isfinite(without.item())
