"""skdml.linear.ITML and ITML_Supervised: Bregman projections with a prior and slack."""
import warnings

import numpy as np
import pytest
from _classic_data import knn_score, noisy_classes
from _metric_learn import needs_metric_learn, run_metric_learn
from sklearn.exceptions import ConvergenceWarning

from skdml.constraints import Constraints
from skdml.linear import ITML, ITML_Supervised
import skdml.linear._itml as itml_module
from skdml.linear._itml import bregman_projections


def _pairs(seed=0, n_constraints=40):
    X, y = noisy_classes(n=60, n_noise=3, seed=seed)
    idx, labels = Constraints(y).labeled_pairs(n_constraints, random_state=seed)
    return X, idx, labels


def test_hard_constraints_are_met_at_convergence():
    rng = np.random.RandomState(0)  # separable: u=1, l=20 can be met by shrinking the noise
    y = np.arange(60) % 3
    X = np.c_[10 * np.eye(3)[y][:, :2] + 0.3 * rng.randn(60, 2), rng.randn(60, 3)]
    idx, labels = Constraints(y).labeled_pairs(40, random_state=0)
    diffs = X[idx[:, 0]] - X[idx[:, 1]]
    u, l = 1.0, 20.0
    sq0 = np.einsum("ij,ij->i", diffs, diffs)
    assert sq0[labels == 1].max() > 2 * u  # violated at the start
    A, n_iter, converged = bregman_projections(diffs[labels == 1], diffs[labels == -1],
                                               np.eye(X.shape[1]), (u, l), np.inf, 500, 1e-6)
    assert converged and n_iter < 500
    sq = np.einsum("ij,jk,ik->i", diffs, A, diffs)
    assert sq[labels == 1].max() <= u * (1 + 1e-5) and sq[labels == -1].min() >= l * (1 - 1e-5)
    assert np.all(np.linalg.eigvalsh(A) > 0)  # LogDet keeps A definite


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_slack_trades_constraints_for_closeness_to_the_prior():
    X, idx, labels = _pairs()
    far = [ITML(gamma=g, bounds=(1.0, 20.0), max_iter=300).fit(X[idx], labels)
           for g in (0.01, 100.0)]
    dist = [np.linalg.norm(est.get_mahalanobis_matrix() - np.eye(X.shape[1])) for est in far]
    assert dist[0] < dist[1]


def test_itml_learns_and_predicts_pairs():
    X, idx, labels = _pairs(seed=1, n_constraints=60)
    est = ITML(preprocessor=X, random_state=0).fit(idx, labels)
    _, idx2, labels2 = _pairs(seed=2, n_constraints=60)  # fresh pairs from the same problem
    assert est.score(idx2 + 0, labels2) > 0.85
    start = ITML(preprocessor=X, max_iter=1, random_state=0)
    with pytest.warns(ConvergenceWarning, match="did not converge in max_iter=1"):
        start.fit(idx, labels)


def test_itml_supervised_learns():
    X, y = noisy_classes(seed=3)
    est = ITML_Supervised(n_constraints=100, max_iter=200, random_state=0)
    assert knn_score(est, X, y) > knn_score(None, X, y) + 0.2
    assert est.fit(X, y).n_iter_ < 200  # converged (no warning)


@pytest.mark.parametrize("prior, match", [
    (np.eye(3), "shape \\(5, 5\\)"), (-np.eye(5), "positive definite"),
    (np.triu(np.ones((5, 5))), "symmetric")])
def test_bad_priors_and_bounds_raise(prior, match):
    X, idx, labels = _pairs()
    with pytest.raises(ValueError, match=match):
        ITML(prior=prior).fit(X[idx], labels)
    with pytest.raises(ValueError, match="bounds must be two"):
        ITML(bounds=(1.0, 2.0, 3.0)).fit(X[idx], labels)
    with pytest.raises(ValueError, match="covariance matrix; this one is singular"):
        ITML(prior="covariance").fit(np.zeros((3, 2, 8)) + np.arange(8) * [[1], [0]], [1, 1, -1])


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_default_bounds_are_percentiles_of_squared_distances():
    X, idx, labels = _pairs()
    est = ITML(max_iter=5).fit(X[idx], labels)
    P = np.unique(X[idx].reshape(-1, X.shape[1]), axis=0)
    sq = ((P[:, None] - P[None]) ** 2).sum(-1)[np.triu_indices(len(P), 1)]
    np.testing.assert_allclose(est.bounds_, np.percentile(sq, (5, 95)))


def _plain_projections(pos, neg, A, bounds, gamma, sweeps):
    """Davis et al.'s Algorithm 1 as written: every constraint projected, every sweep."""
    V, sign = np.vstack([pos, neg]), np.r_[np.ones(len(pos)), -np.ones(len(neg))]
    xi = np.r_[np.full(len(pos), bounds[0]), np.full(len(neg), bounds[1])]
    lam, A = np.zeros(len(V)), A.copy()
    for _ in range(sweeps):
        for i, (v, delta) in enumerate(zip(V, sign)):
            p = v @ A @ v
            alpha = min(lam[i], delta * gamma / (gamma + 1) * (1 / p - 1 / xi[i]))
            lam[i] -= alpha
            beta = delta * alpha / (1 - delta * alpha * p)
            xi[i] = 1 / (1 / xi[i] + delta * alpha / gamma)
            A = A + beta * np.outer(A @ v, A @ v)
    return A


@pytest.mark.parametrize("block", [7, 512])
def test_skipped_projections_change_nothing(block, monkeypatch):
    """The blockwise certificate only skips projections that are no-ops: the matrix is
    the plain algorithm's (many blocks, and the candidate list recomputed mid-block)."""
    monkeypatch.setattr(itml_module, "BLOCK", block)
    X, idx, labels = _pairs(n_constraints=60)
    diffs = X[idx[:, 0]] - X[idx[:, 1]]
    pos, neg = diffs[labels == 1], diffs[labels == -1]
    A0 = np.eye(X.shape[1])
    A, n_iter, converged = bregman_projections(pos, neg, A0, (2.0, 30.0), 1.0, 20, 0.0)
    assert n_iter == 20 and not converged  # tol=0: every sweep run
    np.testing.assert_allclose(A, _plain_projections(pos, neg, A0, (2.0, 30.0), 1.0, 20),
                               rtol=1e-10, atol=1e-12)


def test_convergence_is_relative_to_the_duals_not_to_their_number():
    """The stop compares the change of the dual variables with their size in the same
    (L1) norm, so that many constraints converge as few do (the L1 change over L2
    norms of Davis et al.'s code grows with the square root of their number: 300 pairs
    of each kind ran all 1000 sweeps)."""
    X, y = noisy_classes(n=300, seed=0)
    idx, labels = Constraints(y).labeled_pairs(300, random_state=0)
    est = ITML(preprocessor=X, random_state=0).fit(idx, labels)
    assert est.n_iter_ < 700


@needs_metric_learn
@pytest.mark.parametrize("prior", ["identity", "covariance"])
@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_itml_agrees_with_metric_learn(prior):
    """With the same pairs and bounds, metric-learn 0.7.0's ITML and ours run the same
    projections in the same order: after the same 100 sweeps (``tol=0`` on both sides:
    their stopping rules differ, see ``bregman_projections``), the same matrix within 1e-7."""
    X, idx, labels = _pairs()
    pairs = X[idx]
    out = run_metric_learn("""
est = metric_learn.ITML(prior=str(inp["prior"]), max_iter=100, tol=0.0).fit(
    inp["pairs"], inp["y"], bounds=inp["bounds"])
out["M"], out["n_iter"] = est.get_mahalanobis_matrix(), est.n_iter_
""", pairs=pairs, y=labels, bounds=np.array([2.0, 30.0]), prior=prior)
    mine = ITML(prior=prior, bounds=(2.0, 30.0), max_iter=100, tol=0.0).fit(pairs, labels)
    np.testing.assert_allclose(mine.get_mahalanobis_matrix(), out["M"], rtol=1e-7, atol=1e-9)
    assert mine.n_iter_ == int(out["n_iter"]) + 1 == 100


def test_itml_takes_gamma_inf_the_hard_constraints_its_docstring_promises():
    # feasible constraints: similar pairs differ in two noise features, dissimilar ones in
    # the first feature too; without slack every bound holds (with gamma=1 some do not)
    rng = np.random.RandomState(0)
    a = rng.randn(20, 3)
    b = a + np.c_[np.zeros(20), 0.5 * rng.randn(20, 2)]
    c = rng.randn(20, 3)
    e = c + np.c_[rng.choice([-3.0, 3.0], 20), 0.5 * rng.randn(20, 2)]
    pairs, y = np.r_[np.stack([a, b], 1), np.stack([c, e], 1)], np.r_[[1] * 20, [-1] * 20]

    def holds(est):
        d = est.pair_distance(pairs) ** 2  # squared distances against the squared bounds
        upper, lower = est.bounds_  # (u, l)
        return bool(np.all(d[y == 1] <= upper * (1 + 1e-6))
                    and np.all(d[y == -1] >= lower * (1 - 1e-6)))

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # feasible: no "not met" warning
        assert holds(ITML(gamma=np.inf, max_iter=5000, tol=1e-9).fit(pairs, y))
    assert not holds(ITML(gamma=1.0, max_iter=5000, tol=1e-9).fit(pairs, y))


def test_infeasible_hard_constraints_are_reported_not_called_converged():
    # the same pairs with the similar ones' bound far below what any metric that keeps the
    # dissimilar ones apart allows: the duals grow without end, their relative change falls,
    # and the fit used to end "converged" with most constraints broken
    rng = np.random.RandomState(0)
    a = rng.randn(20, 3)
    b, e = a + 0.5 * rng.randn(20, 3), a + 0.5 * rng.randn(20, 3)
    pairs, y = np.r_[np.stack([a, b], 1), np.stack([a, e], 1)], np.r_[[1] * 20, [-1] * 20]
    with pytest.warns(UserWarning, match="constraints are not met"):
        ITML(gamma=np.inf, bounds=(0.01, 100.0)).fit(pairs, y)


@pytest.mark.parametrize("make", [
    lambda: ITML(tol=0.0, max_iter=3),
    lambda: ITML_Supervised(tol=0.0, max_iter=3, n_constraints=20, random_state=0)])
def test_itml_with_tol_0_runs_max_iter_without_a_convergence_warning(make):
    X, yc = noisy_classes(seed=3)
    pairs, y = Constraints(yc).labeled_pairs(20, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        est = make()
        est.fit(*((X[pairs], y) if isinstance(est, ITML) else (X, yc)))
    assert est.n_iter_ == 3


def test_itml_refuses_a_constant_X():
    from skdml.linear import ITML_Supervised

    with pytest.raises(ValueError, match="every pair joins two equal points"):
        ITML_Supervised(random_state=0).fit(np.ones((30, 3)), np.repeat([0, 1, 2], 10))


def test_the_default_constraint_count_caps_quietly_and_an_explicit_one_warns():
    # AT&T at the defaults warned "Only 3600 distinct similar pairs exist (requested
    # 32000)": the default is "at most the pairs that exist", no request of the user's
    import warnings

    from skdml.linear import LSML_Supervised, MMC_Supervised

    rng = np.random.RandomState(0)
    y = np.repeat(np.arange(6), 4)  # 72 ordered similar pairs < 20 * 6 ** 2 = 720
    X = rng.randn(24, 3) + y[:, None]
    for make in (lambda n: ITML_Supervised(n_constraints=n, max_iter=5, random_state=0),
                 lambda n: MMC_Supervised(n_constraints=n, max_iter=5, random_state=0),
                 lambda n: LSML_Supervised(n_constraints=n, max_iter=5, random_state=0)):
        with warnings.catch_warnings():
            warnings.simplefilter("error", UserWarning)
            warnings.filterwarnings("ignore", category=ConvergenceWarning)
            quiet = make(None).fit(X, y)
        with pytest.warns(UserWarning, match="Only 72 distinct similar pairs exist"):
            loud = make(720).fit(X, y)
        np.testing.assert_array_equal(quiet.components_, loud.components_)


def test_itml_stops_at_the_first_sweep_whose_change_is_below_tol():
    import contextlib
    import io
    import re

    rng = np.random.RandomState(0)
    y = np.repeat([0, 1, 2], 15)
    X = np.c_[3.0 * y + 0.8 * rng.randn(45), 2.0 * rng.randn(45), rng.randn(45)]
    tol = 1e-2
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        est = ITML_Supervised(tol=tol, max_iter=1000, verbose=2, random_state=0).fit(X, y)
    changes = [float(c) for c in re.findall(r"relative change ([0-9.eE+-]+)", out.getvalue())]
    assert len(changes) == est.n_iter_ > 1
    assert changes[-1] < tol and all(c >= tol for c in changes[:-1])


def test_itml_warns_when_hard_constraints_are_missed_by_a_modest_factor():
    # a similar and a dissimilar pair with the same difference cannot be at most 1 and at
    # least 4 apart: the best metric misses by a factor of 4, which must be reported
    pairs = np.array([[[0.0, 0.0], [1.0, 0.0]], [[5.0, 5.0], [6.0, 5.0]],
                      [[0.0, 1.0], [0.0, 2.0]], [[3.0, 0.0], [3.0, 3.0]]])
    with pytest.warns(UserWarning, match="not met"):
        ITML(gamma=np.inf, bounds=(1.0, 4.0), max_iter=2000).fit(pairs, [1, -1, 1, -1])


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_default_bounds_do_not_move_with_an_offset():
    # squared distances are translation-free: with X + 1e8 the default bounds are those of X
    # (the expansion |x|^2 + |x'|^2 - 2 x.x' cancels catastrophically unless centred first)
    X, idx, labels = _pairs()
    plain = ITML(max_iter=1, tol=0).fit(X[idx], labels).bounds_
    shifted = ITML(max_iter=1, tol=0).fit(X[idx] + 1e8, labels).bounds_
    np.testing.assert_allclose(shifted, plain, rtol=1e-6)


def test_a_dissimilar_pair_of_one_sample_is_ignored_not_propagated():
    # such a pair can never be pushed apart: it is dropped with a warning, and the metric is
    # the one learned without it (kept, its projection divides by 0 and fills A with NaN)
    X, idx, labels = _pairs()
    ref = ITML(max_iter=50).fit(X[idx], labels)
    pairs = np.concatenate([X[idx], X[[[0, 0]]]])
    with pytest.warns(UserWarning, match="can never be satisfied"):
        est = ITML(max_iter=50).fit(pairs, np.r_[labels, -1])
    np.testing.assert_allclose(est.get_mahalanobis_matrix(), ref.get_mahalanobis_matrix(),
                               rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("bounds", [(-1.0, 20.0), (1.0, -20.0)])
def test_negative_bounds_are_refused(bounds):
    X, idx, labels = _pairs()
    with pytest.raises(ValueError, match="bounds must be two non-negative numbers"):
        ITML(bounds=bounds, max_iter=5).fit(X[idx], labels)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_a_zero_bound_is_nudged_and_the_fit_stays_finite():
    # u=0 asks similar pairs to coincide: the projections divide by the bound, so it is
    # taken as 1e-9, and the metric stays finite and useful
    X, idx, labels = _pairs()
    est = ITML(bounds=(0.0, 20.0), max_iter=50).fit(X[idx], labels)
    np.testing.assert_array_equal(est.bounds_, [1e-9, 20.0])
    assert np.all(np.isfinite(est.components_))
    assert est.score(X[idx], labels) > 0.9
