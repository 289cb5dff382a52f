"""Warnings raised inside a fit point at the user's line (skdml._utils._warnings)."""

import warnings

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning
from sklearn.neighbors import KNeighborsClassifier
from sklearn.pipeline import make_pipeline

from skdml import ECAML, JRD, SUML, DeepMetricTransformer
from skdml._utils import warn_user


def _blobs():
    rng = np.random.RandomState(0)
    y = np.repeat(np.arange(4), 15)
    return rng.randn(len(y), 6) + 3 * rng.randn(4, 6)[y], y


def _caught(fn, category):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn()
    return [w for w in caught if issubclass(w.category, category)]


@pytest.mark.parametrize("make", [
    lambda: ECAML(n_components=2, max_iter=1, early_stopping=False, random_state=0),
    lambda: JRD(n_components=2, max_iter=1, early_stopping=False, random_state=0),
    lambda: SUML(n_components=2, max_iter=1, random_state=0),
], ids=["ECAML", "JRD", "SUML"])
def test_a_cut_short_fit_warns_at_the_users_line(make):
    X, y = _blobs()
    direct = _caught(lambda: make().fit(X, y), ConvergenceWarning)
    piped = _caught(lambda: make_pipeline(make(), KNeighborsClassifier(3)).fit(X, y),
                    ConvergenceWarning)
    assert direct and piped
    assert {w.filename for w in direct + piped} == {__file__}


def test_a_deep_fit_that_does_not_learn_warns_at_the_users_line():
    X, y = _blobs()
    est = DeepMetricTransformer(n_components=2, max_iter=2, learning_rate=1e-12,
                                device="cpu", random_state=0)
    caught = _caught(lambda: est.fit(X.astype(np.float32), y), UserWarning)
    assert caught and {w.filename for w in caught} == {__file__}


def test_warn_user_outside_skdml_is_plain_warn():
    caught = _caught(lambda: warn_user("look"), UserWarning)
    assert caught[0].filename == __file__ and str(caught[0].message) == "look"


def test_thread_override_above_the_cpus_warns_at_the_users_line(monkeypatch):
    from skdml._utils import _threads

    monkeypatch.setenv("SKDML_NUM_THREADS", "4096")
    monkeypatch.setattr(_threads, "_WARNED", set())  # warned once per value and process
    X, y = _blobs()
    est = ECAML(n_components=2, max_iter=1, early_stopping=False, random_state=0)
    caught = _caught(lambda: est.fit(X, y), RuntimeWarning)
    assert caught and {w.filename for w in caught} == {__file__}


def test_a_checkpoint_that_cannot_be_locked_warns_at_the_users_line(tmp_path, monkeypatch):
    import errno

    from skdml._training import _checkpoint_lock

    monkeypatch.setattr(_checkpoint_lock, "_try_lock",
                        lambda fd: OSError(errno.EOPNOTSUPP, "Operation not supported"))
    X, y = _blobs()
    est = DeepMetricTransformer(n_components=2, max_iter=1, device="cpu", random_state=0,
                                checkpoint_path=tmp_path / "model.ckpt")
    caught = [w for w in _caught(lambda: est.fit(X.astype(np.float32), y), UserWarning)
              if "Cannot lock" in str(w.message)]
    assert caught and {w.filename for w in caught} == {__file__}


def test_skdml_touches_the_warning_filters_only_through_quiet_warnings(monkeypatch):
    # warnings.catch_warnings swaps process-wide state (before Python 3.14): sections of
    # SCML and of the scorers' label check overlapping in two threads left their filters
    # behind ('ignore' UserWarning; 'ignore' every Warning), silencing the user's warnings
    import sys
    import warnings

    import numpy as np

    from skdml.linear import SCML_Supervised
    from skdml.metrics import recall_at_k

    callers = []
    real = warnings.catch_warnings

    def spy(*args, **kwargs):
        callers.append(sys._getframe(1).f_globals.get("__name__", ""))
        return real(*args, **kwargs)

    monkeypatch.setattr(warnings, "catch_warnings", spy)
    rng = np.random.RandomState(0)
    y = np.r_[np.repeat(np.arange(3), 6), [3, 3]]  # a class of 2: fewer neighbours
    X = rng.randn(len(y), 3) + y[:, None]
    SCML_Supervised(n_basis=12, max_iter=50, output_iter=25, random_state=0).fit(X, y)
    recall_at_k(X, y.astype(np.int8), 1, X_ref=X, y_ref=y.astype(np.float64))
    ours = [c for c in callers if c.startswith("skdml") and c != "skdml._utils._warnings"]
    assert ours == []


def test_a_warning_while_joblib_pickles_points_at_the_users_line(tmp_path):
    # audit 21: joblib runs the pure-Python pickler, whose frames (pickle.py) lay between
    # the user's joblib.dump line and skdml's __reduce__, and were named instead
    import joblib

    from skdml.callbacks import Callback

    class Holder(Callback):  # holds an open file: cannot be saved
        def __init__(self):
            self.log = open(tmp_path / "log.txt", "w")

    X, y = _blobs()
    holder = Holder()
    est = DeepMetricTransformer(n_components=2, max_iter=1, early_stopping=False,
                                random_state=0, callbacks=[holder]).fit(X.astype(np.float32), y)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        joblib.dump(est, tmp_path / "est.joblib")
    holder.log.close()
    assert caught and all(w.filename == __file__ for w in caught), \
        [(w.filename, str(w.message)[:40]) for w in caught]


def test_the_feature_names_warning_of_transform_points_at_the_users_line():
    # audit 21: scikit-learn's "X does not have valid feature names" named its validation.py
    import pandas as pd

    from skdml import LFDA

    X, y = _blobs()
    frame = pd.DataFrame(X, columns=[f"f{i}" for i in range(X.shape[1])])
    for fit_on, transform_on in ((frame, X), (X, frame)):
        est = LFDA(k=3).fit(fit_on, y)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            Z = est.transform(transform_on)
        assert len(caught) == 1 and "feature names" in str(caught[0].message)
        assert caught[0].filename == __file__
        np.testing.assert_array_equal(Z, est.transform(fit_on))


def _overlap_with_another_threads_section(daemon):
    """Our quiet section in, another thread's catch_warnings in (scikit-learn's check_array
    style), ours out, theirs out: the order in which a saved list came back."""
    import threading

    from skdml._utils import quiet_warnings

    go, inside, leave = threading.Event(), threading.Event(), threading.Event()

    def other_section():
        go.wait(30)
        with warnings.catch_warnings():
            warnings.simplefilter("error", np.exceptions.ComplexWarning)
            inside.set()
            leave.wait(30)

    other = threading.Thread(target=other_section, daemon=daemon)
    other.start()
    try:
        with quiet_warnings({"message": "noise", "category": UserWarning}):
            go.set()
            inside.wait(30)
    finally:
        go.set()
        leave.set()
        other.join()


@pytest.mark.parametrize("daemon", [False, True])
def test_a_quiet_section_never_leaves_filters_behind_beside_another_threads(daemon):
    # audit 21: catch_warnings saves and restores the whole list: overlapping scikit-learn's
    # own section in another thread, a quiet section left its filter (or theirs) in place
    # for the rest of the process (two SDML fits in two threads: about one run in ten)
    before = list(warnings.filters)
    _overlap_with_another_threads_section(daemon)
    after = list(warnings.filters)
    # a section's own item may come back in the list the other thread put back: it matches
    # only inside a section, so it quiets nothing now
    in_force = [f for f in after if type(f[1]).__name__ != "_InSection"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.filters[:] = after + list(warnings.filters)  # "always" last: the leftovers first
        warnings.warn("noise")
    warnings.filters[:] = before
    assert in_force == before
    assert [str(w.message) for w in caught] == ["noise"]


def test_another_threads_warning_is_not_quieted_by_a_section_of_this_one(monkeypatch):
    # re-review of audit 21: the filters are the process's: while one thread's
    # validate_fitted_data quieted scikit-learn's copy of the feature-names message, another
    # thread's own copy (skdml's, the same text) was swallowed
    import threading

    import pandas as pd
    import sklearn.utils.validation as validation

    from skdml import LFDA

    X, y = _blobs()
    est = LFDA(k=3).fit(pd.DataFrame(X, columns=[f"f{i}" for i in range(X.shape[1])]), y)
    inside, release = threading.Event(), threading.Event()
    real = validation.validate_data

    def parked(*args, **kwargs):  # thread U waits inside its quiet section
        if threading.current_thread().name == "U":
            inside.set()
            release.wait(30)
        return real(*args, **kwargs)

    monkeypatch.setattr(validation, "validate_data", parked)
    shown = []
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        monkeypatch.setattr(warnings, "showwarning", lambda message, *rest: shown.append(
            (threading.current_thread().name, str(message))))
        u = threading.Thread(target=lambda: est.transform(X), name="U")
        u.start()
        inside.wait(30)
        t = threading.Thread(target=lambda: est.transform(X), name="T")
        t.start()
        t.join()
        release.set()
        u.join()
    assert sorted(name for name, _ in shown) == ["T", "U"]


def test_a_users_filter_equal_to_a_sections_stays():
    # re-review of audit 21: removal by equality took the user's own equal filter away when
    # another thread's catch_warnings put the original list back during the section
    import threading

    from skdml._utils import quiet_warnings

    before = list(warnings.filters)
    entered, leave, left = threading.Event(), threading.Event(), threading.Event()

    def other_section():  # scikit-learn's check_array style, in another thread
        with warnings.catch_warnings():
            entered.set()
            leave.wait(30)
        left.set()

    try:
        warnings.filterwarnings("ignore", message="noise", category=UserWarning)
        other = threading.Thread(target=other_section)
        other.start()
        entered.wait(30)
        with quiet_warnings({"message": "noise", "category": UserWarning}):
            leave.set()
            left.wait(30)  # the other thread has put the original list back
        other.join()
        with warnings.catch_warnings(record=True) as caught:
            warnings.warn("noise")  # the user's filter still in force
        assert caught == []
    finally:
        warnings.filters[:] = before


def test_a_quiet_section_quiets_while_an_idle_thread_waits():
    # review of audit 21: a rule "swap only when alone" turned every quiet section off for
    # 300 s after any joblib.Parallel(n_jobs=2) (loky's manager thread is not a daemon)
    import threading

    from skdml._utils import quiet_warnings

    release = threading.Event()
    idle = threading.Thread(target=release.wait)
    idle.start()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with quiet_warnings({"message": "noise", "category": UserWarning}):
                warnings.warn("noise")
            warnings.warn("signal")
    finally:
        release.set()
        idle.join()
    assert [str(w.message) for w in caught] == ["signal"]


def test_scikit_learns_parallel_runs_beside_a_quiet_section():
    # thread-safety audit (22): scikit-learn's Parallel copies every filter, passing
    # message.pattern to warnings.filterwarnings, which wants a string; the section's
    # compiled pattern made every kneighbors and cross_val_score in the process fail
    import threading

    from sklearn.neighbors import NearestNeighbors

    from skdml._utils import quiet_warnings

    X = np.random.RandomState(0).rand(20, 3)
    inside, done = threading.Event(), threading.Event()

    def section():
        with quiet_warnings({"message": "noise", "category": UserWarning}):
            inside.set()
            done.wait(30)

    other = threading.Thread(target=section)
    other.start()
    inside.wait(30)
    try:
        before = list(warnings.filters)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            warnings.filters[:0] = [f for f in before if type(f[1]).__name__ == "_InSection"]
            distances, _ = NearestNeighbors(n_neighbors=2).fit(X).kneighbors(X)  # no error
            warnings.warn("noise")  # this thread is not in the section: shown
    finally:
        done.set()
        other.join()
    assert np.all(np.isfinite(distances)) and [str(w.message) for w in caught] == ["noise"]


def test_the_filter_list_pickles_and_copies_during_a_quiet_section():
    # review of audit 22: the section's thread-local could not be pickled, and scikit-learn's
    # Parallel sends warnings.filters to loky's workers ("Could not pickle the task")
    import copy
    import pickle

    from skdml._utils import quiet_warnings

    with quiet_warnings({"message": "noise", "category": UserWarning}):
        copied = pickle.loads(pickle.dumps(warnings.filters))
        deep = copy.deepcopy(warnings.filters)
    for filters in (copied, deep):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            warnings.filters[:0] = filters  # a copy's item quiets nothing
            warnings.warn("noise")
        assert [str(w.message) for w in caught] == ["noise"]
