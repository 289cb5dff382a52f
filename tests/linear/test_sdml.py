"""skdml.linear.SDML and SDML_Supervised: the graphical-lasso problem, learning, metric-learn."""

import warnings

import numpy as np
import pytest
from _classic_data import knn_score, noisy_classes
from _metric_learn import needs_metric_learn, run_metric_learn
from sklearn.datasets import load_iris
from sklearn.exceptions import ConvergenceWarning

from skdml.constraints import Constraints
from skdml.linear import SDML, SDML_Supervised


def _pairs(seed=0):
    rng = np.random.RandomState(seed)
    y = np.repeat([0, 1, 2], 10)
    X = np.c_[3.0 * y + 0.3 * rng.randn(30), 5.0 * rng.randn(30), rng.randn(30)]
    idx, labels = Constraints(y).labeled_pairs(20, random_state=seed)
    return X, idx, labels


def _objective(M, S, lam):
    """SDML's objective, the L1 penalty off the diagonal (scikit-learn's graphical lasso)."""
    return np.trace(M @ S) - np.linalg.slogdet(M)[1] + lam * (np.abs(M).sum()
                                                              - np.abs(np.diag(M)).sum())


def test_sdml_solves_its_l1_logdet_problem():
    """The returned M is optimal: its objective beats small perturbations that stay SPD."""
    X, idx, labels = _pairs()
    est = SDML(balance_param=1e-2, prior="covariance", tol=1e-8, max_iter=500,
               preprocessor=X).fit(idx, labels)
    diff = X[idx[:, 0]] - X[idx[:, 1]]
    S = np.linalg.inv(np.linalg.inv(np.cov(np.unique(X[idx].reshape(-1, 3), axis=0),
                                           rowvar=False))) + 1e-2 * (diff.T * labels) @ diff
    M = est.get_mahalanobis_matrix()
    best = _objective(M, S, 0.01)
    rng = np.random.RandomState(0)
    for _ in range(50):
        E = rng.randn(3, 3) * 1e-3
        assert _objective(M + (E + E.T), S, 0.01) >= best - 1e-9


def test_sdml_shrinks_the_noise_and_learns():
    X, idx, labels = _pairs()
    est = SDML(balance_param=1e-2, prior="covariance", preprocessor=X).fit(idx, labels)
    M = est.get_mahalanobis_matrix()
    assert M[0, 0] > 5 * M[1, 1]
    X, y = noisy_classes(seed=7)
    assert knn_score(SDML_Supervised(balance_param=1e-3, prior="covariance", random_state=0),
                     X, y) > knn_score(None, X, y) + 0.2


def test_sdml_errors_name_the_cause():
    X, idx, labels = _pairs()
    with pytest.raises(ValueError, match="lower balance_param"):
        SDML(balance_param=0.1, preprocessor=X).fit(idx, labels)
    with pytest.raises(ValueError, match="n_features=1"):
        SDML(preprocessor=X[:, :1]).fit(idx, labels)


@needs_metric_learn
def test_sdml_agrees_with_metric_learn_once_its_solver_call_is_fixed():
    """metric-learn 0.7.0's SDML passes ``cov_init`` to scikit-learn's graphical_lasso, which
    does not take it (a RuntimeError on scikit-learn 1.7, checked here); with that keyword
    dropped in its module, its matrix is ours within 1e-6."""
    X, idx, labels = _pairs()
    out = run_metric_learn("""
kw = dict(balance_param=1e-2, prior="covariance")
try:
    metric_learn.SDML(**kw).fit(inp["pairs"], inp["y"])
    out["broken"] = False
except RuntimeError as exc:
    out["broken"] = "cov_init" in str(exc)
import metric_learn.sdml as sdml
solver = sdml.graphical_lasso
sdml.graphical_lasso = lambda *a, cov_init=None, **k: solver(*a, **k)
out["M"] = metric_learn.SDML(**kw).fit(inp["pairs"], inp["y"]).get_mahalanobis_matrix()
""", pairs=X[idx], y=labels)
    assert bool(out["broken"])
    mine = SDML(balance_param=1e-2, prior="covariance").fit(X[idx], labels)
    np.testing.assert_allclose(mine.get_mahalanobis_matrix(), out["M"], rtol=1e-6, atol=1e-9)


def test_a_graphical_lasso_cut_short_is_named_as_the_cause():
    # the advice used to be "lower balance_param or use prior='covariance'", the settings
    # already in use, when max_iter=1 had stopped the graphical lasso before it converged
    X, y = load_iris(return_X_y=True)
    est = SDML_Supervised(balance_param=1e-4, prior="covariance", max_iter=1, random_state=0)
    with pytest.raises(ValueError, match="stopped at max_iter=1 before converging"):
        est.fit(X, y)
    est.set_params(max_iter=3).fit(X, y)  # converged: the problem itself was fine


def test_sdml_refuses_pairs_of_equal_points():
    with pytest.raises(ValueError, match="every pair joins two equal points"):
        SDML_Supervised(random_state=0).fit(np.ones((12, 3)), np.repeat([0, 1, 2], 4))


def test_a_seeded_fit_leaves_numpys_global_stream_alone():
    # scikit-learn's graphical lasso draws from np.random: the user's next draw changed
    from sklearn.datasets import load_iris

    X, y = load_iris(return_X_y=True)
    np.random.seed(0)
    expected = np.random.rand()
    np.random.seed(0)
    SDML_Supervised(balance_param=1e-4, prior="covariance", random_state=0).fit(X, y)
    assert np.random.rand() == expected


def test_the_defaults_failure_names_the_missing_minimum_not_max_iter():
    # at metric-learn's defaults the fit failed advising to raise max_iter, even at 10,000
    from sklearn.datasets import load_iris

    X, y = load_iris(return_X_y=True)
    with pytest.raises(ValueError, match="smallest eigenvalue .* no minimum"):
        SDML_Supervised(max_iter=200, random_state=0).fit(X, y)


def _iris_thirds():
    from sklearn.datasets import load_iris

    X, y = load_iris(return_X_y=True)
    return X[::3], y[::3]


def test_two_fits_in_two_threads_leave_the_warnings_machinery_as_they_found_it():
    # catch_warnings(record=True) swaps process-wide state: two overlapping sections
    # restored each other's, and every later warning of the process went to a finished
    # fit's list (3 of 3 runs)
    import threading
    import warnings

    X, y = _iris_thirds()
    impl, filters = warnings._showwarnmsg_impl, list(warnings.filters)

    def fits():
        for _ in range(60):
            SDML_Supervised(balance_param=1e-4, prior="covariance", random_state=0).fit(X, y)

    workers = [threading.Thread(target=fits) for _ in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert warnings._showwarnmsg_impl is impl
    assert list(warnings.filters) == filters


def test_convergence_is_read_from_the_iterations_not_from_warnings_of_other_threads(
        monkeypatch):
    # the fit recorded every thread's warnings and took another thread's ConvergenceWarning
    # for its own: 57 of 60 converged fits said they had not
    import warnings

    from sklearn.covariance import graphical_lasso

    import skdml.linear._sdml as sdml_module

    def noisy(*args, **kwargs):  # a converged run, while "another thread" warns
        warnings.warn("another thread's fit did not converge", ConvergenceWarning)
        return graphical_lasso(*args, **kwargs)

    monkeypatch.setattr(sdml_module, "graphical_lasso", noisy)
    X, y = _iris_thirds()
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        warnings.filterwarnings("ignore", message="another thread")
        est = SDML_Supervised(balance_param=1e-4, prior="covariance", random_state=0).fit(X, y)
    assert est.n_iter_ < est.max_iter


def test_the_global_stream_is_not_put_back_under_another_thread(monkeypatch):
    # putting numpy's global state back while another thread drew from it repeated that
    # thread's draws (half of 3.3 million draws were repeats)
    import threading

    X, y = _iris_thirds()
    put_back = []
    monkeypatch.setattr(np.random, "set_state", lambda state: put_back.append(state))
    release = threading.Event()
    other = threading.Thread(target=release.wait)
    other.start()
    try:
        SDML_Supervised(balance_param=1e-4, prior="covariance", random_state=0).fit(X, y)
    finally:
        release.set()
        other.join()
    assert put_back == []


def test_a_run_that_converges_at_its_last_iteration_does_not_warn():
    # convergence read from n_iter_ >= max_iter warned for a run that met tol at its last
    # allowed iteration (max_iter=1 always warned)
    import warnings

    from sklearn.datasets import load_wine

    X, y = load_wine(return_X_y=True)
    X = (X - X.mean(0)) / X.std(0)
    kw = dict(random_state=0, prior="covariance", balance_param=1e-4, tol=0.1)
    assert SDML_Supervised(max_iter=20, **kw).fit(X, y).n_iter_ == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        SDML_Supervised(max_iter=1, **kw).fit(X, y)


def test_a_truncated_but_definite_lasso_warns_and_a_converged_one_does_not():
    # max_iter=3 ends with a duality gap of about 2e-3 > tol=1e-4 (a PSD iterate: no error),
    # so ConvergenceWarning is due; at max_iter=100 it converges (7 iterations) in silence
    X, y = load_iris(return_X_y=True)
    est = SDML_Supervised(balance_param=1e-4, prior="covariance", max_iter=3, random_state=0)
    with pytest.warns(ConvergenceWarning, match="did not converge in max_iter=3"):
        est.fit(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        est.set_params(max_iter=100).fit(X, y)
    assert est.n_iter_ < 100
