"""skdml.linear.LSML and LSML_Supervised: the objective, its gradient, learning, metric-learn."""

import warnings

import numpy as np
import pytest
import torch
from _classic_data import knn_score, noisy_classes
from _metric_learn import needs_metric_learn, run_metric_learn
from sklearn.datasets import load_iris
from sklearn.exceptions import ConvergenceWarning

from skdml.constraints import Constraints
from skdml.linear import LSML, LSML_Supervised
from skdml.linear._lsml import lsml_loss

pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")


def _quadruplets(seed=0, n=40):
    X, y = noisy_classes(n=60, n_noise=3, seed=seed)
    a, b, c, d = Constraints(y).positive_negative_pairs(n, same_length=True, random_state=seed)
    return X, np.column_stack([a, b, c, d])


def _numpy_objective(M, vab, vcd, w, prior_inv):
    """metric-learn's _total_loss, written out with numpy (the reference)."""
    dab = np.einsum("ij,jk,ik->i", vab, M, vab)
    dcd = np.einsum("ij,jk,ik->i", vcd, M, vcd)
    v = dab > dcd
    return w[v] @ (np.sqrt(dab[v]) - np.sqrt(dcd[v])) ** 2 + np.sum(M * prior_inv) \
        - np.linalg.slogdet(M)[1]


def test_objective_and_gradient():
    X, q = _quadruplets()
    vab, vcd = X[q[:, 0]] - X[q[:, 1]], X[q[:, 2]] - X[q[:, 3]]
    rng = np.random.RandomState(0)
    w = rng.rand(len(q))
    P_inv = np.cov(X, rowvar=False)
    L0 = np.eye(5) + 0.3 * rng.randn(5, 5)
    args = [torch.tensor(a) for a in (vab, vcd, w, P_inv)]
    L = torch.tensor(L0, requires_grad=True)
    value = lsml_loss(L, *args)
    assert float(value.detach()) == pytest.approx(_numpy_objective(L0.T @ L0, vab, vcd, w, P_inv),
                                         rel=1e-12)
    value.backward()
    eps = 1e-6
    for idx in np.ndindex(5, 5):
        step = np.zeros((5, 5))
        step[idx] = eps
        up, down = L0 + step, L0 - step
        numeric = (_numpy_objective(up.T @ up, vab, vcd, w, P_inv)
                   - _numpy_objective(down.T @ down, vab, vcd, w, P_inv)) / (2 * eps)
        assert L.grad.numpy()[idx] == pytest.approx(numeric, rel=1e-5, abs=1e-6)


def test_lsml_learns_quadruplets():
    X, q = _quadruplets(seed=1, n=300)
    X2, q2 = _quadruplets(seed=2, n=300)  # fresh quadruplets of the same problem
    start = LSML(max_iter=0).fit(X[q])
    est = LSML().fit(X[q])
    assert est.score(X2[q2]) > start.score(X2[q2]) + 0.1
    assert est.n_iter_ >= 1 and np.isfinite(est.objective_)
    np.testing.assert_allclose(LSML(preprocessor=X).fit(q).components_, est.components_,
                               rtol=1e-6, atol=1e-8)


def test_lsml_weights_and_errors():
    X, q = _quadruplets()
    w = np.r_[np.ones(20), np.zeros(len(q) - 20)]
    np.testing.assert_allclose(LSML(preprocessor=X).fit(q, weights=w).components_,
                               LSML(preprocessor=X).fit(q[:20]).components_, rtol=1e-5,
                               atol=1e-7)
    with pytest.raises(ValueError, match="non-negative numbers, one per quadruplet"):
        LSML(preprocessor=X).fit(q, weights=-w)
    with pytest.raises(ValueError, match="shape \\(n_quadruplets, 4\\)"):
        LSML(preprocessor=X).fit(q[:, :3])
    with pytest.warns(UserWarning, match="can never hold"):
        LSML(preprocessor=X, max_iter=2).fit(np.r_[q[:20], np.c_[q[20:, :3], q[20:, 2]]])
    with pytest.raises(ValueError, match="weights sum to 0"):
        LSML(preprocessor=X).fit(q, weights=np.zeros(len(q)))


def test_lsml_weights_are_normalised_even_where_their_sum_overflows():
    # weights of 1e308 each are finite, but their sum is inf: w / w.sum() made them all 0
    # and LSML returned its prior
    X, q = _quadruplets()
    ones = LSML(preprocessor=X).fit(q, weights=np.ones(len(q))).components_
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no overflow on the way
        huge = LSML(preprocessor=X).fit(q, weights=np.full(len(q), 1e308)).components_
    np.testing.assert_allclose(huge, ones, rtol=1e-6, atol=1e-8)


def test_lsml_supervised_learns():
    X, y = noisy_classes(seed=5)
    assert knn_score(LSML_Supervised(n_constraints=200, random_state=0), X, y) > \
        knn_score(None, X, y) + 0.2


@needs_metric_learn
def test_lsml_reaches_metric_learns_objective_or_lower():
    """The same objective (metric-learn 0.7.0's _total_loss, rewritten above): its projected
    gradient descent and our L-BFGS start from the prior; ours ends no higher (within 0.1%)."""
    X, q = _quadruplets()
    out = run_metric_learn("""
out["M"] = metric_learn.LSML(max_iter=1000).fit(inp["quads"]).get_mahalanobis_matrix()
""", quads=X[q])
    vab, vcd = X[q[:, 0]] - X[q[:, 1]], X[q[:, 2]] - X[q[:, 3]]
    w = np.full(len(q), 1.0 / len(q))
    theirs = _numpy_objective(out["M"], vab, vcd, w, np.eye(5))
    ours = LSML().fit(X[q])
    assert _numpy_objective(ours.get_mahalanobis_matrix(), vab, vcd, w, np.eye(5)) <= \
        theirs + 1e-3 * abs(theirs)


def test_lsml_on_quadruplets_that_can_never_hold_says_so():
    with pytest.raises(ValueError, match="second pair is one sample twice"):
        LSML_Supervised(random_state=0).fit(np.ones((20, 3)), np.repeat([0, 1], 10))


@pytest.mark.parametrize("scale", [1e80, 1e-100])
def test_lsml_refuses_inputs_whose_distances_leave_float64(scale):
    # L-BFGS-B stepped to NaN there and reported success; the eigendecomposition of the NaN
    # metric then raised numpy's "Eigenvalues did not converge"
    X, y = load_iris(return_X_y=True)
    with pytest.raises(ValueError, match="scale the input"):
        LSML_Supervised(random_state=0).fit(X * scale, y)


def test_a_covariance_prior_reads_every_sample_whatever_the_seed():
    # the prior was the inverse covariance of 2,000 drawn samples: 1-1.6 % off the samples'
    # own, and moving with random_state (SDML's metric with it)
    from skdml.linear import SDML

    rng = np.random.RandomState(0)
    X = rng.randn(3000, 3) * [1.0, 2.0, 5.0]
    quads = rng.randint(0, 3000, size=(1500, 4))
    full = np.linalg.inv(np.cov(np.unique(X[quads].reshape(-1, 3), axis=0), rowvar=False))
    for seed in (0, 1):
        M = LSML(prior="covariance", max_iter=0, random_state=seed,
                 preprocessor=X).fit(quads).get_mahalanobis_matrix()
        np.testing.assert_allclose(M, full, rtol=1e-10, atol=1e-12)
    pairs = rng.randint(0, 3000, size=(2000, 2))
    labels = np.where(rng.rand(2000) < 0.5, 1, -1)
    M0, M1 = (SDML(prior="covariance", balance_param=1e-5, random_state=seed, preprocessor=X)
              .fit(pairs, labels).get_mahalanobis_matrix() for seed in (0, 1))
    np.testing.assert_array_equal(M0, M1)


def test_inputs_in_small_units_say_the_prior_was_kept():
    # the LogDet term outweighs the quadruplets' (which shrinks with the scale squared): the
    # identity prior came back to within 7e-10, quietly
    from sklearn.datasets import load_iris
    from sklearn.preprocessing import StandardScaler

    from skdml.linear import SDML_Supervised

    X, y = load_iris(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    for est in (LSML_Supervised(random_state=0), SDML_Supervised(random_state=0)):
        with pytest.warns(UserWarning, match="barely moved from its prior"):
            est.fit(X * 1e-4, y)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*barely moved")
        LSML_Supervised(random_state=0).fit(X, y)  # at unit scale it moves


def test_a_prior_that_already_satisfies_every_quadruplet_is_kept_quietly():
    # a review regression: the prior-kept warning told standardised data to standardise
    from sklearn.preprocessing import StandardScaler

    rs = np.random.RandomState(0)
    X = StandardScaler().fit_transform(np.r_[rs.randn(30, 2), rs.randn(30, 2) + 20])
    y = np.r_[np.zeros(30), np.ones(30)]
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*barely moved")
        LSML_Supervised(random_state=0).fit(X, y)


def test_lsml_keeps_a_non_identity_prior_that_already_meets_every_quadruplet():
    # tr(M P^-1) - log det M is least at M = P: the LogDet term must use P's inverse (the
    # identity prior of the other test cannot tell)
    rng = np.random.RandomState(0)
    quadruplets = []
    for _ in range(20):
        a = rng.randn(2)
        quadruplets.append([a, a + 0.01 * rng.randn(2), a, a + 5.0 + rng.randn(2)])
    P = np.diag([4.0, 1.0])
    M = LSML(prior=P, random_state=0).fit(np.array(quadruplets)).get_mahalanobis_matrix()
    np.testing.assert_allclose(M, P, rtol=1e-3, atol=1e-3)


def test_lsml_with_tol_zero_runs_max_iter_without_a_convergence_warning():
    from sklearn.exceptions import ConvergenceWarning

    rng = np.random.RandomState(0)
    y = np.repeat([0, 1, 2], 15)
    X = np.c_[3.0 * y + rng.randn(45), rng.randn(45), rng.randn(45)]
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        est = LSML_Supervised(tol=0.0, max_iter=3, random_state=0).fit(X, y)
    assert est.n_iter_ == 3


# audit 20 (mutation round 5): prior_metric_rank_and_pseudo_inverse
def test_covariance_prior_of_a_nearly_singular_covariance():
    # RANK_TOL: eigenvalues below 1e-10 of the largest count as zero: a strict prior is
    # refused, a non-strict one is the pseudo-inverse (finite; cov @ P @ cov == cov)
    from skdml.linear._classic import prior_metric

    rng = np.random.RandomState(0)
    X = rng.randn(50, 3) * [1.0, 1e3, 1e-2]
    X = np.c_[X, X[:, 0] + 1e-8 * rng.randn(50)]  # dependent up to 1e-8
    with pytest.raises(ValueError, match="singular"):
        prior_metric("covariance", X, strict_pd=True)
    P = prior_metric("covariance", X, strict_pd=False)
    cov = np.cov(X, rowvar=False)
    assert np.isfinite(P).all()
    np.testing.assert_allclose(cov @ P @ cov, cov, rtol=1e-6, atol=1e-9 * np.abs(cov).max())
    full = prior_metric("covariance", X[:, :3], strict_pd=True)  # invertible: the inverse
    np.testing.assert_allclose(full @ np.cov(X[:, :3], rowvar=False), np.eye(3), atol=1e-8)


def test_an_array_prior_must_be_definite_only_when_strict():
    from skdml.linear._classic import prior_metric

    X = np.zeros((5, 2))
    singular = np.diag([1.0, 0.0])
    with pytest.raises(ValueError, match="positive definite"):
        prior_metric(singular, X, strict_pd=True)
    np.testing.assert_array_equal(prior_metric(singular, X, strict_pd=False), singular)
    with pytest.raises(ValueError, match="positive semi-definite"):
        prior_metric(np.diag([1.0, -1e-3]), X, strict_pd=False)


def test_components_from_metric_orders_rows_and_refuses_an_indefinite_matrix():
    from skdml.linear._classic import components_from_metric, feature_scales

    L = components_from_metric(np.diag([1.0, 9.0, 4.0]))
    np.testing.assert_allclose(np.linalg.norm(L, axis=1), [3.0, 2.0, 1.0])  # decreasing
    np.testing.assert_allclose(L.T @ L, np.diag([1.0, 9.0, 4.0]), atol=1e-12)
    with pytest.raises(ValueError, match="not positive semi-definite"):
        components_from_metric(np.diag([1.0, -1e-3]))
    # spreads rounded to the NEAREST power of two (in log scale)
    np.testing.assert_array_equal(feature_scales(np.array([5.0, 0.3, 3.0, 1.0, np.inf])),
                                  [4.0, 0.25, 4.0, 1.0, 1.0])


def test_lsml_cut_short_by_max_iter_warns_and_tol_zero_does_not():
    X, y = noisy_classes(n=60, n_noise=3, seed=0)
    with pytest.warns(ConvergenceWarning, match="did not converge in max_iter=2"):
        LSML_Supervised(max_iter=2, random_state=0).fit(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        LSML_Supervised(max_iter=2, tol=0.0, random_state=0).fit(X, y)  # asked for


def test_lsml_minimises_the_mean_weighted_residual_not_the_sum():
    # Liu et al. / metric-learn: the weights sum to 1, so the LogDet prior keeps its weight
    # whatever the number of quadruplets; the fitted L is a stationary point of THAT loss
    X, y = noisy_classes(n=60, n_noise=3, seed=0)
    rng = np.random.RandomState(0)
    quads = X[np.array([rng.choice(60, 4, replace=False) for _ in range(150)])]
    est = LSML(tol=1e-12, max_iter=2000).fit(quads)
    vab, vcd = quads[:, 0] - quads[:, 1], quads[:, 2] - quads[:, 3]
    args = [torch.tensor(a) for a in (vab, vcd, np.full(len(quads), 1.0 / len(quads)),
                                      np.eye(X.shape[1]))]

    def grad_norm(L):
        L = torch.tensor(L, requires_grad=True)
        lsml_loss(L, *args).backward()
        return float(L.grad.norm())

    assert grad_norm(est.components_) < 1e-3 * grad_norm(np.eye(X.shape[1]))
