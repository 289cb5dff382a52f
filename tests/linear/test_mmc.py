"""skdml.linear.MMC and MMC_Supervised: projections, gradients, learning, metric-learn."""

import warnings

import numpy as np
import pytest
import torch
from _classic_data import knn_score, noisy_classes
from _metric_learn import needs_metric_learn, run_metric_learn
from sklearn.exceptions import ConvergenceWarning

from skdml.constraints import Constraints
from skdml.linear import MMC, MMC_Supervised
from skdml.linear._mmc import _log_spread, _project_constraints, mmc_objective

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


def test_the_ascents_gradient_is_right():
    """metric-learn's g(A) = log(sum_D sqrt(d_A) + 1e-6): its gradient by central differences
    (away from d = 0, where metric-learn's 1e-6 in the derivative is negligible)."""
    X, idx, labels = _pairs()
    neg = (X[idx[:, 0]] - X[idx[:, 1]])[labels == -1]
    rng = np.random.RandomState(1)
    B = rng.randn(5, 5)
    A = B @ B.T + np.eye(5)
    value, grad = _log_spread(A, neg)
    d = np.einsum("ij,jk,ik->i", neg, A, neg)
    assert value == pytest.approx(np.log(np.sqrt(d).sum() + 1e-6), rel=1e-12)
    h, numeric = 1e-6, np.empty_like(A)
    for i in range(5):
        for j in range(5):
            E = np.zeros_like(A)
            E[i, j] = h
            numeric[i, j] = (_log_spread(A + E, neg)[0] - _log_spread(A - E, neg)[0]) / (2 * h)
    np.testing.assert_allclose(grad, numeric, rtol=1e-5, atol=1e-9)


def _dykstra(A, W, t, n_iter=20000):
    """The nearest PSD X with <W, X> <= t by Dykstra's alternating projections (brute force)."""
    X, P, Q = (A + A.T) / 2, np.zeros_like(A), np.zeros_like(A)
    for _ in range(n_iter):
        Y = X + P
        excess = np.vdot(W, Y) - t
        Z = Y - max(excess, 0.0) / np.vdot(W, W) * W
        P = Y - Z
        w, V = np.linalg.eigh(Z + Q)
        X = (V * np.maximum(w, 0)) @ V.T
        Q = Z + Q - X
    return X


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_projection_is_the_nearest_feasible_point(seed):
    """One multiplier and one eigendecomposition a trial give Dykstra's projection onto Xing
    et al.'s two constraint sets (metric-learn alternates plain projections instead)."""
    rng = np.random.RandomState(seed)
    A = rng.randn(4, 4)
    G = rng.randn(6, 4)
    W = G.T @ G
    t = 0.2 * np.trace(W)
    X, n_eigh = _project_constraints(A + A.T + 3 * np.eye(4), W, t)
    assert np.linalg.eigvalsh(X).min() > -1e-10
    assert np.vdot(W, X) == pytest.approx(t, rel=1e-9)
    np.testing.assert_allclose(X, _dykstra(A + A.T + 3 * np.eye(4), W, t), atol=1e-6)
    assert n_eigh < 100
    # already feasible after the PSD projection: that projection, nothing more
    S = A + A.T
    X, n_eigh = _project_constraints(S, W, 1e6)
    w, V = np.linalg.eigh(S)
    np.testing.assert_allclose(X, (V * np.maximum(w, 0)) @ V.T, atol=1e-12)
    assert n_eigh == 1


@pytest.mark.parametrize("scale", [1e-120, 1e8, 1e120])
def test_the_projection_finds_its_multiplier_at_any_scale(scale):
    # the multiplier scales as 1 / scale: an absolute bracket (from 1e-12) and tolerance
    # (1e-14) missed it for large inputs (<W, X> / t = 0 at 1e8: the zero matrix)
    rng = np.random.RandomState(0)
    A, G = rng.randn(4, 4), rng.randn(6, 4) * np.sqrt(scale)
    W = G.T @ G
    t = 0.2 * np.trace(W)
    X, _ = _project_constraints(A + A.T + 3 * np.eye(4), W, t)
    assert np.vdot(W, X) == pytest.approx(t, rel=1e-9)
    reference, _ = _project_constraints(A + A.T + 3 * np.eye(4), W / scale, t / scale)
    np.testing.assert_allclose(X, reference, atol=1e-8)


def test_mmc_gives_the_same_metric_for_large_inputs_and_refuses_extreme_ones():
    X, y = noisy_classes(n=60, n_noise=3, seed=0)
    unit = [M / np.linalg.norm(M) for M in (
        MMC_Supervised(n_constraints=40, random_state=0).fit(X * s, y).get_mahalanobis_matrix()
        for s in (1.0, 1e6))]
    np.testing.assert_allclose(unit[1], unit[0], atol=1e-3)  # was 1.2 apart (iris, 1e6)
    for s in (1e-100, 1e100):  # a ZeroDivisionError and a LinAlgError before
        with pytest.raises(ValueError, match="scale the input"):
            MMC_Supervised(n_constraints=40, random_state=0).fit(X * s, y)


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


def test_mmc_stops_where_its_steps_stop_gaining():
    """A step gaining less than metric-learn's projections resolve is refused and halved:
    the ascent converges (tol) within max_iter, before Xing et al.'s low-rank optimum."""
    X, idx, labels = _pairs(n_constraints=40)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        est = MMC(preprocessor=X).fit(idx, labels)
    assert 1 < est.n_iter_ < 100
    with pytest.warns(ConvergenceWarning, match="did not converge"):
        MMC(max_iter=3, preprocessor=X).fit(idx, labels)
    # max_iter=0: the start (the identity) projected onto the constraints
    start = MMC(max_iter=0, preprocessor=X).fit(idx, labels)
    assert start.n_iter_ == 0
    diff = X[idx[:, 0]] - X[idx[:, 1]]
    W = diff[labels == 1].T @ diff[labels == 1]
    np.testing.assert_allclose(start.get_mahalanobis_matrix(),
                               _dykstra(np.eye(5), W, np.trace(W) / 100.0, 5000), atol=1e-8)


@needs_metric_learn
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_mmc_follows_metric_learns_ascent(seed):
    """metric-learn 0.7.0's MMC and ours take the same steps from the identity: after 5 of
    them the metrics (scaled alike) agree within 3 % (metric-learn's projections stop within
    1 % of the constraint; ours are exact)."""
    X, y = noisy_classes(n=60, n_noise=3, seed=seed)
    idx, labels = Constraints(y).labeled_pairs(40, random_state=seed)
    out = run_metric_learn("""
out["M"] = metric_learn.MMC(max_iter=5).fit(inp["pairs"], inp["y"]).get_mahalanobis_matrix()
""", pairs=X[idx], y=labels)
    ours = MMC(max_iter=5).fit(X[idx], labels).get_mahalanobis_matrix()
    diff = X[idx[:, 0]] - X[idx[:, 1]]
    W = diff[labels == 1].T @ diff[labels == 1]
    theirs = out["M"] * np.vdot(W, ours) / np.vdot(W, out["M"])
    assert np.linalg.norm(ours - theirs) < 0.03 * np.linalg.norm(theirs)


@pytest.mark.slow  # metric-learn's Newton steps on the diagonal
@needs_metric_learn
def test_diagonal_mmc_reaches_metric_learns_objective_or_better():
    """metric-learn 0.7.0's diagonal MMC (Newton) and ours (L-BFGS) minimise Xing et al.'s
    Eq. 6 from the identity: our objective ends no worse (1e-6)."""
    X, idx, labels = _pairs(n_constraints=20)
    out = run_metric_learn("""
est = metric_learn.MMC(diagonal=True, max_iter=30).fit(inp["pairs"], inp["y"])
out["M"] = est.get_mahalanobis_matrix()
""", pairs=X[idx], y=labels)
    diff = torch.tensor(X[idx[:, 0]] - X[idx[:, 1]])
    pos, neg = diff[torch.tensor(labels == 1)], diff[torch.tensor(labels == -1)]

    def objective(M):
        return float(mmc_objective(torch.tensor(np.sqrt(np.diag(M))), pos, neg, True, 1.0))

    ours = MMC(diagonal=True).fit(X[idx], labels).get_mahalanobis_matrix()
    assert objective(ours) <= objective(out["M"]) + 1e-6


def _three_classes():
    rng = np.random.RandomState(0)
    yc = np.repeat([0, 1, 2], 10)
    X = np.c_[3.0 * yc + 0.3 * rng.randn(30), rng.randn(30)]
    pairs, y = Constraints(yc).labeled_pairs(20, random_state=0)
    return X, yc, pairs, y


@pytest.mark.parametrize("init, diagonal, match", [
    (np.zeros((2, 2)), False, "zero matrix"),  # was NaN components and threshold
    (np.zeros((2, 2)), True, "zero matrix"),  # was an all-zero map
    (np.diag([0.0, 1.0]), True, "positive diagonal"),  # the first feature could never count
    (np.diag([1e-300, 0.0]), False, "too far from 1"),  # was NaN
])
def test_mmc_refuses_a_start_it_cannot_leave(init, diagonal, match):
    X, _, pairs, y = _three_classes()
    with pytest.raises(ValueError, match=match):
        MMC(init=init, diagonal=diagonal, preprocessor=X).fit(pairs, y)


def test_mmc_with_tol_0_runs_max_iter_without_a_convergence_warning():
    X, _, pairs, y = _three_classes()
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        est = MMC(tol=0.0, max_iter=3, preprocessor=X).fit(pairs, y)
    assert est.n_iter_ == 3


def test_inputs_in_small_units_learn_the_metric_of_unit_inputs():
    # metric-learn's absolute 1e-6 beside the square roots decided the metric at 1e-10 (iris:
    # normalised diag(M) [.093 .006 .769 .132] for [.053 .001 .944 .002], 3-NN 0.78 for 0.98)
    from sklearn.datasets import load_iris
    from sklearn.preprocessing import StandardScaler

    X, y = load_iris(return_X_y=True)
    X = StandardScaler().fit_transform(X)

    def diag(scale):
        M = MMC_Supervised(random_state=0).fit(X * scale, y).get_mahalanobis_matrix()
        return np.diag(M) / np.trace(M)

    ref = diag(1.0)
    for scale in (1e-3, 1e-10):
        np.testing.assert_allclose(diag(scale), ref, atol=1e-3)


def test_diagonal_c_scales_the_diagonal_solution():
    # Xing et al.'s Eq. 6, sum_S d_w - c log sum_D sqrt(d_w): f_c(c w) = c f_1(w) + const,
    # so the optimum for diagonal_c = c is c times the one for 1 (an ignored c gave M4 == M1)
    rng = np.random.RandomState(0)
    y = np.repeat([0, 1, 2], 20)
    X = np.c_[3.0 * y + rng.randn(60), rng.randn(60), 4.0 * rng.randn(60)]
    kw = dict(diagonal=True, max_iter=1000, tol=1e-12, random_state=0)
    M1 = MMC_Supervised(diagonal_c=1.0, **kw).fit(X, y).get_mahalanobis_matrix()
    M4 = MMC_Supervised(diagonal_c=4.0, **kw).fit(X, y).get_mahalanobis_matrix()
    np.testing.assert_allclose(M4, 4.0 * M1, rtol=1e-3, atol=1e-8)


def test_an_eigendecomposition_lapack_syevd_does_not_converge_falls_back_to_syevr(monkeypatch):
    # numpy's eigh (syevd) raised "Eigenvalues did not converge" on a finite 64 x 64 matrix
    # of the projection (MMC_Supervised on 400 standardised digits), and the raw
    # LinAlgError escaped fit; scipy's syevr decomposes it (audit 19)
    from skdml.linear._classic import symmetric_eigh

    rng = np.random.RandomState(0)
    A = rng.randn(6, 6)
    A = A + A.T

    def syevd_fails(M, *args, **kwargs):
        raise np.linalg.LinAlgError("Eigenvalues did not converge")

    expected = np.linalg.eigvalsh(A)
    monkeypatch.setattr(np.linalg, "eigh", syevd_fails)
    w, V = symmetric_eigh(A)
    np.testing.assert_allclose(w, expected, atol=1e-12)
    np.testing.assert_allclose((V * w) @ V.T, A, atol=1e-12)
    # every eigendecomposition of an MMC fit goes through it
    X, y = noisy_classes(n=60)
    assert np.isfinite(MMC_Supervised(max_iter=5, random_state=0).fit(X, y).components_).all()
    with pytest.raises(ValueError, match="did not converge"):
        symmetric_eigh(np.full((2, 2), np.nan))


@pytest.mark.parametrize("cls", [MMC, MMC_Supervised])
def test_defaults_are_xing_et_al_and_metric_learns(cls):
    # diagonal_c weighs the spread term of Eq. 6 (metric-learn's default 1.0); a drifted
    # default silently changes every diagonal fit
    params = cls().get_params()
    assert params["diagonal_c"] == 1.0
    assert params["max_iter"] == 100 and params["tol"] == 1e-3
    assert params["init"] == "identity" and params["diagonal"] is False


def test_the_ascent_takes_metric_learns_first_step():
    # metric-learn's schedule: the first move is 0.1 x 1.05 along the unit gradient of
    # log sum_D sqrt(d) tangent to <W, M> = t, then a projection (two iterations, tol=0)
    from skdml.linear._mmc import _RESOLUTION, _spread_eps

    X, y = noisy_classes(n=60, n_noise=3, seed=0)
    idx, labels = Constraints(y).labeled_pairs(40, random_state=0)
    diffs = X[idx[:, 0]] - X[idx[:, 1]]
    pos, neg = diffs[labels == 1], diffs[labels == -1]
    A0 = np.eye(X.shape[1])
    W = pos.T @ pos
    t = np.vdot(W, A0) / 100.0
    eps = _spread_eps(A0, neg)
    A1 = _project_constraints(A0, W, t)[0]
    grad = _log_spread(A1, neg, eps=eps)[1]
    grad /= np.linalg.norm(grad)
    W_unit = W / np.linalg.norm(W)
    step = grad - np.vdot(grad, W_unit) * W_unit
    A2 = _project_constraints(A1 + 0.1 * 1.05 * step / np.linalg.norm(step), W, t)[0]
    # the step gains (else the ascent would halve it and stay at A1)
    assert _log_spread(A2, neg, gradient=False, eps=eps)[0] > \
        _log_spread(A1, neg, gradient=False, eps=eps)[0] + _RESOLUTION
    est = MMC(max_iter=2, tol=0.0).fit(X[idx], labels)
    np.testing.assert_allclose(est.get_mahalanobis_matrix(), A2, rtol=1e-7, atol=1e-10)
