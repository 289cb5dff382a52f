"""skdml.linear.MMC and MMC_Supervised: the reformulated objective, learning, metric-learn."""

import numpy as np
import pytest
import torch
from _classic_data import knn_score, noisy_classes
from _metric_learn import needs_metric_learn, run_metric_learn

from skdml.constraints import Constraints
from skdml.linear import MMC, MMC_Supervised
from skdml.linear._mmc import mmc_objective

pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")


def _pairs(seed=0, n_constraints=40):
    X, y = noisy_classes(n=60, n_noise=3, seed=seed)
    idx, labels = Constraints(y).labeled_pairs(n_constraints, random_state=seed)
    return X, idx, labels


def _xing(M, X, idx, labels):
    """Xing et al.'s quantities under M: sum_D sqrt(d) and sum_S d."""
    diff = X[idx[:, 0]] - X[idx[:, 1]]
    d = np.einsum("ij,jk,ik->i", diff, M, diff)
    return np.sqrt(d[labels == -1]).sum(), d[labels == 1].sum()


def test_the_objective_is_scale_free_and_its_gradient_is_right():
    X, idx, labels = _pairs()
    diff = torch.tensor(X[idx[:, 0]] - X[idx[:, 1]])
    pos, neg = diff[torch.tensor(labels == 1)], diff[torch.tensor(labels == -1)]
    L = torch.tensor(np.random.RandomState(0).randn(5, 5))
    assert float(mmc_objective(3.0 * L, pos, neg)) == pytest.approx(float(mmc_objective(L, pos,
                                                                                         neg)))
    L.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda L: mmc_objective(L, pos, neg), (L,))
    w = (torch.rand(5, dtype=torch.float64) + 0.1).requires_grad_(True)
    assert torch.autograd.gradcheck(lambda w: mmc_objective(w, pos, neg, True, 2.0), (w,))


def test_mmc_meets_the_constraint_and_spreads_dissimilar_pairs():
    X, idx, labels = _pairs()
    est = MMC(preprocessor=X).fit(idx, labels)
    spread0, sim0 = _xing(np.eye(5), X, idx, labels)
    spread, sim = _xing(est.get_mahalanobis_matrix(), X, idx, labels)
    assert sim == pytest.approx(sim0 / 100.0)  # metric-learn's scale of the constraint
    # under the same constraint, the identity scaled to it spreads less
    assert spread > spread0 / 10.0 * 1.2


def test_mmc_learns():
    X, y = noisy_classes(seed=6)
    for diagonal in (False, True):
        est = MMC_Supervised(n_constraints=200, diagonal=diagonal, random_state=0)
        assert knn_score(est, X, y) > knn_score(None, X, y) + 0.2


def test_mmc_needs_both_kinds_of_pairs():
    X, idx, labels = _pairs()
    with pytest.raises(ValueError, match="needs similar pairs"):
        MMC(preprocessor=X).fit(idx[labels == 1], labels[labels == 1])


@pytest.mark.slow  # metric-learn's projections: an eigendecomposition each, ~8 s here
@needs_metric_learn
@pytest.mark.parametrize("diagonal", [False, True])
def test_mmc_reaches_metric_learns_objective_or_better(diagonal):
    """metric-learn 0.7.0's MMC (projected gradient ascent; Newton for the diagonal) and ours
    optimise the same problem from the identity: our objective ends no worse (1e-6)."""
    X, idx, labels = _pairs(n_constraints=20)
    out = run_metric_learn("""
est = metric_learn.MMC(diagonal=bool(inp["diagonal"]), max_iter=30).fit(inp["pairs"], inp["y"])
out["M"] = est.get_mahalanobis_matrix()
""", pairs=X[idx], y=labels, diagonal=diagonal)
    diff = torch.tensor(X[idx[:, 0]] - X[idx[:, 1]])
    pos, neg = diff[torch.tensor(labels == 1)], diff[torch.tensor(labels == -1)]

    def objective(M):
        if diagonal:
            return float(mmc_objective(torch.tensor(np.sqrt(np.diag(M))), pos, neg, True, 1.0))
        w, V = np.linalg.eigh(M)
        return float(mmc_objective(torch.tensor(np.sqrt(np.clip(w, 0, None))[:, None] * V.T),
                                   pos, neg))

    ours = MMC(diagonal=diagonal).fit(X[idx], labels).get_mahalanobis_matrix()
    assert objective(ours) <= objective(out["M"]) + 1e-6
