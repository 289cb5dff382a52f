"""The eighth audit's cases: labels as users hold them (lists mixing types, pandas NA, object
integers), learners at extreme geometry (offsets, small units, mixed feature scales, one
dominating row, one dimension), embeddings past float32, public parameters at their bounds,
and copies and seeded fits that must leave state alone.

See tests/_robustness_cases.py for Case, check and classify. A case whose old answer was
a refusal of a valid input raises ``Wrong``; one that stopped with an error naming another
cause raises ``Misleading`` (counted as obscure: raised from the tests, not from skdml).
"""

from __future__ import annotations

import copy
import os
import threading
import warnings

import numpy as np

from _robustness_cases import Case, Missing, Wrong, check, quiet

SHARED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared",
                      "datasets")


class Misleading(RuntimeError):
    """The call refused the input with a message naming another cause."""


def _wine():
    from sklearn.datasets import load_wine
    from sklearn.preprocessing import StandardScaler
    X, y = load_wine(return_X_y=True)
    return StandardScaler().fit_transform(X), y


def _iris():
    from sklearn.datasets import load_iris
    from sklearn.preprocessing import StandardScaler
    X, y = load_iris(return_X_y=True)
    return StandardScaler().fit_transform(X), y


def _warned(fn, pattern):
    """``fn()`` and whether a warning matching ``pattern`` (a substring) was given."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = fn()
    return out, any(pattern in str(w.message) for w in caught)


def _refused(fn, *patterns):
    """``fn()`` must raise a ValueError/TypeError naming one of ``patterns``."""
    try:
        fn()
    except (ValueError, TypeError) as exc:
        if not any(p in str(exc) for p in patterns):
            raise Misleading(str(exc)[:160]) from exc
        raise
    raise Wrong(f"accepted; expected an error naming {patterns}")


# ---------------------------------------------------------------- labels
MIXED = [0] * 10 + ["0"] * 10 + [1] * 10


def mixed_list_labels_in_a_scorer():
    from skdml.metrics import recall_at_k
    X = np.random.RandomState(0).randn(30, 4)
    _refused(lambda: recall_at_k(X, MIXED), "mixes label types")


def mixed_list_labels_in_a_learner():
    from skdml import LFDA
    X = np.random.RandomState(0).randn(30, 4)
    _refused(lambda: LFDA(k=3).fit(X, MIXED), "mixes label types")


def pandas_na_label_in_a_learner():
    import pandas as pd

    from skdml import ECAML
    X = np.random.RandomState(0).randn(30, 4)
    y = pd.Series([None] + [f"c{i % 3}" for i in range(1, 30)], dtype="string")
    _refused(lambda: ECAML(max_iter=1).fit(X, y), "missing label")


def object_integer_labels_in_a_scorer():
    import pandas as pd

    from skdml.metrics import recall_at_k
    X = np.random.RandomState(0).randn(30, 4)
    ints = np.arange(30) % 3
    try:
        got = recall_at_k(X, pd.Series(ints, dtype=object))
    except ValueError as exc:
        raise Wrong(f"integer labels in an object column refused: {exc}") from exc
    check(got == recall_at_k(X, ints), f"recall {got} for {recall_at_k(X, ints)}")


def mlkr_integer_targets_past_float64():
    from skdml import MLKR
    rng = np.random.RandomState(0)
    X = rng.randn(40, 4)
    ticks = np.round((X[:, 0] * 3 + rng.randn(40) * 0.1) * 1000).astype(np.int64)
    ticks -= ticks.min()
    ref = MLKR(n_components=2, max_iter=50, random_state=0).fit(X, ticks.astype(float))
    got = MLKR(n_components=2, max_iter=50, random_state=0).fit(X, ticks + 10**18)
    check(np.allclose(got.components_, ref.components_, atol=1e-8),
          "10**18 + k targets fitted another metric than k")


def dataset_item_past_float32():
    import torch
    from torch.utils.data import TensorDataset

    from skdml import DeepMetricTransformer
    X = np.random.RandomState(0).randn(40, 4)
    X[0, 0] = 1e39
    data = TensorDataset(torch.from_numpy(X), torch.from_numpy(np.repeat(np.arange(4), 10)))
    _refused(lambda: DeepMetricTransformer(max_iter=1, device="cpu").fit(data),
             "too large for float32")


# ---------------------------------------------------------------- geometry
def lfda_with_an_offset():
    from skdml import LFDA
    X, y = _wine()
    ref = LFDA(n_components=2).fit(X, y).eigenvalues_
    got = LFDA(n_components=2).fit(X + 1e8, y).eigenvalues_
    check(np.allclose(got, ref, rtol=1e-5), f"eigenvalues {got} at an offset of 1e8 for {ref}")


def deep_row_past_float32_norm():
    from skdml import DeepMetricTransformer
    X, y = _wine()
    est = DeepMetricTransformer(n_components=8, max_iter=1, random_state=0,
                                device="cpu").fit(X, y)
    norm = np.linalg.norm(est.transform(np.full((1, X.shape[1]), 1e20)), axis=1)[0]
    check(abs(norm - 1) < 1e-5, f"embedding norm {norm} for a row of 1e20")


def float32_transform_overflow():
    from sklearn.datasets import load_iris

    from skdml import LFDA
    X, y = load_iris(return_X_y=True)
    est = LFDA().fit(X * 1e-10, y)
    try:
        Z = est.transform(np.full((1, 4), 1e30, np.float32))
    except ValueError as exc:
        if "overflows" not in str(exc):
            raise Misleading(str(exc)) from exc
        raise
    check(np.isfinite(Z).all(), "NaN embedding of a finite float32 row")


def mmc_in_small_units():
    from skdml import MMC_Supervised
    X, y = _iris()

    def diag(scale):
        M = MMC_Supervised(random_state=0).fit(X * scale, y).get_mahalanobis_matrix()
        return np.diag(M) / np.trace(M)

    check(np.allclose(diag(1e-10), diag(1.0), atol=1e-3), "another metric at 1e-10")


def ecaml_one_dimension_on_unit_embeddings():
    from skdml import ECAML
    X, y = _wine()
    _, warned = _warned(lambda: ECAML(n_components=1, loss="binomial", early_stopping=False,
                                      max_iter=20, random_state=0).fit(X, y), "n_components=1")
    check(warned, "the fit returned its start bit for bit, quietly")


def lsml_in_small_units():
    from skdml import LSML_Supervised
    X, y = _iris()
    _, warned = _warned(lambda: LSML_Supervised(random_state=0).fit(X * 1e-4, y),
                        "barely moved")
    check(warned, "the identity prior came back quietly")


def rca_features_far_apart():
    from skdml import RCA_Supervised
    X, y = _iris()
    s = np.logspace(4, -4, 4)
    ref = RCA_Supervised(random_state=0).fit(X, y).components_
    try:
        got = RCA_Supervised(random_state=0).fit(X * s, y).components_
    except ValueError as exc:  # RCA is invariant to one scale per feature
        raise Wrong(f"a valid input refused: {exc}") from exc
    check(np.allclose(got * s, ref, rtol=1e-5, atol=1e-8), "another whitening")


def covariance_prior_features_far_apart():
    from sklearn.datasets import load_iris

    from skdml.linear._classic import prior_metric
    X = load_iris().data
    s = np.logspace(4, -4, 4)
    try:
        P = prior_metric("covariance", X * s)
    except ValueError as exc:  # the covariance is invertible: its correlations are
        raise Wrong(f"a valid input refused: {exc}") from exc
    check(np.allclose(P * np.outer(s, s), np.linalg.inv(np.cov(X, rowvar=False)), rtol=1e-6),
          "not the inverse covariance")


def one_dominating_row():
    from skdml import LMNN
    X, y = _wine()
    X[7] = 1e4
    _, warned = _warned(lambda: LMNN(max_iter=5).fit(X, y), "farther from the median")
    check(warned, "one row set the scale and the metric, quietly")


# ---------------------------------------------------------------- parameters and state
def float32_test_size():
    from skdml.model_selection import ClassDisjointSplit
    y = np.repeat(np.arange(10), 3)
    _, test = next(ClassDisjointSplit(n_splits=1, test_size=np.float32(0.3),
                                      random_state=0).split(np.zeros((30, 1)), y))
    n = len(np.unique(y[test]))
    check(n == 3, f"{n} test classes of 10 for test_size=float32(0.3)")


def boolean_batch_size():
    from skdml.metrics import recall_at_k
    X = np.random.RandomState(0).randn(20, 3)
    _refused(lambda: recall_at_k(X, np.repeat([0, 1], 10), batch_size=True), "batch_size")


def lmnn_huge_n_neighbors():
    from skdml import LMNN
    X = np.random.RandomState(0).randn(40, 4)
    est = LMNN(n_neighbors=10**12, max_iter=2).fit(X, np.repeat(np.arange(4), 10))
    check(est.target_neighbors_.shape == (40, 9), f"table {est.target_neighbors_.shape}")


def scml_huge_max_iter():
    from skdml import SCML_Supervised
    X = np.random.RandomState(0).randn(40, 4)
    _refused(lambda: SCML_Supervised(max_iter=10**12, random_state=0).fit(
        X, np.repeat(np.arange(4), 10)), "max_iter x batch_size")


def cached_load_with_a_bad_timeout():
    from skdml.datasets import load_usps
    if not os.path.isfile(os.path.join(SHARED, "usps_16x16.mat")):
        raise Missing("usps_16x16.mat")
    _refused(lambda: load_usps(SHARED, download_if_missing=False, timeout=-1), "timeout")


def deepcopy_keeps_callbacks():
    from sklearn.datasets import load_iris

    from skdml import ECAML
    from skdml.callbacks import Callback
    X, y = load_iris(return_X_y=True)
    est = ECAML(n_components=2, max_iter=2, random_state=0, callbacks=[Callback()]).fit(X, y)
    check(copy.deepcopy(est).callbacks is not None, "the copy lost its callbacks")


def sdml_seeded_fit_and_numpys_stream():
    from sklearn.datasets import load_iris

    from skdml import SDML_Supervised
    current = threading.current_thread()
    others = [t.name for t in threading.enumerate() if t is not current and not t.daemon]
    if others:  # documented: the stream is put back only where no other thread could draw
        raise Missing(f"other threads run ({others}): e.g. loky's manager after n_jobs=2")
    X, y = load_iris(return_X_y=True)
    np.random.seed(0)
    expected = np.random.rand()
    np.random.seed(0)
    SDML_Supervised(balance_param=1e-4, prior="covariance", random_state=0).fit(X, y)
    check(np.random.rand() == expected, "the global numpy stream moved")


CASES = [Case(name, group, fn if keep_warnings else quiet(fn), budget)
         for name, group, fn, budget, keep_warnings in [
    ("a list of labels mixing 0 and '0' in recall_at_k", "silent",
     mixed_list_labels_in_a_scorer, 30, False),
    ("a list of labels mixing 0 and '0' in LFDA", "silent", mixed_list_labels_in_a_learner, 30,
     False),
    ("a pandas NA label in ECAML", "obscure", pandas_na_label_in_a_learner, 30, False),
    ("integer labels in an object column, recall_at_k", "obscure",
     object_integer_labels_in_a_scorer, 30, False),
    ("MLKR targets 10**18 + k", "silent", mlkr_integer_targets_past_float64, 30, False),
    ("a Dataset item of 1e39", "obscure", dataset_item_past_float32, 60, False),
    ("LFDA at an offset of 1e8", "silent", lfda_with_an_offset, 30, False),
    ("a deep embedding of a row of 1e20", "silent", deep_row_past_float32_norm, 60, False),
    ("a float32 transform past 3.4e38", "silent", float32_transform_overflow, 30, False),
    ("MMC_Supervised at 1e-10", "silent", mmc_in_small_units, 60, False),
    ("ECAML n_components=1 on unit embeddings", "silent",
     ecaml_one_dimension_on_unit_embeddings, 60, True),
    ("LSML_Supervised at 1e-4", "silent", lsml_in_small_units, 30, True),
    ("RCA on features 1e4 .. 1e-4 apart", "obscure", rca_features_far_apart, 30, False),
    ("a covariance prior of features 1e4 .. 1e-4 apart", "obscure",
     covariance_prior_features_far_apart, 30, False),
    ("LMNN with one row at 1e4", "silent", one_dominating_row, 60, True),
    ("ClassDisjointSplit test_size=float32(0.3)", "silent", float32_test_size, 30, False),
    ("recall_at_k(batch_size=True)", "obscure", boolean_batch_size, 30, False),
    ("LMNN(n_neighbors=10**12)", "obscure", lmnn_huge_n_neighbors, 30, False),
    ("SCML_Supervised(max_iter=10**12)", "obscure", scml_huge_max_iter, 30, False),
    ("a cached load with timeout=-1", "silent", cached_load_with_a_bad_timeout, 30, False),
    ("copy.deepcopy of a fitted ECAML with callbacks", "silent", deepcopy_keeps_callbacks, 30,
     False),
    ("a seeded SDML fit and numpy's global stream", "silent",
     sdml_seeded_fit_and_numpys_stream, 30, False),
]]
