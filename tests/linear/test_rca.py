"""skdml.linear.RCA and RCA_Supervised: whitening by the within-chunklet covariance."""

from unittest import mock

import numpy as np
import pytest
from _classic_data import knn_score, noisy_classes
from _metric_learn import needs_metric_learn, run_metric_learn

from skdml.linear import RCA, RCA_Supervised


def test_rca_whitens_the_within_chunklet_covariance():
    X, y = noisy_classes()
    rca = RCA().fit(X, y)
    centred = X - np.array([X[y == c].mean(0) for c in range(3)])[y]
    Z = centred @ rca.components_.T
    np.testing.assert_allclose(Z.T @ Z / len(Z), np.eye(X.shape[1]), atol=1e-10)


def test_rca_ignores_samples_outside_chunks_and_reduces():
    X, y = noisy_classes()
    chunks = np.where(np.arange(len(y)) < 90, np.arange(len(y)) // 3, -1)
    a = RCA().fit(X, chunks)
    b = RCA().fit(X[:90], chunks[:90])
    np.testing.assert_allclose(a.components_, b.components_)
    reduced = RCA(n_components=2).fit(X, y)
    assert reduced.components_.shape == (2, X.shape[1])
    # the kept directions are those of smallest within-class to total variance: the signal
    assert np.abs(reduced.components_[:, :2]).sum() > 5 * np.abs(reduced.components_[:, 2:]).sum()


def test_rca_learns():
    X, y = noisy_classes(seed=2)
    assert knn_score(RCA_Supervised(n_chunks=30, chunk_size=3, random_state=0), X, y) > \
        knn_score(None, X, y) + 0.2


def test_rca_refuses_singular_and_empty_chunklets():
    X, _ = noisy_classes()
    with pytest.raises(ValueError, match="within-chunklet covariance is singular"):
        RCA().fit(X[:6], [0, 0, 1, 1, 2, 2])
    with pytest.raises(ValueError, match="chunklet of at least 2 samples"):
        RCA().fit(X[:4], [0, 1, 2, -1])
    with pytest.raises(ValueError, match="no class has chunk_size=5"):
        RCA_Supervised(chunk_size=5).fit(X[:6], [0, 0, 1, 1, 2, 2])


def test_rca_supervised_draws_what_the_classes_allow():
    X, y = noisy_classes(n=30)
    rca = RCA_Supervised(n_chunks=100, chunk_size=3, random_state=0).fit(X, y)
    assert len(np.unique(rca.chunks_[rca.chunks_ >= 0])) == 9  # 3 of 3 in each class of 10
    np.testing.assert_array_equal(rca.classes_, [0, 1, 2])


@needs_metric_learn
@pytest.mark.parametrize("n_components", [None, 3])
def test_rca_agrees_with_metric_learn(n_components):
    """Same Mahalanobis matrix as metric-learn 0.7.0's RCA on the same chunklets (1e-8)."""
    X, _ = noisy_classes(n=60)
    chunks = np.where(np.arange(60) < 48, np.arange(60) // 4, -1)
    out = run_metric_learn("""
n = None if int(inp["n"]) < 0 else int(inp["n"])
out["L"] = metric_learn.RCA(n_components=n).fit(inp["X"], inp["chunks"]).components_
""", X=X, chunks=chunks, n=-1 if n_components is None else n_components)
    theirs = out["L"].T @ out["L"]
    mine = RCA(n_components=n_components).fit(X, chunks).get_mahalanobis_matrix()
    np.testing.assert_allclose(mine, theirs, rtol=1e-8, atol=1e-10)


@needs_metric_learn
def test_rca_supervised_draws_metric_learns_chunklets():
    """The same integer random_state gives metric-learn 0.7.0's chunklets, hence its metric."""
    X, y = noisy_classes(n=90, n_classes=4)
    out = run_metric_learn("""
rca = metric_learn.RCA_Supervised(n_chunks=20, chunk_size=3, random_state=7)
out["chunks"] = metric_learn.constraints.Constraints(inp["y"]).chunks(
    n_chunks=20, chunk_size=3, random_state=7)
out["L"] = rca.fit(inp["X"], inp["y"]).components_
""", X=X, y=y)
    rca = RCA_Supervised(n_chunks=20, chunk_size=3, random_state=7).fit(X, y)
    np.testing.assert_array_equal(rca.chunks_, out["chunks"])
    np.testing.assert_allclose(rca.get_mahalanobis_matrix(), out["L"].T @ out["L"],
                               rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("scale, eigh_calls, singular",
                         [(1e-2, 0, False), (2.3e-4, 1, False), (1e-7, 1, True)])
def test_rca_whitening_decides_singularity_by_the_eigenvalues(scale, eigh_calls, singular):
    """The Cholesky whitening's trace test and its eigenvalue fallback: covariances of
    condition 2e6 (trace test passes) and 3e9 (past the trace bound: the eigenvalues decide)
    are whitened, a numerically singular one (condition 2e16) is refused."""
    X, y = noisy_classes(n=120)
    X = X * np.r_[scale, np.ones(X.shape[1] - 1)]
    with mock.patch("numpy.linalg.eigh", wraps=np.linalg.eigh) as eigh:
        if singular:
            with pytest.raises(ValueError, match="within-chunklet covariance is singular"):
                RCA().fit(X, y)
        else:
            rca = RCA().fit(X, y)
    assert eigh.call_count == eigh_calls
    if singular:
        return
    centred = X - np.array([X[y == c].mean(0) for c in range(3)])[y]
    C = centred.T @ centred / len(X)
    np.testing.assert_allclose(rca.components_ @ C @ rca.components_.T, np.eye(X.shape[1]),
                               atol=1e-6)
    np.testing.assert_allclose(rca.get_mahalanobis_matrix() @ C, np.eye(X.shape[1]), atol=1e-6)
