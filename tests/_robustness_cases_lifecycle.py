"""Audit cases of the ninth audit (warm starts and locks, cosine keys, pair thresholds):
see tests/_robustness_cases.py.

Lost work: a user's file at ``<checkpoint>.lock``. Silent: a warm start that switches
early stopping (the saved best of another quantity), a run a callback stopped resumed from
its best epoch instead of its last, a warm start's optimiser settings ignored, a cosine
order moved by a zero row elsewhere and by the gallery's memory layout. Obscure: a
checkpoint that another skdml writer saved, index pairs in a nullable integer frame. And
the weakly-supervised API: a decision function of the wrong sign for scikit-learn, LSML
weights whose sum overflows, a threshold on a calibration distance.
"""

from __future__ import annotations

import os
import tempfile

import numpy as np
from _robustness_cases import Case, check, deep, quiet


def _blobs():
    rng = np.random.RandomState(0)
    y = np.repeat(np.arange(6), 12)
    return rng.randn(6, 10)[y] * 3 + rng.randn(len(y), 10), y


def _small(**params):
    params = {"n_components": 4, "max_iter": 2, "learning_rate": 1e-3,
              "optimizer_params": {"lr_schedule": "constant"}, **params}
    return deep(**params)


# ------------------------------------------------------------------ lost work
def lock_file_of_the_user():
    X, y = _blobs()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "poetry")
        with open(path + ".lock", "w") as fh:
            fh.write("[[package]]\nname = 'numpy'\n")
        try:
            _small(max_iter=1, checkpoint_path=path).fit(X, y)
        finally:
            kept = open(path + ".lock").read() if os.path.exists(path + ".lock") else None
            check(kept == "[[package]]\nname = 'numpy'\n",
                  f"the user's file at the lock path became {kept!r}")
        check(False, "a fit took a user's file at <path>.lock for its lock")


# ------------------------------------------------------------------ silent
def warm_start_switching_early_stopping():
    from sklearn.datasets import load_digits
    X, y = load_digits(return_X_y=True)
    X, y = X[:200], y[:200]
    est = _small(n_components=8, max_iter=4, validation_fraction=0.3, early_stopping=False,
                 n_classes_per_batch=5, n_samples_per_class=4).fit(X, y)
    est.set_params(warm_start=True, early_stopping=True, max_iter=5).fit(X, y)
    scores = [r["validation_score"] for r in est.history_]
    best = int(np.argmax(scores)) + 1
    check(est.best_iteration_ == best or scores[est.best_iteration_ - 1] == max(scores),
          f"best_iteration_ {est.best_iteration_} while the history's best epoch is {best}")


def callback_stopped_run_resumed_from_memory():
    from skdml.callbacks import Callback

    class StopAt(Callback):
        def on_epoch_end(self, estimator, info):
            if info.epoch == 3:
                info.stop("time budget")

    X, _ = _blobs()
    y = np.random.RandomState(3).randint(0, 6, len(X))
    kw = dict(validation_fraction=0.34, learning_rate=3e-2, early_stopping=True,
              n_iter_no_change=20, max_iter=5, n_classes_per_batch=3)
    ref = _small(**kw).fit(X, y)
    est = _small(callbacks=[StopAt()], **kw).fit(X, y)
    est.set_params(callbacks=None, warm_start=True).fit(X, y)
    got = [r["validation_score"] for r in est.history_]
    want = [r["validation_score"] for r in ref.history_]
    check(got == want, f"resumed scores {got} differ from the uninterrupted {want}")


def warm_start_optimiser_settings():
    X, y = _blobs()
    est = _small(max_iter=1).fit(X, y)
    est.set_params(warm_start=True, max_iter=2, optimizer__betas=(0.5, 0.6),
                   optimizer__eps=1e-3).fit(X, y)
    used = [(g["betas"], g["eps"]) for g in est._resume_state["optimizer"]["param_groups"]]
    check(all(u == ((0.5, 0.6), 1e-3) for u in used), f"the warm start trained with {used}")


def cosine_zero_row_elsewhere():
    from skdml.metrics import nearest_neighbors
    q = np.array([[0.0, 2.0, 2.0, -1.0, 0.0, 1.0, -1.0]])
    G = np.array([[0.0, 1.0, 0.0, 0.0, 1.0, 1.0, 0.0], [1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0],
                  [0.0] * 7])
    got = nearest_neighbors(q, 2, X_ref=G, metric="cosine").tolist()
    check(got == [[1, 0]], f"a zero row elsewhere reordered the others: {got}")


def cosine_fortran_gallery():
    from skdml.retrieval import RetrievalIndex
    rng = np.random.default_rng(1)
    X = np.full((10, 8), 0.1)
    X[np.arange(10), rng.integers(0, 8, 10)] += rng.choice([1 / 3, 2 / 3], 10)
    distances, _ = RetrievalIndex(metric="cosine").fit(
        np.asfortranarray(X, dtype=np.float32)).query(None, k=9)
    check(np.all(np.diff(distances, axis=1) >= 0), "distances decrease along a row")
    check(distances[3, 0] == 0.0, f"an exact duplicate at distance {distances[3, 0]}")


def _first_feature():
    from skdml.linear import BasePairsLearner

    class FirstFeature(BasePairsLearner):
        def __init__(self, preprocessor=None):
            self.preprocessor = preprocessor

        def _fit_tuples(self, pairs, y):
            self.components_ = np.eye(pairs.shape[2])[:1]

    return FirstFeature


def pair_decision_function_sign():
    from sklearn.model_selection import FixedThresholdClassifier
    X = np.array([[0.0], [0.1], [5.0], [5.2], [9.0]])
    pairs, y = np.array([[0, 1], [2, 3], [0, 2], [1, 4]]), np.array([1, 1, -1, -1])
    est = _first_feature()(preprocessor=X).fit(pairs, y)
    wrapped = FixedThresholdClassifier(est, response_method="decision_function").fit(pairs, y)
    check(np.array_equal(wrapped.predict(pairs), est.predict(pairs)),
          f"FixedThresholdClassifier predicts {wrapped.predict(pairs)}, the learner "
          f"{est.predict(pairs)}")


def lsml_weights_whose_sum_overflows():
    from skdml.linear import LSML
    rng = np.random.RandomState(0)
    X = rng.randn(30, 3)
    q = np.array([rng.choice(30, 4, replace=False) for _ in range(40)])
    ones = LSML(preprocessor=X).fit(q, weights=np.ones(40)).get_mahalanobis_matrix()
    huge = LSML(preprocessor=X).fit(q, weights=np.full(40, 1e308)).get_mahalanobis_matrix()
    check(np.allclose(huge, ones, rtol=1e-5, atol=1e-8),
          "weights of 1e308 (a sum of inf) gave another metric than weights of 1")


def accept_all_threshold_at_large_distances():
    X = np.array([[0.0], [1e17], [3e17], [0.0]])
    est = _first_feature()(preprocessor=X).fit(np.array([[0, 1], [0, 2], [3, 0]]), [1, 1, 1])
    check(est.threshold_ > 3e17, f"threshold_ {est.threshold_!r} on the largest distance")


def nullable_integer_index_pairs():
    import pandas as pd
    X = np.array([[0.0, 5.0], [0.1, -5.0], [3.0, 0.0]])
    try:
        _first_feature()(preprocessor=X).fit(pd.DataFrame([[0, 1], [0, 2]], dtype="Int64"),
                                             np.array([1, -1]))
    except ValueError as exc:  # valid indices refused
        check(False, f"integer indices without a missing value refused: {exc}")


# ------------------------------------------------------------------ obscure
def checkpoint_of_another_writer():
    from skdml._training import CheckpointError, save_checkpoint
    X, y = _blobs()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "other.ckpt")
        save_checkpoint(path, {"epoch": 3, "weights": [1.0, 2.0]})
        try:
            _small(checkpoint_path=path, warm_start=True).fit(X, y)
        except CheckpointError:
            raise
        except ValueError as exc:  # not the checkpoint error every other foreign file gets
            raise KeyError(str(exc)) from None


CASES = [
    Case("a user's file at <checkpoint>.lock", "lost work", lock_file_of_the_user),
    Case("warm start switching early_stopping on", "silent",
         quiet(warm_start_switching_early_stopping)),
    Case("a callback-stopped run resumed from memory", "silent",
         quiet(callback_stopped_run_resumed_from_memory)),
    Case("warm start with other betas and eps", "silent", quiet(warm_start_optimiser_settings)),
    Case("cosine order with a zero row elsewhere", "silent", cosine_zero_row_elsewhere),
    Case("cosine distances of a Fortran-ordered gallery", "silent", cosine_fortran_gallery),
    Case("warm start from another skdml writer's checkpoint", "obscure",
         checkpoint_of_another_writer),
    Case("a pair learner's decision_function in FixedThresholdClassifier", "silent",
         quiet(pair_decision_function_sign)),
    Case("LSML weights of 1e308 each", "silent", quiet(lsml_weights_whose_sum_overflows)),
    Case("the accept-all threshold past 2**53", "silent",
         quiet(accept_all_threshold_at_large_distances)),
    Case("index pairs in a nullable Int64 frame", "silent",
         quiet(nullable_integer_index_pairs)),
]
