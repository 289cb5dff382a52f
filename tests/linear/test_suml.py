"""Tests of skdml.SUML and its cost (skdml.linear._suml_objective)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from sklearn.datasets import load_digits
from sklearn.exceptions import ConvergenceWarning
from sklearn.neighbors import KNeighborsClassifier
from sklearn.pipeline import make_pipeline

from skdml.linear._suml_objective import (SUMLObjective, sample_triplets, torch_fast_objective,
                              torch_objective)
from skdml import SUML

FAST = dict(n_triplets=200, max_iter=5)


def costs(est):
    return np.array([h["loss"] for h in est.history_])


# --------------------------------------------------------------------------- the paper
def _reference_case_losses(X, triplets, L, S, angle):
    """Slow per-triplet loop over the paper's five cases: concatenate, multiply by S."""
    t4 = 4.0 * np.tan(np.deg2rad(angle)) ** 2

    def sq(v):
        return float(v @ v)

    def softplus(x):
        return float(np.log1p(np.exp(x)))

    out = np.empty((len(triplets), 5))
    for i, (a, p, n) in enumerate(triplets):
        xa, xp, xn = X[a], X[p], X[n]
        cat = np.concatenate
        cases = {  # (c, c+, c-) exactly as in the paper
            1: (cat([xa, xa]), cat([xa, xp]), cat([xa, xn])),
            2: (cat([xa, xn]), cat([xa, xp]), cat([xa, xp])),
            3: (cat([xp, xp]), cat([xp, xn]), cat([xp, xa])),
        }
        for c, (ci, cp, cn) in cases.items():
            s, sp_, sn = S.T @ ci, S.T @ cp, S.T @ cn
            sm = (s + sp_) / 2.0
            f_m = sq(L.T @ s - L.T @ sp_) - t4 * sq(L.T @ sn - L.T @ sm)
            f_s = t4 * sq(sn - sm) - sq(s - sp_)
            out[i, c - 1] = softplus(f_s) + softplus(f_m)
        s4, s4p = S.T @ cat([xa, xp]), S.T @ cat([xa, xn])
        out[i, 3] = -sq(s4 - s4p) + sq(L.T @ s4 - L.T @ s4p)
        s5, s5n = S.T @ cat([xa, xp]), S.T @ cat([xa, xn])
        out[i, 4] = sq(s5 - s5n) - sq(L.T @ s5 - L.T @ s5n)
    return out


def _problem(seed=0, n=12, d=4, l=2, n_triplets=15, scale=0.4):
    rng = np.random.RandomState(seed)
    X = rng.randn(n, d)
    triplets = sample_triplets(n, n_triplets, rng)
    L = rng.randn(d, l) * scale
    S = rng.randn(2 * d, d) * scale
    return X, triplets, L, S


@pytest.mark.parametrize("angle", [30.0, 40.0, 55.0])
def test_five_cases_match_slow_reference(angle):
    X, triplets, L, S = _problem()
    expected = _reference_case_losses(X, triplets, L, S, angle)
    got = SUMLObjective(X, triplets, angle=angle).case_losses(L, S)
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-10)
    # and the independent torch form
    _, losses = torch_objective(torch.tensor(X), triplets, torch.tensor(L), torch.tensor(S),
                                angle=angle)
    np.testing.assert_allclose(losses.numpy(), expected, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("probability", ["sigmoid", "softmax"])
def test_cost_matches_reference_entropy(probability):
    X, triplets, L, S = _problem(seed=1)
    losses = _reference_case_losses(X, triplets, L, S, 40.0)
    if probability == "sigmoid":
        p = 1.0 / (1.0 + np.exp(losses))
    else:
        e = np.exp(-losses - (-losses).max(axis=1, keepdims=True))
        p = e / e.sum(axis=1, keepdims=True)
    entropy = -(p * np.log(p)).sum(axis=1).mean()
    ortho = 0.5 * np.sum((L.T @ L - np.eye(L.shape[1])) ** 2)
    cost, _, _ = SUMLObjective(X, triplets, probability=probability).cost_grad(L, S)
    assert cost == pytest.approx(entropy + ortho, rel=1e-10)


@pytest.mark.parametrize("probability", ["sigmoid", "softmax"])
@pytest.mark.parametrize("ortho_weight", [0.0, 0.5])
def test_gradient_finite_differences(probability, ortho_weight):
    X, triplets, L, S = _problem(seed=2)
    obj = SUMLObjective(X, triplets, probability=probability, ortho_weight=ortho_weight)
    _, grad_L, grad_S = obj.cost_grad(L, S)
    rng = np.random.RandomState(3)
    eps = 1e-6
    for which, grad in (("L", grad_L), ("S", grad_S)):
        for _ in range(4):
            D = rng.randn(*grad.shape)
            Lp, Sp = (L + eps * D, S) if which == "L" else (L, S + eps * D)
            Lm, Sm = (L - eps * D, S) if which == "L" else (L, S - eps * D)
            fd = (obj.cost_grad(Lp, Sp)[0] - obj.cost_grad(Lm, Sm)[0]) / (2 * eps)
            assert np.sum(grad * D) == pytest.approx(fd, rel=1e-5, abs=1e-8)
    # upper half of S (S1) never enters the objective: zero gradient, as in the paper
    assert np.all(grad_S[: X.shape[1]] == 0)


@pytest.mark.parametrize("probability", ["sigmoid", "softmax"])
def test_gradient_matches_torch_autodiff(probability):
    X, triplets, L, S = _problem(seed=4, n=30, d=6, l=3, n_triplets=60)
    cost, grad_L, grad_S = SUMLObjective(X, triplets, probability=probability).cost_grad(L, S)
    Lt = torch.tensor(L, requires_grad=True)
    St = torch.tensor(S, requires_grad=True)
    cost_t, _ = torch_objective(torch.tensor(X), triplets, Lt, St, probability=probability)
    cost_t.backward()
    assert cost == pytest.approx(cost_t.item(), rel=1e-12)
    np.testing.assert_allclose(grad_L, Lt.grad.numpy(), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(grad_S, St.grad.numpy(), rtol=1e-9, atol=1e-12)
    # the fast torch graph (used for the autodiff speed comparison) agrees as well
    obj = SUMLObjective(X, triplets, probability=probability)
    Lf = torch.tensor(L, requires_grad=True)
    S2f = torch.tensor(S[X.shape[1]:], requires_grad=True)
    idx = [torch.as_tensor(i, dtype=torch.int64) for i in (obj.ia, obj.ip, obj.in_)]
    cost_f = torch_fast_objective(torch.tensor(obj.X_u), *idx, Lf, S2f, probability=probability)
    cost_f.backward()
    assert cost == pytest.approx(cost_f.item(), rel=1e-12)
    np.testing.assert_allclose(grad_L, Lf.grad.numpy(), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(grad_S[X.shape[1]:], S2f.grad.numpy(), rtol=1e-9, atol=1e-12)


def test_cost_only_path_and_cache_agree_with_fresh_evaluations():
    # The line search asks for the cost only; the gradient at that point is then
    # completed from the cached forward pass. Interleaved calls at several points must
    # give exactly what a fresh objective gives, and count passes correctly.
    X, triplets, L, S = _problem(seed=6)
    rng = np.random.RandomState(7)
    points = [(L, S), (L + 0.1 * rng.randn(*L.shape), S), (L, S + 0.1 * rng.randn(*S.shape))]
    obj = SUMLObjective(X, triplets, probability="softmax", ortho_weight=2.0)
    first_cost = SUMLObjective(X, triplets, probability="softmax", ortho_weight=2.0).cost(*points[0])
    for Li, Si in points:
        fresh = SUMLObjective(X, triplets, probability="softmax", ortho_weight=2.0)
        c, gL, gS = fresh.cost_grad(Li, Si)
        assert obj.cost(Li, Si) == c
        assert obj.cost(*points[0]) == first_cost  # evicts the cached forward pass
        c2, gL2, gS2 = obj.cost_grad(Li, Si)
        assert c2 == c
        np.testing.assert_array_equal(gL2, gL)
        np.testing.assert_array_equal(gS2, gS)
    assert obj.n_gradients == len(points)
    assert obj.n_evaluations >= len(points)
    # A cost-only evaluation does no backward pass.
    obj2 = SUMLObjective(X, triplets)
    obj2.cost(L, S)
    assert (obj2.n_evaluations, obj2.n_gradients) == (1, 0)
    obj2.cost_grad(L, S)
    assert (obj2.n_evaluations, obj2.n_gradients) == (1, 1)


def test_float32_gradient_close_to_float64():
    X, triplets, L, S = _problem(seed=5, n=40, d=8, l=3, n_triplets=100)
    c64, gL64, gS64 = SUMLObjective(X, triplets).cost_grad(L, S)
    c32, gL32, gS32 = SUMLObjective(X.astype(np.float32), triplets).cost_grad(
        L.astype(np.float32), S.astype(np.float32))
    assert gL32.dtype == np.float32 and gS32.dtype == np.float32
    assert c32 == pytest.approx(c64, rel=1e-5)
    np.testing.assert_allclose(gL32, gL64, rtol=1e-3, atol=1e-5 * np.abs(gL64).max())
    np.testing.assert_allclose(gS32, gS64, rtol=1e-3, atol=1e-5 * np.abs(gS64).max())


def test_sample_triplets_distinct_and_seeded():
    t1 = sample_triplets(5, 500, np.random.RandomState(0))
    t2 = sample_triplets(5, 500, np.random.RandomState(0))
    np.testing.assert_array_equal(t1, t2)
    assert t1.shape == (500, 3) and t1.min() >= 0 and t1.max() < 5
    assert np.all((t1[:, 0] != t1[:, 1]) & (t1[:, 0] != t1[:, 2]) & (t1[:, 1] != t1[:, 2]))


# --------------------------------------------------------------------------- estimator
@pytest.fixture(scope="module")
def digits():
    X, y = load_digits(return_X_y=True)
    return X[:400], y[:400]


def test_same_random_state_same_components(digits):
    X, _ = digits
    a = SUML(n_components=5, random_state=7, **FAST).fit(X)
    b = SUML(n_components=5, random_state=7, **FAST).fit(X)
    c = SUML(n_components=5, random_state=8, **FAST).fit(X)
    np.testing.assert_array_equal(a.components_, b.components_)
    assert not np.allclose(a.components_, c.components_)


def test_stiefel_components_orthonormal_and_attributes(digits):
    X, _ = digits
    est = SUML(n_components=6, manifold="stiefel", random_state=0, **FAST).fit(X)
    assert est.components_.shape == (6, 64)
    np.testing.assert_allclose(est.components_ @ est.components_.T, np.eye(6), atol=1e-5)
    assert est.n_iter_ == FAST["max_iter"]
    assert len(est.history_) >= est.n_iter_
    assert costs(est)[-1] < costs(est)[0]
    assert est.synthesis_.shape == (128, 64)
    assert est.projection_ is None


def test_euclidean_manifold_penalty_keeps_near_orthonormal(digits):
    X, _ = digits
    est = SUML(n_components=4, manifold="euclidean", ortho_weight=5.0, random_state=0,
               **FAST).fit(X)
    gram = est.components_ @ est.components_.T
    assert np.abs(gram - np.eye(4)).max() < 0.2


@pytest.mark.parametrize("solver", ["steepest_descent", "trust_regions"])
def test_other_solvers_decrease_cost(digits, solver):
    X, _ = digits
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est = SUML(n_components=4, solver=solver, n_triplets=200, max_iter=3,
                   random_state=0).fit(X)
    assert costs(est)[-1] < costs(est)[0]


def test_convergence_warning_at_max_iter(digits):
    X, _ = digits
    with pytest.warns(ConvergenceWarning, match="max_iter"):
        SUML(n_components=3, n_triplets=100, max_iter=2, random_state=0).fit(X)


def test_partial_fit_warm_start(digits):
    X, _ = digits
    est = SUML(n_components=4, n_triplets=200, max_iter=3, random_state=0)
    est.partial_fit(X[:200])
    first = est.components_.copy()
    assert est.n_iter_ == 3
    est.partial_fit(X[200:])
    assert est.n_iter_ == 6
    assert not np.allclose(est.components_, first)
    # a call that takes no step (max_iter=0) starts, and so ends, exactly where the last ended
    second, second_S = est.components_.copy(), est.synthesis_.copy()
    est.set_params(max_iter=0).partial_fit(X[:200])
    assert est.n_iter_ == 6
    np.testing.assert_array_equal(est.components_, second)
    np.testing.assert_array_equal(est.synthesis_, second_S)
    # and a fresh estimator on the second batch alone gives a different result
    fresh = SUML(n_components=4, n_triplets=200, max_iter=3, random_state=0).partial_fit(X[200:])
    assert not np.allclose(fresh.components_, second)


def test_partial_fit_keeps_reduction_from_first_call():
    rng = np.random.RandomState(0)
    X = rng.rand(80, 300)
    est = SUML(n_components=3, n_reduce=10, n_triplets=100, max_iter=2, random_state=0)
    est.partial_fit(X[:40])
    P = est.projection_.copy()
    est.partial_fit(X[40:])
    np.testing.assert_array_equal(est.projection_, P)
    assert est.components_.shape == (3, 300)


def test_stochastic_batches(digits):
    X, _ = digits
    est = SUML(n_components=4, batch_size=100, n_triplets=100, max_iter=2,
               manifold="stiefel", random_state=0).fit(X)
    assert est.n_iter_ == 4 * 2
    np.testing.assert_allclose(est.components_ @ est.components_.T, np.eye(4), atol=1e-5)


def test_stochastic_suml_uses_every_sample_with_small_batches():
    # batch_size=3 over 7 samples split 3, 2, 2 and dropped the batches of 2 (4 samples never
    # used); over 4 samples, 2 and 2: nothing trained, the PCA start returned silently
    X = np.random.RandomState(0).randn(7, 5)
    est = SUML(n_components=2, batch_size=3, n_triplets=30, max_iter=3, random_state=0)
    assert {h["batch"] for h in est.fit(X).history_} == {0, 1}  # batches of 4 and 3
    assert est.fit(X[:4]).n_iter_ > 0


def test_high_dimensional_input_is_one_linear_map():
    rng = np.random.RandomState(0)
    X = rng.rand(60, 500)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est = SUML(n_components=5, n_triplets=300, max_iter=5, random_state=0).fit(X)
    assert est.components_.shape == (5, 500)
    assert est.projection_.shape[1] == 500
    X_new = rng.rand(7, 500)
    np.testing.assert_allclose(est.transform(X_new), X_new @ est.components_.T, rtol=1e-10)
    M = est.get_mahalanobis_matrix()
    assert M.shape == (500, 500)
    diff = X_new[0] - X_new[1]
    d_pair = est.pair_distance(np.stack([X_new[0], X_new[1]])[None])[0]
    assert d_pair == pytest.approx(np.sqrt(diff @ M @ diff), rel=1e-8)


def test_pca_initialisation_matches_pca(digits):
    """Stopped before any step (max_iter=0), components_ are the PCA directions."""
    from sklearn.decomposition import PCA

    X, _ = digits
    est = SUML(n_components=3, n_triplets=10, max_iter=0, random_state=0).fit(X)
    assert est.n_iter_ == 0
    pca = PCA(3).fit(X)
    np.testing.assert_allclose(np.abs(est.components_ @ pca.components_.T), np.eye(3), atol=1e-4)


@pytest.mark.parametrize(
    "X, params, match",
    [
        (np.ones((10, 3)), dict(n_components=4), "n_components"),
        (np.array([[0.0, np.nan], [1.0, 2.0], [3.0, 4.0]]), dict(), "NaN"),
        (np.array([[0.0, np.inf], [1.0, 2.0], [3.0, 4.0]]), dict(), "infinity"),
        (np.ones((2, 3)), dict(), "minimum of 3"),
        (np.empty((0, 3)), dict(), "minimum of 3"),
        (np.ones((5, 3)), dict(angle=95.0), "angle"),
        (np.ones((5, 3)), dict(), "constant"),
        (np.ones((5, 3)), dict(probability="tanh"), "probability"),
    ],
)
def test_bad_input_raises(X, params, match):
    with pytest.raises(ValueError, match=match):
        SUML(**params).fit(X)


def test_pipeline_with_knn(digits):
    X, y = digits
    pipe = make_pipeline(SUML(n_components=10, n_triplets=1000, max_iter=10, random_state=0),
                         KNeighborsClassifier(1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        pipe.fit(X[:300], y[:300])
    assert pipe.predict(X[300:]).shape == (100,)  # the gain over PCA: test_learning_gain.py


def test_verbose_prints_table(digits, capsys):
    X, _ = digits
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        SUML(n_components=3, n_triplets=100, max_iter=2, verbose=1, random_state=0).fit(X)
    captured = capsys.readouterr()
    assert "SUML" in captured.err and "iter/s" in captured.err  # the tqdm bar
    # tol ends most runs early (AT&T, USPS, digits: 30-40 of 300): the total and its ETA
    # are upper bounds, labelled as the epoch learners' bars are (the ETA was 10x too long)
    assert "SUML (at most)" in captured.err
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        SUML(n_components=3, n_triplets=100, max_iter=2, verbose=2, random_state=0).fit(X)
    out = capsys.readouterr().out
    assert "Iteration" in out and "Cost" in out  # pymanopt's own table


def test_synthesis_alone_saturates_the_objective_whatever_the_metric(digits):
    # SUML's Notes: with L frozen, S alone takes Eq. (1) far below where a fit stops, at the
    # PCA start as at a random orthonormal map, so the objective does not single out L
    from scipy.optimize import minimize

    X, _ = digits
    fit = SUML(n_components=8, n_triplets=1000, random_state=0).fit(X)
    X_w = fit._state["space"].transform(X).astype(np.float64)  # the space it trained in
    d = X_w.shape[1]
    objective = SUMLObjective(X_w, sample_triplets(len(X_w), 1000, np.random.RandomState(1)),
                              angle=fit.angle, ortho_weight=fit.ortho_weight)
    where_fit_stops = objective.cost(fit._state["L"].astype(np.float64),
                                     fit._state["S"].astype(np.float64))
    start = SUML(n_components=8, max_iter=0, random_state=0).fit(X)._state["L"]
    random_map = np.linalg.qr(np.random.RandomState(2).randn(d, 8))[0]
    for L in (start.astype(np.float64), random_map):
        def cost_and_gradient(s2, L=L):
            cost, _, grad_S = objective.cost_grad(L, np.vstack([np.eye(d) / 2, s2.reshape(d, d)]))
            return cost, grad_S[d:].ravel()

        synthesis_alone = minimize(cost_and_gradient, (np.eye(d) / 2).ravel(), jac=True,
                                   method="L-BFGS-B", options={"maxiter": 50})
        assert synthesis_alone.fun < 0.25 * where_fit_stops, (synthesis_alone.fun,
                                                              where_fit_stops)


@pytest.mark.parametrize("n_triplets", [1, 2])
def test_fewer_than_three_triplets_are_refused_not_drawn_forever(n_triplets):
    import signal

    def endless(signum, frame):  # a regression fails here instead of hanging the suite
        raise TimeoutError("the triplet draw is looping again")

    previous = signal.signal(signal.SIGALRM, endless)
    signal.alarm(60)
    try:
        X = np.random.RandomState(0).randn(50, 5)
        with pytest.raises(ValueError, match="n_triplets"):  # was an endless loop
            SUML(n_components=2, n_triplets=n_triplets, max_iter=3, random_state=0).fit(X)
        with pytest.raises(ValueError, match="at least 3 rows"):
            sample_triplets(2, 5, np.random.RandomState(0))
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def test_a_fitted_suml_keeps_no_copy_of_its_training_data():
    # the preprocessed training set stayed in the state: pickles grew with n_samples
    import pickle
    rng = np.random.RandomState(0)
    sizes = [len(pickle.dumps(SUML(n_components=3, max_iter=0, random_state=0).fit(
        rng.randn(n, 20)))) for n in (200, 4000)]
    assert sizes[1] < 1.5 * sizes[0]


def test_steepest_descent_history_counts_from_the_start_and_ends_at_the_result():
    # pymanopt's steepest descent logs each point before stepping from it: the start was
    # numbered 1 and the final point was missing
    X = load_digits().data[:200]
    for solver in ("conjugate_gradient", "steepest_descent"):
        est = SUML(n_components=3, n_triplets=300, max_iter=3, solver=solver, random_state=0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            est.fit(X)
        assert [r["iteration"] for r in est.history_] == [0, 1, 2, 3], solver
        losses = [r["loss"] for r in est.history_]
        assert losses[-1] < losses[0]


def test_a_tol_larger_than_any_fall_stops_early_without_a_warning():
    # no 10-iteration window fell by tol=10 x the start's cost, so the stop never fired: the
    # fit ran all 300 iterations and warned that the cost "still fell by more than tol"
    X = load_digits().data[:200]
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        est = SUML(n_components=3, n_triplets=300, tol=10.0, random_state=0).fit(X)
    assert est.n_iter_ <= 20


def test_an_orthogonal_map_of_full_width_is_warned_about():
    X = load_digits().data[:100, :8]
    with pytest.warns(UserWarning, match="the learned distance is the Euclidean one"):
        SUML(n_components=8, manifold="stiefel", max_iter=1, random_state=0).fit(X)


def test_the_trust_region_hessian_is_the_gradients_derivative(digits, monkeypatch):
    # trust_regions gets the Euclidean Hessian as a forward difference of the analytic
    # gradient (whose own finite-difference and autograd tests are above): checked against
    # a central difference, its symmetry and its linearity, at the start and one step on
    from skdml.linear import _suml
    X, _ = digits
    captured = []
    real = _suml.run_manopt

    def capture(manifold, cost, gradient, point, **kwargs):
        captured.append((gradient, kwargs["euclidean_hessian"], [p.copy() for p in point]))
        return real(manifold, cost, gradient, point, **kwargs)

    monkeypatch.setattr(_suml, "run_manopt", capture)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        SUML(n_components=4, solver="trust_regions", n_triplets=200, max_iter=2,
             random_state=0).fit(X)
    gradient, hessian, (L, S) = captured[0]
    assert hessian is not None
    rng = np.random.RandomState(0)
    d1 = (rng.randn(*L.shape), rng.randn(*S.shape))
    d2 = (rng.randn(*L.shape), rng.randn(*S.shape))
    t = 1e-4
    plus, minus = gradient(L + t * d1[0], S + t * d1[1]), gradient(L - t * d1[0], S - t * d1[1])
    central = [(p - m) / (2 * t) for p, m in zip(plus, minus)]
    H1 = hessian(L, S, *d1)
    scale = max(np.abs(c).max() for c in central)
    # a forward difference at sqrt(eps): about 1e-3 of the scale in float32 (SUML's default)
    tol = 1e-5 if L.dtype == np.float64 else 1e-2
    for h, c in zip(H1, central):
        np.testing.assert_allclose(h, c, rtol=0, atol=tol * scale)
    H2 = hessian(L, S, *d2)
    inner = lambda a, b: sum(float(np.sum(x * y)) for x, y in zip(a, b))  # noqa: E731
    assert inner(d2, H1) == pytest.approx(inner(d1, H2), rel=tol)
    for h, h2 in zip(hessian(L, S, 2 * d1[0], 2 * d1[1]), H1):
        np.testing.assert_allclose(h, 2 * h2, rtol=0, atol=tol * scale)


def test_one_progress_bar_over_the_whole_fit_ends_at_its_total(digits, capsys):
    # a bar per window of n_iter_no_change iterations: 0/10 ... 10/10, seven times, and
    # never one whose total was the fit's
    import re

    X, _ = digits
    est = SUML(n_components=5, n_triplets=300, random_state=0, verbose=1).fit(X[:300])
    err = capsys.readouterr().err.replace("\r", "\n")
    assert est.n_iter_ < est.max_iter  # stopped early: the bar ends at what it ran
    assert set(re.findall(r"SUML \(at most\):\s+0%\|[^|]*\| 0/(\d+)", err)) == {"300"}
    ends = re.findall(r"SUML \(at most\): 100%\|[^|]*\| (\d+)/(\d+)", err)
    assert ends[-1] == (str(est.n_iter_),) * 2


def test_partial_fit_cannot_switch_the_manifold_of_a_started_model(digits):
    # a Stiefel run from a point off the manifold returned rows 6.3 from orthonormal
    X, _ = digits
    est = SUML(n_components=4, n_triplets=200, random_state=0, max_iter=20, ortho_weight=0.0)
    est.partial_fit(X[:200])
    with pytest.raises(ValueError, match=r"cannot change \['manifold'\]"):
        est.set_params(manifold="stiefel").partial_fit(X[200:400])


def test_partial_fit_refuses_a_batch_that_overflows_the_first_batchs_scale():
    X = np.random.RandomState(0).randn(20, 5)
    est = SUML(n_triplets=50, max_iter=5, random_state=0).partial_fit(X[:10])
    before = est.components_.copy()
    with pytest.raises(ValueError, match="overflows the working scale"):
        est.partial_fit(X[10:] * 1e40)
    np.testing.assert_array_equal(est.components_, before)  # the model is kept


def test_a_non_finite_cost_is_an_error_not_nan_components(monkeypatch):
    from skdml._training import NonFiniteLossError
    from skdml.linear import _suml_objective

    X = np.random.RandomState(0).randn(20, 5)
    monkeypatch.setattr(_suml_objective.SUMLObjective, "cost", lambda self, L, S: np.nan)
    with pytest.raises(NonFiniteLossError, match="non-finite"):
        SUML(n_triplets=50, max_iter=2, random_state=0).fit(X)


def test_max_iter_that_ends_a_tol_window_early_warns(digits):
    # the uncapped fit judges iterations 20-30 fast and runs on: max_iter=25 cut it short
    X = digits[0][:200]
    kw = dict(n_components=4, n_triplets=300, random_state=0)
    full = SUML(**kw).fit(X)
    assert full.n_iter_ > 30
    with pytest.warns(ConvergenceWarning, match="max_iter=25"):
        SUML(max_iter=25, **kw).fit(X)


def test_a_step_that_takes_no_iteration_counts_none(digits):
    X = digits[0]
    est = SUML(n_components=4, n_triplets=100, random_state=0, manifold="stiefel",
               dtype="float64", max_iter=20).partial_fit(X[:100])
    before, components = est.n_iter_, est.components_.copy()
    est.partial_fit(np.repeat(X[:1], 5, axis=0))  # every triplet equal: gradient ~0
    np.testing.assert_array_equal(est.components_, components)
    assert est.n_iter_ == before


@pytest.mark.parametrize("solver", ["conjugate_gradient", "trust_regions"])
def test_suml_fits_with_numpy_errors_raised(solver):
    # np.seterr(all="raise") (a debugging setting) made a harmless underflow of the
    # objective a FloatingPointError
    from sklearn.datasets import load_iris

    X = load_iris(return_X_y=True)[0]
    with np.errstate(all="raise"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        SUML(2, max_iter=5, n_triplets=100, solver=solver, random_state=0).fit(X)


def test_n_reduce_means_what_it_means_in_ecaml_and_jrd():
    # SUML raised an int n_reduce below n_components to n_components, where ECAML and JRD
    # refuse it: one name, two meanings
    from skdml import ECAML

    rng = np.random.RandomState(0)
    X = rng.rand(60, 40)
    y = np.repeat(np.arange(3), 20)
    for est in (SUML(n_components=16, n_reduce=8, max_iter=2, random_state=0),
                ECAML(n_components=16, n_reduce=8, max_iter=2, random_state=0)):
        with pytest.raises(ValueError, match="n_reduce=8 is smaller than n_components=16"):
            est.fit(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        suml = SUML(n_reduce=8, n_triplets=100, max_iter=2, random_state=0).fit(X)
        ecaml = ECAML(n_reduce=8, max_iter=2, random_state=0).fit(X, y)
    # n_components=None: at most n_reduce
    assert suml.components_.shape[0] == ecaml.components_.shape[0] == 8
    assert suml.projection_.shape == (8, 40)  # reduced to exactly n_reduce


def test_a_random_stiefel_start_is_on_the_manifold():
    X = np.random.RandomState(0).randn(40, 5)
    est = SUML(n_components=3, init="random", manifold="stiefel", max_iter=0,
               random_state=0).fit(X)
    L = est._state["L"]
    np.testing.assert_allclose(L.T @ L, np.eye(3), atol=1e-6)


# audit 19 (mutation round 4): end_cost_non_finite
def test_a_non_finite_cost_at_the_end_is_an_error_even_with_finite_parameters(monkeypatch):
    # float32 overflow can make the cost inf while L and S stay finite: that is no model
    from skdml._training import NonFiniteLossError
    from skdml._training._manopt import ManoptRun
    from skdml.linear import _suml, _suml_objective

    values = iter([1.0])
    monkeypatch.setattr(_suml_objective.SUMLObjective, "cost",
                        lambda self, L, S: next(values, np.inf))
    monkeypatch.setattr(_suml, "run_manopt", lambda m, c, g, point, *, max_iter, **kw: ManoptRun(
        point=list(point), n_iter=max_iter,
        history=[{"iteration": i, "loss": 1.0, "gradient_norm": 1.0} for i in range(max_iter + 1)]))
    X = np.random.RandomState(0).randn(20, 4)
    est = SUML(n_components=2, n_triplets=20, max_iter=30, n_iter_no_change=5)
    with pytest.raises(NonFiniteLossError, match="non-finite"):
        est.fit(X)
    assert not hasattr(est, "components_")


# audit 19 (mutation round 4): evaluation_counts
def test_evaluation_counts_sum_the_objectives_of_every_run(monkeypatch):
    from skdml.linear import _suml

    made = []

    class Spy(SUMLObjective):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(_suml, "SUMLObjective", Spy)
    X = np.random.RandomState(0).randn(60, 5)
    est = SUML(n_components=2, n_triplets=50, max_iter=4, batch_size=20, random_state=0).fit(X)
    assert len(made) == 3  # three mini-batches
    assert est.n_cost_evaluations_ == sum(o.n_evaluations for o in made)
    assert est.n_grad_evaluations_ == sum(o.n_gradients for o in made)
    assert est.n_grad_evaluations_ < est.n_cost_evaluations_  # the line search's trial points


# audit 19 (mutation round 4): flop_counts
def test_flop_counts_match_the_dense_products_torch_counts():
    # the analytic counts (the benchmark's GFLOP/s) against torch's count of the dense
    # products of the same graph; the per-triplet part is O(|T| (d + l)) by construction
    from torch.utils.flop_counter import FlopCounterMode

    rng = np.random.RandomState(0)
    X = rng.randn(40, 6)
    triplets = sample_triplets(40, 30, rng)
    obj = SUMLObjective(X, triplets)
    n_u, d = obj.X_u.shape
    l = 3
    per_triplet = obj.n_triplets * 20 * (d + l)
    L = torch.tensor(rng.randn(d, l), requires_grad=True)
    S2 = torch.tensor(rng.randn(d, d), requires_grad=True)
    X_u = torch.as_tensor(obj.X_u)
    idx = [torch.as_tensor(i) for i in (obj.ia, obj.ip, obj.in_)]
    with FlopCounterMode(display=False) as forward:
        J = torch_fast_objective(X_u, *idx, L, S2, ortho_weight=0.0)
    dense_forward = 2 * n_u * d * d + 2 * n_u * d * l
    ortho = 2 * d * l * l  # L^T L, formed by torch_fast_objective even at ortho_weight=0
    assert forward.get_total_flops() == dense_forward + ortho
    assert obj.flops_forward(l) == dense_forward + per_triplet
    with FlopCounterMode(display=False) as backward:
        J.backward()
    # autograd's backward: B^T dG and dG L^T (2 x 2 n_u d l), X_u^T dB (2 n_u d d)
    assert backward.get_total_flops() == 2 * n_u * d * d + 4 * n_u * d * l + 2 * ortho
    assert obj.flops_backward(l) == 2 * n_u * d * d + 4 * n_u * d * l + per_triplet
    assert obj.flops_per_evaluation(l) == obj.flops_forward(l) + obj.flops_backward(l)


# audit 19 (mutation round 4): gradient_tol_and_threads
def test_each_window_stops_on_the_documented_gradient_tolerance(monkeypatch):
    from skdml.linear import _suml

    tols = []
    real = _suml.run_manopt

    def spy(*args, **kwargs):
        tols.append(kwargs["tol"])
        return real(*args, **kwargs)

    monkeypatch.setattr(_suml, "run_manopt", spy)
    X = np.random.RandomState(0).randn(30, 4)
    SUML(n_components=2, n_triplets=50, max_iter=2, random_state=0).fit(X)
    assert tols and set(tols) == {_suml.GRADIENT_TOL} and _suml.GRADIENT_TOL == 1e-8


def test_the_thread_policy_is_told_the_dense_products_of_an_evaluation(monkeypatch):
    from skdml.linear import _suml

    flops, made = [], []
    real = _suml.thread_limits

    class Spy(SUMLObjective):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(self)

    def spy(*args, **kwargs):
        flops.append(kwargs["flops_per_step"])
        return real(*args, **kwargs)

    monkeypatch.setattr(_suml, "SUMLObjective", Spy)
    monkeypatch.setattr(_suml, "thread_limits", spy)
    X = np.random.RandomState(0).randn(30, 4)
    SUML(n_components=2, n_triplets=50, max_iter=2, random_state=0).fit(X)
    n_u, d = made[0].X_u.shape
    assert flops and set(flops) == {4.0 * n_u * d * d}


# audit 19 (mutation round 4): history_windows_not_duplicated
def test_history_over_several_tol_windows_numbers_each_iteration_once():
    # every window's run logs its start, which is the previous window's end: kept once
    X = np.random.RandomState(0).randn(40, 5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est = SUML(n_components=2, n_triplets=100, max_iter=8, n_iter_no_change=2, tol=0.0,
                   solver="steepest_descent", random_state=0).fit(X)
    assert est.n_iter_ > 2  # several windows ran
    assert [r["iteration"] for r in est.history_] == list(range(est.n_iter_ + 1))


# audit 19 (mutation round 4): partial_fit_batches_numbered
def test_partial_fit_calls_are_numbered_in_the_history():
    X = np.random.RandomState(0).randn(30, 4)
    est = SUML(n_components=2, n_triplets=50, max_iter=2, random_state=0)
    est.partial_fit(X).partial_fit(X)
    assert [r["batch"] for r in est.history_][0] == 0
    assert {r["batch"] for r in est.history_} == {0, 1}
    assert est.history_[-1]["batch"] == 1


# audit 19 (mutation round 4): starts
def test_the_pca_start_of_S_is_the_midpoint_map():
    X = np.random.RandomState(0).randn(30, 4)
    S = SUML(n_components=2, max_iter=0).fit(X).synthesis_
    np.testing.assert_array_equal(S, np.vstack([np.eye(4), np.eye(4)]) / 2.0)


def test_the_random_start_of_S_is_scaled_to_unit_variance_synthetic_points():
    X = np.random.RandomState(0).randn(300, 20)
    S = SUML(n_components=2, max_iter=0, init="random", random_state=0).fit(X).synthesis_
    assert S.shape == (40, 20)
    assert S.std() == pytest.approx(1 / np.sqrt(40), rel=0.1)


# audit 19 (mutation round 4): tol_relative_to_start
def _scripted(monkeypatch, costs):
    """run_manopt takes every window in full; the cost after each window is scripted."""
    from skdml._training._manopt import ManoptRun
    from skdml.linear import _suml, _suml_objective

    values = iter(costs)
    last = [costs[-1]]

    def cost(self, L, S):
        last[0] = next(values, last[0])
        return last[0]

    def fake_run(manifold, cost_fn, grad, point, *, max_iter, **kw):
        history = [{"iteration": i, "loss": 0.0, "gradient_norm": 1.0} for i in range(max_iter + 1)]
        return ManoptRun(point=list(point), n_iter=max_iter, history=history, converged=False)

    monkeypatch.setattr(_suml_objective.SUMLObjective, "cost", cost)
    monkeypatch.setattr(_suml, "run_manopt", fake_run)


def test_tol_is_a_fraction_of_the_starting_cost_not_of_the_current_one(monkeypatch):
    # tol=0.05 of the start (10.0) is 0.5: the second window's fall of 0.45 is slow and ends
    # the fit after 20 iterations (0.05 of the current cost, 0.4475, would call it fast)
    _scripted(monkeypatch, [10.0, 9.4, 8.95, 8.9, 8.89])
    X = np.random.RandomState(0).randn(20, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        est = SUML(n_components=2, n_triplets=20, max_iter=100, tol=0.05,
                   n_iter_no_change=10).fit(X)
    assert est.n_iter_ == 20


# audit 19 (mutation round 4): triplets_from_pool
def test_triplets_of_large_data_are_drawn_from_a_random_pool_of_n_triplets_rows(monkeypatch):
    from skdml.linear import _suml

    seen = []

    class Spy(SUMLObjective):
        def __init__(self, X, triplets, **kwargs):
            seen.append(np.asarray(triplets))
            super().__init__(X, triplets, **kwargs)

    monkeypatch.setattr(_suml, "SUMLObjective", Spy)
    X = np.random.RandomState(0).randn(200, 5)
    SUML(n_components=2, n_triplets=20, max_iter=1, random_state=0).fit(X)
    (triplets,) = seen
    assert len(np.unique(triplets)) <= 20  # a pool of n_triplets rows
    assert triplets.max() >= 20  # drawn among all rows, not the first n_triplets
