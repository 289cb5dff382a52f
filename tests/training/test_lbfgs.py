"""skdml/_training/_lbfgs.py: the one L-BFGS runner, and its report of a cut-short run."""

import warnings

import numpy as np
import pytest
from sklearn.datasets import load_iris
from sklearn.exceptions import ConvergenceWarning

from skdml._training._lbfgs import run_lbfgs
from skdml._training._progress import IterationBar
from skdml.linear import LMNN, MLKR, MMC_Supervised, LSML_Supervised


def _rosen(x):
    a, b = x
    value = (1 - a) ** 2 + 100 * (b - a * a) ** 2
    grad = np.array([-2 * (1 - a) - 400 * a * (b - a * a), 200 * (b - a * a)])
    return float(value), grad


def test_a_run_that_converges_on_its_last_allowed_iteration_is_not_cut_short():
    free = run_lbfgs(_rosen, np.array([-1.2, 1.0]), max_iter=1000, tol=1e-9)
    assert not free.cut_short and 1 < free.n_iter < 1000
    capped = run_lbfgs(_rosen, np.array([-1.2, 1.0]), max_iter=free.n_iter, tol=1e-9)
    assert not capped.cut_short and capped.n_iter == free.n_iter
    np.testing.assert_array_equal(capped.x, free.x)
    assert capped.value == free.value == _rosen(free.x)[0]
    short = run_lbfgs(_rosen, np.array([-1.2, 1.0]), max_iter=free.n_iter - 1, tol=1e-9)
    assert short.cut_short and short.n_iter == free.n_iter - 1
    # tol=0 asks for the budget: never a cut
    assert not run_lbfgs(_rosen, np.array([-1.2, 1.0]), max_iter=3, tol=0.0).cut_short


def test_one_iteration_budget_compares_with_the_start_and_the_bar_counts_iterations(
        monkeypatch):
    from skdml._training import _lbfgs

    start = np.array([-1.2, 1.0])
    # the start's value is read from L-BFGS-B's own first evaluation: no extra call (LSML and
    # MMC print a line per evaluation at verbose=2, and each is a full loss)
    calls, nfev = [], []
    real = _lbfgs.minimize
    monkeypatch.setattr(_lbfgs, "minimize",
                        lambda *a, **k: (lambda r: nfev.append(r.nfev) or r)(real(*a, **k)))
    run = run_lbfgs(lambda x: calls.append(1) or _rosen(x), start, max_iter=1, tol=1e-9)
    assert run.cut_short and len(calls) == nfev[0]
    assert not run_lbfgs(_rosen, np.zeros(2) + 1.0, max_iter=1, tol=1e-9).cut_short  # optimal
    with IterationBar(0, 50, "test") as bar:
        run = run_lbfgs(_rosen, start, max_iter=50, tol=1e-9, bar=bar)
    assert bar.n == run.n_iter


MAKERS = {
    "LMNN": lambda m: LMNN(n_components=2, max_iter=m, random_state=0),
    "MLKR": lambda m: MLKR(n_components=2, max_iter=m, random_state=0),
    "LSML_Supervised": lambda m: LSML_Supervised(max_iter=m, random_state=0),
    "MMC_Supervised": lambda m: MMC_Supervised(max_iter=m, diagonal=True, random_state=0),
}


def _fit(est, X, y):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est.fit(X, y)
    return est, [w for w in caught if issubclass(w.category, ConvergenceWarning)]


@pytest.mark.parametrize("name", sorted(MAKERS))
def test_a_learner_that_converged_at_max_iter_does_not_say_it_was_cut_short(name):
    # audit 21: scipy counts the budget before it tests the last step's decrease, so a
    # run converged on its last allowed iteration warned, with the converged model
    X, y = load_iris(return_X_y=True)
    y = y.astype(float) if name == "MLKR" else y
    free, warned = _fit(MAKERS[name](1000), X, y)
    assert not warned and free.n_iter_ > 1
    capped, warned = _fit(MAKERS[name](free.n_iter_), X, y)
    assert not warned
    np.testing.assert_array_equal(capped.components_, free.components_)
    _, warned = _fit(MAKERS[name](free.n_iter_ - 1), X, y)
    assert len(warned) == 1 and "max_iter" in str(warned[0].message)
