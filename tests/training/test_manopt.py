"""skdml/_training/_manopt.py: pymanopt's solvers as the batch solver of the linear learners."""

import warnings

import numpy as np

from skdml._training import run_manopt


def test_run_manopt_reads_the_stop_reason_from_the_result():
    from pymanopt.manifolds import Euclidean

    def cost(x):
        return float(np.sum((x - 1.0) ** 2))

    def grad(x):
        return 2.0 * (x - 1.0)

    done = run_manopt(Euclidean(3), cost, grad, np.zeros(3), max_iter=50, tol=1e-8)
    assert done.converged and done.stop_reason == "gradient_norm"
    assert done.history[0]["iteration"] == 0 and done.history[0]["loss"] == 3.0
    cut = run_manopt(Euclidean(3), lambda x: float(np.sum(np.cosh(x - 1.0))),
                     lambda x: np.sinh(x - 1.0), np.full(3, 5.0), max_iter=2, tol=1e-12,
                     solver="steepest_descent")
    assert not cut.converged and cut.stop_reason == "max_iter" and cut.n_iter == 2


def test_the_batch_solvers_bar_ends_at_the_iterations_run_and_says_at_most():
    # audit 21: ECAML's conjugate-gradient bar stopped at 38/300 (13 %) for 37 iterations:
    # it counted gradient evaluations (the start too) and was never closed at its end
    import contextlib
    import io

    from sklearn.datasets import load_iris

    from skdml.linear import ECAML

    X, y = load_iris(return_X_y=True)
    err = io.StringIO()
    with contextlib.redirect_stderr(err), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = ECAML(n_components=2, solver="conjugate_gradient", verbose=1,
                    random_state=0).fit(X, y)
    assert 0 < est.n_iter_ < est.max_iter
    last = err.getvalue().replace("\r", "\n").strip().splitlines()[-1]
    assert "ECAML (at most)" in last and "100%" in last
    assert f"{est.n_iter_}/{est.n_iter_}" in last
