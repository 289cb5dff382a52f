"""skdml.linear.MLKR: the loss against its definition, the gradient, learning, metric-learn."""

import warnings

import numpy as np
import pytest
import torch
from _metric_learn import needs_metric_learn, run_metric_learn
from sklearn.exceptions import ConvergenceWarning

import skdml.linear._mlkr as mlkr_module
from skdml.linear import MLKR
from skdml.linear._mlkr import mlkr_loss


def _regression(n=60, seed=0):
    rng = np.random.RandomState(seed)
    X = rng.randn(n, 4)
    return X, np.sin(2 * X[:, 0]) + 0.5 * X[:, 1]


def _loop_loss(L, X, y):
    Z = X @ L.T
    total = 0.0
    for i in range(len(X)):
        k = np.exp(-((Z[i] - Z) ** 2).sum(1))
        k[i] = 0.0
        total += (y[i] - k @ y / k.sum()) ** 2
    return total


@pytest.mark.parametrize("block", [2 ** 22, 7])
def test_loss_matches_its_definition(block, monkeypatch):
    monkeypatch.setattr(mlkr_module, "BLOCK_ELEMENTS", block * 60)  # one block, then many
    X, y = _regression()
    L = np.random.RandomState(1).randn(2, 4) * 0.5
    assert mlkr_loss(L, X, y) == pytest.approx(_loop_loss(L, X, y), rel=1e-12)


@pytest.mark.parametrize("n_components", [1, 2, 4])  # the gradient via Z (1), via X (2, 4)
def test_gradient_matches_finite_differences_autograd_and_is_blockwise(n_components,
                                                                        monkeypatch):
    X, y = _regression(n=30)
    L0 = np.random.RandomState(2).randn(n_components, 4) * 0.5
    loss, grad = mlkr_loss(L0, X, y, return_gradient=True)
    assert loss == pytest.approx(_loop_loss(L0, X, y), rel=1e-12)
    monkeypatch.setattr(mlkr_module, "BLOCK_ELEMENTS", 7 * 30)
    np.testing.assert_allclose(mlkr_loss(L0, X, y, return_gradient=True)[1], grad, rtol=1e-10)
    monkeypatch.setattr(mlkr_module, "TILE_ELEMENTS", 3 * 30)  # blocks of 7 rows, tiles of 3
    tiled = mlkr_loss(L0, X, y, return_gradient=True)
    assert tiled[0] == pytest.approx(loss, rel=1e-12)
    np.testing.assert_allclose(tiled[1], grad, rtol=1e-10)
    # autograd through the loop definition
    Lt = torch.tensor(L0, requires_grad=True)
    Xt, yt = torch.tensor(X), torch.tensor(y)
    Z = Xt @ Lt.T
    D = ((Z[:, None] - Z[None]) ** 2).sum(-1) + torch.diag(torch.full((30,), float("inf"),
                                                                     dtype=torch.float64))
    ((torch.softmax(-D, dim=1) @ yt - yt) ** 2).sum().backward()
    np.testing.assert_allclose(grad, Lt.grad.numpy(), rtol=1e-9, atol=1e-12)
    eps = 1e-6
    for idx in np.ndindex(L0.shape):
        step = np.zeros_like(L0)
        step[idx] = eps
        numeric = (_loop_loss(L0 + step, X, y) - _loop_loss(L0 - step, X, y)) / (2 * eps)
        assert grad[idx] == pytest.approx(numeric, rel=1e-5, abs=1e-7)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_mlkr_learns_the_relevant_features():
    X, y = _regression(n=100, seed=3)
    X = np.c_[X, 3.0 * np.random.RandomState(3).randn(100, 3)]  # + irrelevant noise
    est = MLKR(max_iter=100).fit(X, y)
    assert est.objective_ < 0.3 * est.initial_objective_
    weights = np.linalg.norm(est.components_, axis=0)
    assert weights[:2].min() > 3 * weights[2:].max()


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_mlkr_evaluates_each_point_once(monkeypatch):
    """initial_objective_ is the optimiser's first evaluation, not one more: every call of the loss
    is an evaluation L-BFGS-B counts (its nfev)."""
    from scipy import optimize

    from skdml._training import _lbfgs

    calls, nfev = [], []
    loss = mlkr_module.mlkr_loss
    monkeypatch.setattr(mlkr_module, "mlkr_loss", lambda *a, **k: calls.append(1) or loss(*a, **k))
    minimize = optimize.minimize
    monkeypatch.setattr(_lbfgs, "minimize",
                        lambda *a, **k: (lambda r: nfev.append(r.nfev) or r)(minimize(*a, **k)))
    X, y = _regression()
    est = MLKR(max_iter=20).fit(X, y)
    assert len(calls) == nfev[0] > 1
    assert est.initial_objective_ == pytest.approx(loss(np.eye(4), X, y), rel=1e-12)


def test_mlkr_options_and_errors():
    X, y = _regression()
    assert MLKR(max_iter=0).fit(X, y).components_.tolist() == np.eye(4).tolist()
    assert MLKR(n_components=2, max_iter=0).fit(X, y).components_.shape == (2, 4)
    with pytest.raises(ValueError, match="init array"):
        MLKR(init=np.eye(3)).fit(X, y)
    with pytest.warns(ConvergenceWarning, match="max_iter=1"):
        MLKR(max_iter=1).fit(X, y)
    with pytest.raises(ValueError, match="NaN"):
        MLKR().fit(X, np.full(len(y), np.nan))


@needs_metric_learn
def test_mlkr_reaches_metric_learns_optimum_or_lower():
    """Same loss, same identity start, both L-BFGS: ours ends at most 1% above metric-learn
    0.7.0's final loss (local optima may differ by the line search's path)."""
    X, y = _regression(n=60)
    out = run_metric_learn("""
est = metric_learn.MLKR(init="identity", max_iter=200).fit(inp["X"], inp["y"])
out["L"] = est.components_
""", X=X, y=y)
    theirs = _loop_loss(out["L"], X, y)
    ours = MLKR(max_iter=200).fit(X, y)
    assert ours.objective_ <= theirs * 1.01
    assert ours.objective_ < 0.5 * ours.initial_objective_


def test_mlkr_refuses_a_zero_start_and_runs_max_iter_quietly_with_tol_0():
    import warnings
    rng = np.random.RandomState(0)
    X = rng.randn(60, 4)
    y = X[:, 0] + 0.1 * rng.randn(60)
    with pytest.raises(ValueError, match="rank 0"):  # was the zero map, silently
        MLKR(init=np.zeros((4, 4))).fit(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        est = MLKR(tol=0.0, max_iter=3).fit(X, y)
    assert est.n_iter_ == 3


def test_string_targets_are_refused_with_a_clear_message():
    # scikit-learn's y_numeric converts object arrays only: "<U1" reached a numpy matmul error
    X = np.random.RandomState(0).randn(12, 3)
    with pytest.raises(ValueError, match="numeric targets"):
        MLKR().fit(X, np.array(list("abc") * 4))
    # a pandas column of strings or categories failed in validate_data's conversion first
    # ("could not convert string to float: 'a'"); numbers in an object column still work
    pd = pytest.importorskip("pandas")
    for y in (pd.Series(list("abc") * 4), pd.Series(pd.Categorical(list("abc") * 4)),
              np.array([1.0, "a"] * 6, dtype=object)):
        with pytest.raises(ValueError, match="numeric targets; y holds strings"):
            MLKR().fit(X, y)
    MLKR(max_iter=2).fit(X, np.arange(12).astype(object))


def test_an_offset_changes_nothing():
    # at an offset of 1e8 the uncentred distances' expansion stopped L-BFGS after 1 iteration
    rng = np.random.RandomState(0)
    X = rng.randn(60, 4)
    t = X[:, 0] + 0.1 * rng.randn(60)
    plain = MLKR(max_iter=30).fit(X, t)
    shifted = MLKR(max_iter=30).fit(X + 1e8, t)
    assert shifted.n_iter_ == plain.n_iter_
    # X + 1e8 itself is rounded to 1.5e-8: the same map to about that, amplified by L-BFGS
    np.testing.assert_allclose(shifted.components_, plain.components_, rtol=0, atol=1e-5)


def test_mlkr_refuses_a_constant_X_and_names_y_when_the_targets_overflow():
    rng = np.random.RandomState(0)
    with pytest.raises(ValueError, match="X is constant"):
        MLKR().fit(np.ones((12, 3)), np.arange(12.0))
    X = rng.randn(12, 3)
    with pytest.raises(ValueError, match="targets y are too large"):
        MLKR().fit(X, X[:, 0] * 1e160)


def test_mlkr_that_barely_moves_from_its_start_says_to_standardise():
    from sklearn.datasets import load_wine
    from sklearn.preprocessing import StandardScaler

    X, y = load_wine(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    est = MLKR().fit(X, y.astype(float))  # learns at unit scale, quietly
    assert est.objective_ < 0.5 * est.initial_objective_
    with pytest.warns(UserWarning, match="standardise X"):  # every kernel weight 0
        MLKR().fit(X * 1e4, y.astype(float))


def test_mlkr_takes_boolean_targets_and_a_refit_from_its_solution_is_quiet():
    import warnings

    X = np.random.RandomState(0).randn(60, 3)
    est = MLKR(random_state=0).fit(X, X[:, 0] > 0)  # bool: numpy refused their differences
    assert est.objective_ < est.initial_objective_
    y = X[:, 0] + 0.1 * X[:, 1]
    first = MLKR().fit(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an optimal given start is no scale problem
        MLKR(init=first.components_).fit(X, y)


def test_an_offset_on_the_targets_does_not_move_the_metric():
    # MLKR's loss reads differences of targets only; uncentred, y + 1e12 moved components_ by
    # 3e-2 (relative) and int64 targets 10**18 + k collapsed to 3 distinct floats
    rng = np.random.RandomState(0)
    X = rng.randn(40, 4)
    y = X[:, 0] * 3 + rng.randn(40) * 0.1
    ticks = np.round(y * 1000).astype(np.int64)
    ticks -= ticks.min()

    def fit(target):
        return MLKR(n_components=2, max_iter=100, random_state=0).fit(X, target).components_

    ref = fit(y)
    assert np.abs(fit(y + 1e9) - ref).max() <= 1e-5 * np.abs(ref).max()
    int_ref = fit(ticks.astype(np.float64))
    np.testing.assert_array_equal(fit(ticks + 10**18), int_ref)
    np.testing.assert_array_equal(fit(ticks.astype(np.uint64) + np.uint64(2**63)), int_ref)


def test_a_constant_target_is_said_to_teach_nothing():
    X = np.random.RandomState(0).randn(30, 3)
    with pytest.warns(UserWarning, match="y is constant"):
        MLKR(max_iter=5).fit(X, np.full(30, 3.0))


def test_a_fit_that_learns_a_little_does_not_say_it_barely_moved():
    # "barely moved" is for a loss that fell by less than tol (a flat kernel); here the
    # loss falls by 30 % on standardised data: a real, modest gain, and no such warning
    rng = np.random.RandomState(0)
    rng.randn(60, 3), rng.randn(60)  # skip one draw: this data loses 30 % of its loss
    X = rng.randn(60, 3)
    y = X[:, 0] + 0.6 * rng.randn(60)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="MLKR barely moved")
        est = MLKR(max_iter=100).fit(X, y)
    assert 0.5 < est.objective_ / est.initial_objective_ < 0.9
