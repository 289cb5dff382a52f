"""LMNNLoss: hand-computed values, a loop reference, autograd check, pytorch-metric-learning."""

import itertools

import numpy as np
import pytest
import torch
from torch.autograd import gradcheck

from skdml import ECAML
from skdml.losses import LMNNLoss, get_loss


def loop_lmnn(z, y, k, margin, mu):
    """LMNN's cost per anchor with a Python loop (targets: the k nearest positives)."""
    z, y = z.detach().numpy(), y.numpy()
    n, out, has = len(y), [], []
    d = ((z[:, None, :] - z[None, :, :]) ** 2).sum(-1)
    for a in range(n):
        pos = [j for j in range(n) if j != a and y[j] == y[a]]
        targets = sorted(pos, key=lambda j: d[a, j])[: (len(pos) if k is None else k)]
        pull = sum(d[a, t] for t in targets)
        push = sum(max(0.0, margin + d[a, t] - d[a, m])
                   for t in targets for m in range(n) if y[m] != y[a])
        out.append((1 - mu) * pull + mu * push)
        has.append(bool(targets))
    return np.array(out), np.array(has)


def batch(seed, n_classes=3, per_class=4, dim=3):
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(n_classes).repeat_interleave(per_class)
    return torch.randn(len(y), dim, generator=g, dtype=torch.float64), y


def test_hand_computed_two_classes():
    # anchors 0,1 (class 0) at distance 1; 2,3 (class 1) at 2.25; impostor 0 of anchor 2 at
    # 2.25: sum = 0.5*(1+1+2.25+2.25) + 0.5*(1 + 2.25 - 2.25) = 3.75; mean over 4 anchors
    z = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 1.5], [0.0, 3.0]])
    y = torch.tensor([0, 0, 1, 1])
    assert LMNNLoss(n_neighbors=1, reduction="sum")(z, y).item() == pytest.approx(3.75)
    assert LMNNLoss(n_neighbors=1, reduction="mean")(z, y).item() == pytest.approx(3.75 / 4)
    # push only: the single violating anchor
    assert LMNNLoss(n_neighbors=1, push_weight=1.0, reduction="mean_nonzero")(
        z, y).item() == pytest.approx(1.0)
    # pull only: the mean target distance
    assert LMNNLoss(n_neighbors=1, push_weight=0.0)(z, y).item() == pytest.approx(6.5 / 4)


@pytest.mark.parametrize("seed, k, margin, mu", itertools.product(
    [0, 1], [1, 2, None], [0.5, 2.0], [0.0, 0.5, 1.0]))
def test_matches_loop(seed, k, margin, mu):
    z, y = batch(seed)
    losses, valid = LMNNLoss(n_neighbors=k, margin=margin, push_weight=mu).tuple_losses(z, y)
    ref, has = loop_lmnn(z, y, k, margin, mu)
    np.testing.assert_allclose(losses.numpy(), ref, rtol=1e-10, atol=1e-10)
    np.testing.assert_array_equal(valid.numpy() > 0, has)


def test_anchor_without_positive_contributes_nothing():
    z, _ = batch(0, n_classes=2, per_class=2)
    y = torch.tensor([0, 0, 1, 2])
    losses, valid = LMNNLoss(n_neighbors=3).tuple_losses(z, y)
    assert valid.tolist() == [1.0, 1.0, 0.0, 0.0]
    total = LMNNLoss(n_neighbors=3, reduction="sum")(z, y)
    assert total.item() == pytest.approx(losses[:2].sum().item())


@pytest.mark.parametrize("normalize", [False, True])
def test_gradient_autograd_check(normalize):
    z, y = batch(2, per_class=3)
    z.requires_grad_(True)
    loss = LMNNLoss(n_neighbors=2, margin=1.0, normalize=normalize)
    assert gradcheck(lambda t: loss(t, y), (z,), eps=1e-6, atol=1e-6)


def test_matches_pml_triplet_with_squared_distances():
    """All targets, push only, summed: PML's triplet loss on squared L2 distances, summed."""
    pml = pytest.importorskip("pytorch_metric_learning")
    from pytorch_metric_learning import distances, losses, reducers

    for seed in range(3):
        z, y = batch(seed, per_class=3)
        ours = LMNNLoss(n_neighbors=None, margin=0.7, push_weight=1.0, reduction="sum")(z, y)
        theirs = losses.TripletMarginLoss(
            margin=0.7, distance=distances.LpDistance(power=2, normalize_embeddings=False),
            reducer=reducers.SumReducer(), triplets_per_anchor="all")(z, y)
        assert ours.item() == pytest.approx(theirs.item(), rel=1e-9), pml.__version__


def test_invalid_parameters_and_registry():
    with pytest.raises(ValueError, match="n_neighbors"):
        LMNNLoss(n_neighbors=0)
    with pytest.raises(ValueError, match="margin"):
        LMNNLoss(margin=-1.0)
    with pytest.raises(ValueError, match="push_weight"):
        LMNNLoss(push_weight=1.5)
    assert isinstance(get_loss("lmnn"), LMNNLoss)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")  # max_iter=30
def test_ecaml_learns_with_the_lmnn_loss():
    """ECAML(loss="lmnn") must beat its own start (PCA) on a signal hidden by louder noise."""
    from sklearn.neighbors import KNeighborsClassifier

    rng = np.random.RandomState(0)
    y = rng.randint(0, 4, 300)
    X = np.hstack([3.0 * np.array([[0, 0], [0, 1], [1, 0], [1, 1]])[y] + 0.5 * rng.randn(300, 2),
                   4.0 * rng.randn(300, 18)])

    def accuracy(**kw):
        # the 16 x 8 batch plan this test was written with (7 steps an epoch; "auto" for LMNN
        # is 8 x 32, 2 steps an epoch here)
        est = ECAML(n_components=4, loss="lmnn", early_stopping=False, learning_rate=0.02,
                    n_classes_per_batch=16, n_samples_per_class=8,
                    random_state=0, **{"max_iter": 30, **kw}).fit(X[:200], y[:200])
        knn = KNeighborsClassifier(3).fit(est.transform(X[:200]), y[:200])
        return knn.score(est.transform(X[200:]), y[200:])

    assert accuracy() > accuracy(max_iter=0) + 0.2
