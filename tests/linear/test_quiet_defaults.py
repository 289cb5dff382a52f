"""Default fits stop on a tolerance (no ConvergenceWarning); a user-set max_iter that cuts
the optimisation short still warns. Data: scikit-learn's bundled digits."""

import warnings

import numpy as np
import pytest
from sklearn.datasets import load_digits
from sklearn.exceptions import ConvergenceWarning

from skdml import ECAML, JRD, SUML


@pytest.fixture(scope="module")
def digits():
    X, y = load_digits(return_X_y=True)
    return X / 16.0, y


@pytest.mark.slow
@pytest.mark.parametrize("learner", [SUML, ECAML, JRD], ids=lambda c: c.__name__)
def test_default_fit_emits_no_convergence_warning(learner, digits):
    X, y = digits
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        est = learner(n_components=16, random_state=0).fit(X, y)
    # it stopped on the tolerance, not the budget
    if learner is SUML:
        assert 0 < est.n_iter_ < est.max_iter
    else:  # the validation run did; n_iter_ = 0 when no epoch beat the start
        validated = [r for r in est.history_ if not r.get("refit")]
        assert 0 < len(validated) < est.max_iter and est.n_iter_ < est.max_iter
    if learner is SUML:  # at the end of its fast descent, not on a plateau at the start
        losses = np.array([r["loss"] for r in est.history_])
        assert losses[-1] < 0.5 * losses[0]


@pytest.mark.parametrize("learner, max_iter", [(SUML, 5), (ECAML, 2), (JRD, 2)],
                         ids=["SUML", "ECAML", "JRD"])
def test_user_max_iter_that_cuts_short_warns(learner, max_iter, digits):
    X, y = digits
    with pytest.warns(ConvergenceWarning, match="max_iter"):
        learner(n_components=16, max_iter=max_iter, random_state=0).fit(X, y)


@pytest.mark.parametrize("learner, epoch_rate", [(ECAML, 0.05), (JRD, 0.015)],
                         ids=["ECAML", "JRD"])
def test_auto_learning_rate_is_a_per_epoch_rate(learner, epoch_rate):
    est = learner()
    assert est._learning_rate(50) == pytest.approx(epoch_rate / 50)  # USPS-sized epochs
    assert est._learning_rate(2) == pytest.approx(min(0.01, epoch_rate / 2))  # AT&T-sized
    assert est._learning_rate(1) <= 0.01
    assert learner(learning_rate=0.123)._learning_rate(50) == 0.123



@pytest.mark.parametrize("learner", [ECAML, JRD], ids=["ECAML", "JRD"])
def test_flat_hold_out_at_max_iter_is_not_a_cut_short_fit(learner):
    # one batch an epoch makes the patience (300 steps) equal to max_iter, so early
    # stopping cannot fire; a hold-out score flat since the first epochs was not cut short
    from sklearn.datasets import load_iris

    # (the start classifies the 3 held-out samples perfectly, so the score adds their
    # neighbourhoods' purity: ECAML's is flat from epoch 4, JRD's still rose at epoch 31)
    X, y = load_iris(return_X_y=True)
    idx = np.r_[0:10, 50:60, 100:110]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        est = learner(max_iter=40, n_iter_no_change=10, random_state=0).fit(X[idx], y[idx])
    validated = [r for r in est.history_ if not r.get("refit")]
    assert len(validated) == est.max_iter  # the budget was reached
    scores = [r["validation_score"] for r in validated]
    rising = max(scores[-10:]) > max(scores[:-10]) + est.tol  # within the last 10 epochs
    warned = any(issubclass(w.category, ConvergenceWarning) for w in caught)
    assert warned == rising, (scores, warned)  # here ECAML's flat, JRD's rising
    # and a score still rising in the last epochs does warn
    with pytest.warns(ConvergenceWarning, match="max_iter"):
        learner(max_iter=1, n_iter_no_change=10, random_state=0).fit(X[idx], y[idx])
