"""Audit cases of the eleventh audit (what a fit tells the user): see tests/_robustness_cases.py.

Silent (a wrong report, with a right model): a ``ConvergenceWarning`` from an L-BFGS
learner that converged on its last allowed iteration, and from SCML's k-means on data
with fewer distinct samples than centres; ECAML's conjugate-gradient bar stopping at
13 %; warnings naming a file of scikit-learn's or of the standard library's ``pickle.py``
instead of the user's line (a column of labels, the feature names of ``transform``,
``joblib.dump``); a warning filter of scikit-learn's left in place for the whole process
by two threads' sections. Process state: the BLAS pools left at 1 thread by sections in
pooled threads, a search run below full float32 once an overlapping one left, a fit entering
under float64 while another thread's ran.
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
    X, y = np.repeat(rng.randn(9, 5), 5, axis=0), np.repeat([0, 1, 2], 15)  # 9 rows, 10 centres
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


# ------------------------------------------------------------------ process state
def blas_pools_after_pooled_sections():
    """Sections in pooled threads (threadpoolctl lets one Python thread own OpenBLAS's size)."""
    import subprocess
    import sys

    code = ("import warnings; warnings.simplefilter('ignore')\n"
            "import numpy as np, threadpoolctl\n"
            "from concurrent.futures import ThreadPoolExecutor\n"
            "from sklearn.datasets import load_iris\n"
            "from skdml.linear import ECAML\n"
            "from skdml.metrics import map_at_r\n"
            "blas = lambda: [d['num_threads'] for d in threadpoolctl.threadpool_info()\n"
            "                if d['user_api'] == 'blas']\n"
            "X, y = load_iris(return_X_y=True)\n"
            "Xb = np.random.RandomState(0).randn(3000, 64).astype('float32')\n"
            "jobs = [lambda: map_at_r(Xb, np.arange(3000) % 30),\n"
            "        lambda: ECAML(max_iter=3, random_state=0).fit(X, y)] * 4\n"
            "before = blas()\n"
            "for _ in range(3):\n"
            "    with ThreadPoolExecutor(4) as ex:\n"
            "        list(ex.map(lambda f: f(), jobs))\n"
            "print(before == blas(), before, blas())\n")
    env = {k: v for k, v in os.environ.items()
           if k not in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                        "SKDML_NUM_THREADS")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=120, cwd=os.path.dirname(HERE))
    check(out.stdout.startswith("True"), f"BLAS pool sizes before and after: {out.stdout[4:]}"
          f"{out.stderr[-200:]}")


def search_precision_beside_another():
    import torch

    from skdml.metrics._exact import ieee_float32
    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high")
    a_in, b_in, a_out, seen = threading.Event(), threading.Event(), threading.Event(), []

    def first():
        with ieee_float32():
            a_in.set()
            b_in.wait(30)
        a_out.set()

    def second():
        a_in.wait(30)
        with ieee_float32():
            b_in.set()
            a_out.wait(30)
            seen.append(torch.get_float32_matmul_precision())

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        torch.set_float32_matmul_precision(previous)
    check(seen == ["highest"], f"a search ran at matmul precision {seen} (full float32: "
          "'highest') once an overlapping one had left")


def fit_under_float64_beside_another():
    import torch

    from skdml._utils import torch_fit_modes
    X, y = _iris()
    inside, release = threading.Event(), threading.Event()

    def long_fit():
        with torch_fit_modes():
            inside.set()
            release.wait(60)

    other = threading.Thread(target=long_fit)
    other.start()
    inside.wait(30)
    try:
        torch.set_default_dtype(torch.float64)
        deep(n_components=2, max_iter=1).fit(X.astype(np.float32), y)
    finally:
        release.set()
        other.join()
        torch.set_default_dtype(torch.float32)


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
    Case("the BLAS pools after sections in pooled threads", "silent",
         blas_pools_after_pooled_sections, budget=120.0),
    Case("a neighbour search overlapping another thread's", "silent",
         search_precision_beside_another),
    Case("a deep fit under float64 while another thread's fit runs", "obscure",
         fit_under_float64_beside_another),
]
