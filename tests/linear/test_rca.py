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


@pytest.mark.parametrize("noise, eigh_calls, singular",
                         [(1e-4, 0, False), (5e-5, 1, False), (1e-8, 1, True)])
def test_rca_whitening_decides_singularity_by_the_eigenvalues(noise, eigh_calls, singular):
    """The Cholesky whitening's trace test and its eigenvalue fallback: covariances of
    condition 1.3e9 (trace test passes) and 5.4e9 (past the trace bound: the eigenvalues
    decide) are whitened, a numerically singular one is refused. The conditioning is a
    feature that nearly copies another (a feature's own scale no longer counts: RCA
    whitens the features at comparable scales)."""
    X, y = noisy_classes(n=120)
    X[:, 1] = X[:, 0] + noise * np.random.RandomState(0).randn(len(X))
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


def test_features_on_scales_far_apart_are_whitened_not_refused():
    # RCA is invariant to one scale per feature; features 1e4 .. 1e-4 apart were refused as a
    # singular within-chunklet covariance ("add chunked samples")
    from sklearn.datasets import load_iris
    from sklearn.preprocessing import StandardScaler

    from skdml.linear import RCA_Supervised

    X, y = load_iris(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    s = np.logspace(4, -4, 4)
    ref = RCA_Supervised(random_state=0).fit(X, y).components_
    got = RCA_Supervised(random_state=0).fit(X * s, y).components_
    np.testing.assert_allclose(got * s, ref, rtol=1e-6, atol=1e-9 * np.abs(ref).max())


def test_a_covariance_prior_of_features_far_apart_is_their_inverse_covariance():
    from sklearn.datasets import load_iris

    from skdml.linear._classic import prior_metric

    X = load_iris().data
    s = np.logspace(4, -4, 4)
    P = prior_metric("covariance", X * s)
    np.testing.assert_allclose(P * np.outer(s, s), np.linalg.inv(np.cov(X, rowvar=False)),
                               rtol=1e-8)


def test_rca_whitens_the_within_chunklet_covariance_when_it_reduces():
    # L C L^T = I also with n_components < n_features (not diag(w))
    rng = np.random.RandomState(0)
    y = np.repeat([0, 1, 2], 30)
    X = np.c_[3.0 * y + rng.randn(90), 2.0 * y + rng.randn(90), 5.0 * rng.randn(90, 3)]
    rca = RCA(n_components=2).fit(X, y)
    centred = X - np.array([X[y == c].mean(0) for c in range(3)])[y]
    Z = centred @ rca.components_.T
    np.testing.assert_allclose(Z.T @ Z / len(Z), np.eye(2), atol=1e-10)


def test_only_minus_one_marks_an_unchunked_sample():
    # chunk ids are any labels; -1 alone means "in no chunk": chunks named -2 and -3 are
    # chunks like 2 and 3 (dropped as if -1, the metric comes from fewer chunklets)
    rng = np.random.RandomState(0)
    X = rng.randn(40, 3) * [1.0, 1.0, 10.0]
    chunks = np.repeat(np.arange(20), 2)
    chunks[-6:] = -1
    named = np.where(chunks < 4, -chunks - 2, chunks)  # ids 0..3 renamed -2..-5
    named[-6:] = -1
    np.testing.assert_allclose(RCA().fit(X, named).get_mahalanobis_matrix(),
                               RCA().fit(X, chunks).get_mahalanobis_matrix(), rtol=1e-10)
