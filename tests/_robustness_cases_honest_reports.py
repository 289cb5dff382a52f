"""Audit cases of the eleventh audit (what a fit tells the user): see tests/_robustness_cases.py.

Silent (a wrong report, with a right model): a ``ConvergenceWarning`` from an L-BFGS
learner that converged on its last allowed iteration, and from SCML's k-means on data
with fewer distinct samples than centres; ECAML's conjugate-gradient bar stopping at
13 %; warnings naming a file of scikit-learn's or of the standard library's ``pickle.py``
instead of the user's line (a column of labels, the feature names of ``transform``,
``joblib.dump``); a warning filter of scikit-learn's left in place for the whole process
by two threads' sections.
"""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
import threading
import warnings

import numpy as np
from _robustness_cases import Case, check, deep

HERE = os.path.abspath(__file__).replace(".pyc", ".py")


def _iris():
    from sklearn.datasets import load_iris
    return load_iris(return_X_y=True)


def _recorded(call):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call()
    return caught


def _named_here(caught, what):
    check(caught, f"{what}: no warning")
    where = sorted({os.path.basename(w.filename) for w in caught
                    if os.path.abspath(w.filename) != HERE})
    check(not where, f"{what}: the warning names {where}, not the line that called")


# ------------------------------------------------------------------ silent
def lbfgs_converged_at_max_iter():
    from sklearn.exceptions import ConvergenceWarning

    from skdml.linear import LMNN
    X, y = _iris()
    free = LMNN(n_components=2, max_iter=1000, random_state=0).fit(X, y)
    caught = _recorded(lambda: LMNN(n_components=2, max_iter=free.n_iter_,
                                    random_state=0).fit(X, y))
    check(not [w for w in caught if issubclass(w.category, ConvergenceWarning)],
          f"LMNN converged at max_iter={free.n_iter_} and warned that it did not")


def conjugate_gradient_bar():
    from skdml import ECAML
    X, y = _iris()
    err = io.StringIO()
    with contextlib.redirect_stderr(err), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = ECAML(n_components=2, solver="conjugate_gradient", verbose=1,
                    random_state=0).fit(X, y)
    last = err.getvalue().replace("\r", "\n").strip().splitlines()[-1]
    check("100%" in last and f"{est.n_iter_}/{est.n_iter_}" in last,
          f"after {est.n_iter_} iterations the bar says {last!r}")


def scml_repeated_centres():
    from sklearn.exceptions import ConvergenceWarning

    from skdml.linear import SCML_Supervised
    rng = np.random.RandomState(0)
    X, y = np.repeat(rng.randn(6, 5), 20, axis=0), np.repeat([0, 0, 1, 1, 2, 2], 20)
    caught = _recorded(lambda: SCML_Supervised(n_basis=40, max_iter=600,
                                               random_state=0).fit(X, y))
    check(not [w for w in caught if issubclass(w.category, ConvergenceWarning)],
          "SCML warned that k-means did not converge (it repeats a centre: nothing was cut)")


def column_of_labels_warning():
    from skdml import LFDA
    X, y = _iris()
    _named_here(_recorded(lambda: LFDA(k=3).fit(X, y[:, None])), "a column of labels")


def feature_names_warning():
    import pandas as pd

    from skdml import LFDA
    X, y = _iris()
    est = LFDA(k=3).fit(pd.DataFrame(X, columns=list("abcd")), y)
    _named_here(_recorded(lambda: est.transform(X)), "transform without the feature names")


def joblib_dump_warning():
    import joblib

    from skdml.callbacks import Callback
    X, y = _iris()
    with tempfile.TemporaryDirectory() as tmp:
        class Holder(Callback):  # holds an open file: cannot be saved
            def __init__(self):
                self.log = open(os.path.join(tmp, "log.txt"), "w")

        holder = Holder()
        try:
            est = deep(n_components=2, max_iter=1, early_stopping=False,
                       callbacks=[holder]).fit(X.astype(np.float32), y)
            caught = _recorded(lambda: joblib.dump(est, os.path.join(tmp, "est.joblib")))
        finally:
            holder.log.close()
    _named_here(caught, "joblib.dump of a learner with an unsavable callback")


def filters_left_by_two_threads():
    """Another thread's section (scikit-learn's ``check_array`` style) overlapping SDML's
    quiet section, in the order that left a filter behind: ours in, theirs in, ours out,
    theirs out."""
    from skdml.linear import SDML_Supervised, _sdml
    real = _sdml.graphical_lasso
    go, inside, leave = threading.Event(), threading.Event(), threading.Event()

    def other_section():  # a thread of the user's program, running beside the fit
        go.wait(30)
        with warnings.catch_warnings():
            warnings.simplefilter("error", np.exceptions.ComplexWarning)
            inside.set()
            leave.wait(30)

    def overlapping(*args, **kwargs):  # runs inside SDML's quiet section
        go.set()
        inside.wait(30)
        return real(*args, **kwargs)

    X, y = _iris()
    other = threading.Thread(target=other_section)
    other.start()
    before = list(warnings.filters)
    _sdml.graphical_lasso = overlapping
    try:
        SDML_Supervised(balance_param=1e-4, prior="covariance", random_state=0).fit(
            X[::3], y[::3])
    finally:
        _sdml.graphical_lasso = real
        go.set()
        leave.set()
        other.join()
    # a section's own item may come back in the list the other thread put back: it matches
    # only inside a section (skdml's ``_InSection``), so it is not a filter in force
    after = [f for f in warnings.filters if type(f[1]).__name__ != "_InSection"]
    warnings.filters[:] = before  # put the process back for the cases that follow
    check(after == before, f"filters left behind: {[f[:3] for f in after if f not in before]}")


CASES = [
    Case("an L-BFGS learner that converged at max_iter", "silent", lbfgs_converged_at_max_iter),
    Case("ECAML's conjugate-gradient progress bar", "silent", conjugate_gradient_bar),
    Case("SCML's k-means with fewer distinct samples than centres", "silent",
         scml_repeated_centres),
    Case("a column of labels: where the warning points", "silent", column_of_labels_warning),
    Case("transform without the fit's feature names: where the warning points", "silent",
         feature_names_warning),
    Case("joblib.dump with an unsavable callback: where the warning points", "silent",
         joblib_dump_warning),
    Case("a quiet section overlapping another thread's", "silent",
         filters_left_by_two_threads),
]
