"""The fifth audit's cases: labels numpy would join as floats, starts that read the hold-out,
spreads small beside a large value, offsets and gradients of the classic and batch solvers,
the deep learner's subsamples and offsets, and scikit-learn's conventions for tuple learners.

See tests/_robustness_cases.py for Case, check and classify. Every case runs against the
old code too (``benchmarks/studies/audit_robustness.py --checkout``); a case whose old
answer was a refusal of a valid input raises ``Wrong``.
"""

from __future__ import annotations

import numpy as np

from _robustness_cases import Case, Wrong, check, linear, quiet


def labels_signed_and_unsigned():
    from skdml.metrics import knn_accuracy
    base = 2**62
    X = np.array([[0.0], [1.0], [10.0], [11.0]])
    y = np.array([base, base, base + 1, base + 1], dtype=np.int64)
    Xq, yq = np.array([[0.1], [10.1]]), np.array([base + 1, base], dtype=np.int64)
    acc = knn_accuracy(Xq, yq, X, y.astype(np.uint64), k=1)[0]
    check(acc == 0.0, f"1-NN accuracy {acc} with uint64 references (int64: 0.0)")


def lda_start_reads_the_hold_out():
    scores = []
    for seed in range(3):
        rng = np.random.RandomState(seed)
        X, y = rng.randn(120, 60), np.repeat(np.arange(4), 30)
        est = linear("ECAML", init="lda", n_components=3, max_iter=1, tol=10.0,
                     early_stopping=True, random_state=seed).fit(X, y)
        scores.append(est.best_validation_score_)
    check(np.mean(scores) < 0.4,
          f"held-out score of the start on noise {np.mean(scores):.2f} (chance 0.25)")


def jrd_proxies_read_the_hold_out():
    from skdml.linear import _jrd
    seen = []
    original = _jrd._JRDObjective.init_extras
    _jrd._JRDObjective.init_extras = \
        lambda self, X, y: (seen.append(len(y)), original(self, X, y))[1]
    try:
        rng = np.random.RandomState(0)
        X, y = rng.randn(120, 10), np.repeat(np.arange(4), 30)
        linear("JRD", max_iter=2, early_stopping=True).fit(X, y)
    finally:
        _jrd._JRDObjective.init_extras = original
    check(seen[0] < 120, "the validation run's proxies read every sample, the held-out too")


def constant_column_beside_small_features():
    from sklearn.datasets import load_iris
    X, y = load_iris(return_X_y=True)
    try:
        linear("ECAML", max_iter=3).fit(np.hstack([X, np.full((150, 1), 1e13)]), y)
    except ValueError as exc:
        raise Wrong(f"valid input refused: {exc}") from exc


def tuple_fit_transform():
    from skdml.constraints import Constraints
    rng = np.random.RandomState(0)
    X, y = rng.randn(30, 2), np.repeat([0, 1, 2], 10)
    idx, labels = Constraints(y).labeled_pairs(20, random_state=0)
    try:
        Z = linear("ITML", max_iter=5, preprocessor=X).fit_transform(idx, labels)
    except TypeError as exc:
        check("transform takes samples" in str(exc), f"unclear: {exc}")
        raise
    check(False, f"embedded {Z.shape[0]} rows of indices as samples")


def lmnn_without_y():
    X = np.random.RandomState(0).randn(20, 3)
    try:
        linear("LMNN").fit(X, None)
    except ValueError as exc:
        check("requires y" in str(exc), f"unclear: {exc}")
        raise


def lmnn_offset():
    rng = np.random.RandomState(0)
    X, y = rng.randn(60, 4), np.repeat(np.arange(3), 20)
    plain = linear("LMNN", max_iter=30).fit(X, y)
    shifted = linear("LMNN", max_iter=30).fit(X + 1e8, y)
    check(abs(shifted.objective_ / plain.objective_ - 1) < 1e-6,
          f"loss {shifted.objective_:.6g} at an offset of 1e8, {plain.objective_:.6g} without")


def jrd_batch_solver_stops_early():
    from sklearn.datasets import make_classification
    X, y = make_classification(n_samples=48, n_features=5, n_informative=4, n_redundant=0,
                               n_classes=4, n_clusters_per_class=1, class_sep=2.0,
                               random_state=0)
    est = linear("JRD", n_components=3, solver="conjugate_gradient", max_iter=200,
                 neighbor_weight=0).fit(X, y)
    check(est.n_iter_ > 60, f"stopped after {est.n_iter_} of 200 iterations, as converged")


def deep_axes_of_sorted_data():
    import torch
    from skdml.deep._inputs import fit_standardize
    rng = np.random.RandomState(0)
    y = np.r_[np.zeros(1100, int), np.ones(947, int)]
    X = rng.randn(len(y), 300).astype(np.float32)
    X[:, 0] = np.where(y == 0, 0.0, 5.0)
    layer = fit_standardize(torch.from_numpy(X), np.arange(len(y)), (300,), n_axes=256)
    kept = float(np.linalg.norm(layer.components.numpy()[0]))
    check(kept > 0.9, f"the separating feature kept {kept:.2f} of its norm in the projection")


def deep_offset_features():
    from skdml import DeepMetricTransformer
    rng = np.random.RandomState(1)
    y = np.repeat(np.arange(4), 30)
    X = 1e6 + 0.4 * (rng.randn(120, 3) + 2.0 * y[:, None])
    try:
        DeepMetricTransformer(max_iter=1, random_state=0, device="cpu").fit(X, y)
    except (ValueError, RuntimeError) as exc:
        raise Wrong(f"valid input refused: {exc}") from exc


def deep_mixed_labels():
    from skdml import DeepMetricTransformer
    X = np.random.RandomState(0).randn(40, 5).astype(np.float32)
    y = np.array(["x", "y", 1, 2], dtype=object)[np.repeat(np.arange(4), 10)]
    try:
        DeepMetricTransformer(max_iter=1, device="cpu").fit(X, y)
    except ValueError as exc:
        check("mixes label types" in str(exc), f"unclear: {exc}")
        raise
    except TypeError as exc:
        raise Wrong(f"numpy's error: {exc}") from exc


CASES = [Case(name, group, quiet(fn), budget) for name, group, fn, budget in [
    ("knn_accuracy, int64 queries and uint64 references above 2**53", "silent",
     labels_signed_and_unsigned, 30),
    ("ECAML init='lda': held-out score of the start", "silent", lda_start_reads_the_hold_out,
     60),
    ("JRD validation run: proxies from the training rows", "silent",
     jrd_proxies_read_the_hold_out, 60),
    ("ECAML beside a constant column of 1e13", "obscure", constant_column_beside_small_features,
     30),
    ("ITML(preprocessor=X).fit_transform(pairs)", "silent", tuple_fit_transform, 30),
    ("LMNN().fit(X, None)", "obscure", lmnn_without_y, 30),
    ("LMNN at an offset of 1e8", "silent", lmnn_offset, 30),
    ("JRD(solver='conjugate_gradient'): the line search's gradient", "silent",
     jrd_batch_solver_stops_early, 60),
    ("deep principal axes of 2047 rows sorted by class", "silent", deep_axes_of_sorted_data,
     60),
    ("deep fit of features at 1e6 + N(0, 0.4)", "obscure", deep_offset_features, 60),
    ("deep fit, labels mixing strings and ints", "obscure", deep_mixed_labels, 30),
]]
