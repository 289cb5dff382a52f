"""Audit cases of the tenth audit (the classic learners at mixed scales, checkpoints in
searches): see tests/_robustness_cases.py.

Silent: a deep warm start from a checkpoint trained on other values of ``X`` (the folds
of a cross-validation, of one size and label order, each took the first fold's model),
LFDA's ridge swamping a feature of scale 1e-6 beside one of 1e6, LMNN stopping on the
plateau of a tiny feature, a ``param_groups`` pattern that matches nothing. Obscure: ``init="pca"`` with more
components than samples, LAPACK's non-converging ``syevd`` in MMC.
"""

from __future__ import annotations

import os
import tempfile

import numpy as np
from _robustness_cases import Case, check, deep, quiet


def _three_units(scales):
    rng = np.random.RandomState(0)
    y = np.repeat([0, 1, 2], 20)
    return np.c_[y + 0.3 * rng.randn(60), rng.randn(60), rng.randn(60)] * scales, y


# ------------------------------------------------------------------ silent
def warm_start_on_other_inputs():
    rng = np.random.RandomState(0)
    y = np.repeat(np.arange(3), 20)
    X1 = (rng.randn(60, 6) + y[:, None]).astype(np.float32)
    X2 = (100 * rng.randn(60, 6)).astype(np.float32)  # other data: same size and labels
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "run.ckpt")
        first = deep(max_iter=2, random_state=0, checkpoint_path=path).fit(X1, y)
        second = deep(max_iter=2, random_state=0, checkpoint_path=path,
                      warm_start=True).fit(X2, y)
        check(not np.array_equal(first.transform(X2), second.transform(X2)),
              "a warm start on other inputs returned the checkpoint's model for them")


def lfda_ridge_at_mixed_scales():
    from scipy.linalg import eigh

    from skdml.linear import LFDA
    X, y = _three_units([1e-6, 1e6, 1.0])
    # the dense definition (Sugiyama, Eqs. 11-14): no ridge
    n, D = len(X), ((X[:, None] - X[None]) ** 2).sum(-1)
    Ww, Wb = np.zeros((n, n)), np.full((n, n), 1.0 / n)
    for c in np.unique(y):
        m = np.flatnonzero(y == c)
        s = np.sqrt(np.sort(D[np.ix_(m, m)], 1)[:, 3])
        A = np.exp(-D[np.ix_(m, m)] / np.outer(s, s))
        Ww[np.ix_(m, m)], Wb[np.ix_(m, m)] = A / len(m), A * (1.0 / n - 1.0 / len(m))
    lap = lambda W: X.T @ (np.diag(W.sum(1)) - W) @ X  # noqa: E731
    exact = eigh(lap(Wb), lap(Ww), eigvals_only=True)[::-1]
    got = LFDA(k=3).fit(X, y).eigenvalues_
    check(np.allclose(got, exact, rtol=1e-3), f"LFDA's ratios {got} where they are {exact}")


def lmnn_plateau_of_a_tiny_feature():
    from skdml.linear import LMNN
    X, y = _three_units([1e-3, 1e3, 1.0])
    default, longer = LMNN().fit(X, y), LMNN(tol=0, max_iter=300).fit(X, y)
    check(default.objective_ <= 1.05 * longer.objective_,
          f"LMNN stopped at a loss of {default.objective_:.0f}, where "
          f"{longer.objective_:.0f} is reachable")


def param_groups_matching_nothing():
    X, y = _three_units([1.0, 1.0, 1.0])
    est = deep(max_iter=1, random_state=0, n_components=4,
               optimizer_params={"param_groups": [("module.*", {"lr": 0.0})],
                                 "lr_schedule": "constant"})
    est.fit(X.astype(np.float32), y)
    frozen = [g for g in est._resume_state["optimizer"]["param_groups"] if g["lr"] == 0.0]
    check(bool(frozen), "a param_groups pattern that matches no parameter froze nothing")


# ------------------------------------------------------------------ obscure
def pca_init_above_the_sample_count():
    from skdml.linear import MLKR
    rng = np.random.RandomState(0)
    MLKR(init="pca", n_components=15).fit(rng.randn(12, 30), np.repeat([0.0, 1.0, 2.0], 4))


def mmc_lapack_syevd():
    from sklearn.datasets import load_digits
    from sklearn.preprocessing import StandardScaler

    from skdml.linear import MMC_Supervised
    X, y = load_digits(return_X_y=True)
    rows = np.random.RandomState(0).permutation(len(y))[:400]
    MMC_Supervised(random_state=0).fit(StandardScaler().fit_transform(X[rows]), y[rows])


CASES = [
    Case("a deep warm start on other inputs of one size and labels", "silent",
         quiet(warm_start_on_other_inputs)),
    Case("LFDA's ridge with features at 1e-6 and 1e6", "silent",
         quiet(lfda_ridge_at_mixed_scales)),
    Case("LMNN with features at 1e-3 and 1e3", "silent", quiet(lmnn_plateau_of_a_tiny_feature)),
    Case("init='pca' with more components than samples", "obscure",
         pca_init_above_the_sample_count),
    Case("a param_groups pattern that matches no parameter", "silent",
         quiet(param_groups_matching_nothing)),
    Case("MMC_Supervised on standardised digits (LAPACK syevd)", "obscure",
         quiet(mmc_lapack_syevd)),
]
