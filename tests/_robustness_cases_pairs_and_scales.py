"""The fourth audit's cases: pair thresholds and constraints, the classic solvers at extreme
scales, scorer labels and where warnings point.

See tests/_robustness_cases.py for Case, check and classify. Every case runs against the
old code too (``benchmarks/studies/audit_robustness.py --checkout``); a case whose old
answer was a warning at skdml's own line, or a refusal of a valid input, raises ``Wrong``.
"""

from __future__ import annotations

import warnings

import numpy as np

from _robustness_cases import Case, Wrong, check, linear, quiet


def _iris():
    from sklearn.datasets import load_iris
    return load_iris(return_X_y=True)


def pair_prediction_by_batch():
    rng = np.random.RandomState(0)
    pairs, y = rng.randn(60, 2, 20), rng.choice([-1, 1], 60)
    est = linear("ITML").fit(pairs, y)
    alone = np.array([est.predict(pairs[i:i + 1])[0] for i in range(len(pairs))])
    flipped = np.flatnonzero(alone != est.predict(pairs))
    check(flipped.size == 0, f"pairs {flipped.tolist()} predicted differently alone")


def max_tnr_without_positives():
    rng = np.random.RandomState(0)
    pairs, y = rng.randn(40, 2, 3), np.r_[np.ones(20, int), -np.ones(20, int)]
    est = linear("ITML").fit(pairs, y)
    try:
        est.calibrate_threshold(pairs, -np.ones(40, int), strategy="max_tnr", min_rate=0.5)
    except ValueError as exc:  # max_tpr without negatives works: the mirror must too
        raise Wrong(f"refused: {exc}") from exc
    check(np.all(est.predict(pairs) == -1), "not every pair rejected")


def pair_labels_object():
    rng = np.random.RandomState(0)
    pairs, y = rng.randn(20, 2, 3), np.array([1, -1] * 10, dtype=object)
    try:
        linear("ITML").fit(pairs, y)
    except ValueError as exc:
        raise Wrong(f"valid labels refused: {exc}") from exc


def dataframe_preprocessor():
    import pandas as pd
    rng = np.random.RandomState(0)
    frame = pd.DataFrame(rng.randn(10, 3), columns=list("abc"))
    est = linear("ITML", preprocessor=frame).fit(np.array([[0, 1], [2, 3], [4, 5], [6, 7]]),
                                                 [1, -1, 1, -1])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est.transform(frame)
    check(not caught, f"transform(frame) warned: {caught[0].message if caught else ''}")


def constraints_saturated():
    from skdml.constraints import Constraints
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pairs, labels = Constraints(np.repeat([0, 1], 10)).labeled_pairs(180, random_state=0)
    check(np.sum(labels == 1) == 180, f"{np.sum(labels == 1)} of the 180 similar pairs drawn")


def constraints_warning_location():
    from skdml.constraints import Constraints
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        Constraints(np.array([0, 0, 1, 1, 1])).labeled_pairs(50, random_state=0)
    where = {w.filename for w in caught}
    check(where == {__file__}, f"warnings shown at {sorted(where)}")


def classic_scale(name, scale, **params):
    def run():
        X, y = _iris()
        est = linear(name, **params).fit(X * scale, y)
        check(np.all(np.isfinite(est.components_)), f"{name}: non-finite components")
    return run


def mmc_large_scale_metric():
    X, y = _iris()

    def unit(s):
        M = linear("MMC_Supervised").fit(X * s, y).get_mahalanobis_matrix()
        return M / np.linalg.norm(M)

    gap = np.linalg.norm(unit(1e6) - unit(1.0))
    check(gap < 1e-3, f"x 1e6 gives another metric (Frobenius gap {gap:.3g})")


def itml_infeasible_hard():
    X, y = _iris()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est = linear("ITML_Supervised", gamma=np.inf).fit(X, y)
    if not any("not met" in str(w.message) for w in caught):
        raise Wrong(f"converged in {est.n_iter_} sweeps with the hard constraints broken")


def lfda_deficient_rank():
    from sklearn.datasets import load_digits

    from skdml.linear import LFDA
    X, y = load_digits(return_X_y=True)
    try:
        est = LFDA(n_components=5).fit(X[:40], y[:40])
    except ValueError as exc:  # the default ridge promised to hold this case
        raise Wrong(f"refused: {exc}") from exc
    check(np.all(np.isfinite(est.components_)), "non-finite components")


def mlkr_string_targets():
    X, y = _iris()
    linear("MLKR", max_iter=5).fit(X, np.array(["a", "b", "c"])[y])


def scores_mixed_types(score):
    def run():
        from skdml import metrics
        X = np.random.RandomState(0).randn(12, 2)
        getattr(metrics, score)(X, np.array(["a", 1, "b"] * 4, dtype=object))
    return run


def suml_small_batches():
    X = np.random.RandomState(0).randn(4, 5)
    est = linear("SUML", n_components=2, batch_size=3, n_triplets=30, max_iter=3).fit(X)
    check(est.n_iter_ > 0, "no batch trained: the PCA start returned")


def index_one_item():
    from skdml.retrieval import RetrievalIndex
    try:
        RetrievalIndex().fit(np.zeros((1, 2))).query(k=1)
    except ValueError as exc:
        check("k <= 0" not in str(exc), f"suggests an impossible k: {exc}")
        raise


def pair_distance_overflowing_difference():
    from skdml.linear._base import MahalanobisDistance
    d = MahalanobisDistance(np.array([[0.25]]))([1e308], [-1e308])
    check(np.isfinite(d) and abs(d / 5e307 - 1) < 1e-12, f"distance {d}, expected 5e307")


def lmnn_auto_more_components_than_samples():
    X = np.random.RandomState(0).randn(6, 10)
    try:
        linear("LMNN", n_components=8, max_iter=3).fit(X, np.array([0, 0, 0, 1, 1, 1]))
    except ValueError as exc:  # the default init, refused by scikit-learn's PCA
        raise Wrong(f"the default init failed: {exc}") from exc


CASES = [Case(name, group, fn if keep_warnings else quiet(fn), budget)
         for name, group, fn, budget, keep_warnings in [
    ("pair predicted alone and in a batch", "silent", pair_prediction_by_batch, 30, False),
    ("calibrate max_tnr without positive pairs", "obscure", max_tnr_without_positives, 30,
     False),
    ("pair labels in an object array", "obscure", pair_labels_object, 30, False),
    ("DataFrame preprocessor, transform(frame)", "silent", dataframe_preprocessor, 30, True),
    ("Constraints, every pair asked for", "silent", constraints_saturated, 30, False),
    ("Constraints warning location", "silent", constraints_warning_location, 30, True),
    ("MMC_Supervised at scale 1e-100", "obscure", classic_scale("MMC_Supervised", 1e-100), 30,
     False),
    ("MMC_Supervised at scale 1e100", "obscure", classic_scale("MMC_Supervised", 1e100), 60,
     False),
    ("MMC_Supervised at scale 1e6: the same metric", "silent", mmc_large_scale_metric, 60,
     False),
    ("LSML_Supervised at scale 1e80", "obscure", classic_scale("LSML_Supervised", 1e80), 30,
     False),
    ("LSML_Supervised at scale 1e-100", "obscure", classic_scale("LSML_Supervised", 1e-100),
     30, False),
    ("ITML_Supervised(gamma=inf), infeasible", "silent", itml_infeasible_hard, 30, True),
    ("LFDA, fewer samples than features", "obscure", lfda_deficient_rank, 30, False),
    ("MLKR, string targets", "obscure", mlkr_string_targets, 30, False),
    ("recall_at_k, labels mixing ints and strings", "obscure", scores_mixed_types("recall_at_k"),
     30, False),
    ("nmi_score, labels mixing ints and strings", "obscure", scores_mixed_types("nmi_score"), 30,
     False),
    ("SUML(batch_size=3) on 4 samples", "silent", suml_small_batches, 30, False),
    ("RetrievalIndex of one item, self-query", "obscure", index_one_item, 30, False),
    ("pair distance where u - v overflows", "silent", pair_distance_overflowing_difference, 30,
     False),
    ("LMNN init='auto', n_components > n_samples", "obscure",
     lmnn_auto_more_components_than_samples, 30, False),
]]
