"""Tests of the class-disjoint (zero-shot) splitters in skdml.model_selection."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.datasets import load_digits
from sklearn.decomposition import PCA
from sklearn.model_selection import GridSearchCV, check_cv, cross_val_score, cross_validate
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from skdml.metrics import recall_at_k, recall_at_k_scorer
from skdml.model_selection import ClassDisjointSplit, FirstHalfClassSplit


def _labels(n_classes, per_class=3, seed=0):
    rng = np.random.RandomState(seed)
    y = np.repeat(np.arange(n_classes), per_class)
    return y[rng.permutation(y.size)]


def _check_partition(train, test, y):
    assert train.dtype.kind == "i" and test.dtype.kind == "i"
    assert np.all(np.diff(train) > 0) and np.all(np.diff(test) > 0)  # sorted, unique
    np.testing.assert_array_equal(np.sort(np.concatenate([train, test])), np.arange(len(y)))
    assert not set(y[train].tolist()) & set(y[test].tolist())  # class-disjoint


# --------------------------------------------------------------------------- ClassDisjointSplit


@settings(max_examples=60, deadline=None)
@given(
    n_classes=st.integers(2, 30),
    per_class=st.integers(1, 4),
    frac=st.floats(0.01, 0.99),
    n_splits=st.integers(1, 4),
    seed=st.integers(0, 2**31 - 1),
)
def test_class_disjoint_split_properties(n_classes, per_class, frac, n_splits, seed):
    y = _labels(n_classes, per_class, seed % 1000)
    X = np.zeros((len(y), 2))
    n_test = math.ceil(frac * n_classes)
    cv = ClassDisjointSplit(n_splits, test_size=frac, random_state=seed)
    if n_test >= n_classes:
        with pytest.raises(ValueError, match="at least one class must remain"):
            list(cv.split(X, y))
        return
    splits = list(cv.split(X, y))
    assert len(splits) == n_splits == cv.get_n_splits(X, y)
    for train, test in splits:
        _check_partition(train, test, y)
        assert len(np.unique(y[test])) == n_test
        assert len(np.unique(y[train])) == n_classes - n_test


def test_int_test_size_is_a_number_of_classes():
    y = _labels(10)
    for n_test in (1, 3, 9):
        for train, test in ClassDisjointSplit(3, test_size=n_test, random_state=0).split(y, y):
            _check_partition(train, test, y)
            assert len(np.unique(y[test])) == n_test


def test_reproducible_and_random():
    y = _labels(20)
    X = np.zeros((len(y), 1))
    cv = ClassDisjointSplit(5, random_state=42)
    first = [test.tolist() for _, test in cv.split(X, y)]
    second = [test.tolist() for _, test in cv.split(X, y)]
    assert first == second  # an int seed: every split() call yields the same splits
    assert len({tuple(t) for t in first}) > 1  # but the splits differ from each other
    other = [test.tolist() for _, test in ClassDisjointSplit(5, random_state=43).split(X, y)]
    assert other != first
    # A RandomState instance advances between calls, like ShuffleSplit.
    cv = ClassDisjointSplit(5, random_state=np.random.RandomState(0))
    assert [t.tolist() for _, t in cv.split(X, y)] != [t.tolist() for _, t in cv.split(X, y)]


def test_every_class_eventually_tested():
    y = _labels(6)
    seen = set()
    for _, test in ClassDisjointSplit(30, test_size=2, random_state=0).split(y, y):
        seen |= set(y[test].tolist())
    assert seen == set(range(6))


def test_labels_of_any_type():
    y = np.array(["cat", "dog", "cat", "emu", "dog", "fox", "emu", "fox"])
    for train, test in ClassDisjointSplit(4, random_state=0).split(np.zeros((8, 3)), y):
        _check_partition(train, test, y)
        assert len(set(y[test])) == 2
    y_col = _labels(4).reshape(-1, 1)  # a column vector is accepted, with a warning
    with pytest.warns(Warning):
        splits = list(ClassDisjointSplit(2, random_state=0).split(np.zeros((12, 1)), y_col))
    for train, test in splits:
        _check_partition(train, test, y_col.ravel())


@pytest.mark.parametrize(
    "params, match",
    [
        ({"n_splits": 0}, "n_splits"),
        ({"n_splits": 2.5}, "n_splits"),
        ({"n_splits": True}, "n_splits"),
        ({"test_size": 0.0}, "test_size"),
        ({"test_size": 1.0}, "test_size"),
        ({"test_size": -0.2}, "test_size"),
        ({"test_size": 0}, "test_size"),
        ({"test_size": "half"}, "test_size"),
        ({"test_size": True}, "test_size"),
        ({"test_size": 4}, "only 4 classes"),
        ({"test_size": 0.9}, "at least one class must remain"),
    ],
)
def test_bad_parameters(params, match):
    y = _labels(4)
    with pytest.raises(ValueError, match=match):
        list(ClassDisjointSplit(**params).split(np.zeros((len(y), 1)), y))


@pytest.mark.parametrize("cv", [ClassDisjointSplit(random_state=0), FirstHalfClassSplit()])
def test_bad_labels(cv):
    X = np.zeros((6, 2))
    with pytest.raises(ValueError, match="needs the labels"):
        list(cv.split(X, None))
    with pytest.raises(ValueError, match="at least 2 classes"):
        list(cv.split(X, np.ones(6)))
    with pytest.raises(ValueError, match="inconsistent numbers of samples"):
        list(cv.split(X, np.arange(5)))
    with pytest.raises(ValueError, match="empty"):
        list(cv.split(None, np.array([])))
    with pytest.raises(ValueError, match="NaN"):
        list(cv.split(X, np.array([0, 1, np.nan, 0, 1, 1])))


def test_repr_and_check_cv():
    cv = ClassDisjointSplit(3, test_size=2, random_state=7)
    assert repr(cv) == "ClassDisjointSplit(n_splits=3, random_state=7, test_size=2)"
    assert check_cv(cv) is cv
    assert repr(FirstHalfClassSplit()) == "FirstHalfClassSplit()"


# --------------------------------------------------------------------------- FirstHalfClassSplit


@pytest.mark.parametrize("n_classes", [2, 3, 7, 10, 200])
def test_first_half(n_classes):
    rng = np.random.RandomState(n_classes)
    classes = np.sort(rng.choice(1000, n_classes, replace=False)) + 1  # arbitrary, sorted
    y = rng.permutation(np.repeat(classes, 2))
    cv = FirstHalfClassSplit()
    splits = list(cv.split(np.zeros((len(y), 1)), y))
    assert len(splits) == 1 == cv.get_n_splits()
    train, test = splits[0]
    _check_partition(train, test, y)
    np.testing.assert_array_equal(np.unique(y[train]), classes[: n_classes // 2])
    np.testing.assert_array_equal(np.unique(y[test]), classes[n_classes // 2:])


def test_first_half_cub_protocol():
    """CUB-200: classes 1..100 train, 101..200 test (the papers' protocol)."""
    y = np.repeat(np.arange(1, 201), 3)[::-1]
    train, test = next(FirstHalfClassSplit().split(None, y))
    assert set(y[train].tolist()) == set(range(1, 101))
    assert set(y[test].tolist()) == set(range(101, 201))


# --------------------------------------------------------------------------- with scikit-learn


@pytest.fixture(scope="module")
def digits():
    return load_digits(return_X_y=True)


@pytest.mark.parametrize("cv", [ClassDisjointSplit(n_splits=3, random_state=0),
                                FirstHalfClassSplit()])
def test_cross_val_score_recall(digits, cv):
    X, y = digits
    scores = cross_val_score(PCA(16), X, y, cv=cv, scoring=recall_at_k_scorer(k=1))
    assert scores.shape == (cv.get_n_splits(),)
    # Each fold's score is Recall@1 of the test (unseen) classes embedded by a PCA
    # fitted on the training classes only.
    for score, (train, test) in zip(scores, cv.split(X, y)):
        pca = PCA(16).fit(X[train])
        assert score == pytest.approx(recall_at_k(pca.transform(X[test]), y[test], k=1))
        assert 0.5 < score <= 1.0


class _ClassRecorder(TransformerMixin, BaseEstimator):
    """Records the classes it is fitted on."""

    def __init__(self, scale=1.0):
        self.scale = scale

    def fit(self, X, y):
        self.classes_seen_ = np.unique(y)
        return self

    def transform(self, X):
        return np.asarray(X) * self.scale


def _disjoint_scorer(estimator, X, y):
    return float(not set(estimator.classes_seen_.tolist()) & set(np.unique(y).tolist()))


def test_grid_search_never_scores_on_training_classes(digits):
    X, y = digits
    cv = ClassDisjointSplit(n_splits=4, test_size=3, random_state=0)
    search = GridSearchCV(_ClassRecorder(), {"scale": [0.5, 1.0]}, cv=cv,
                          scoring=_disjoint_scorer, refit=False)
    search.fit(X, y)
    scores = np.array([search.cv_results_[f"split{i}_test_score"] for i in range(4)])
    assert scores.shape == (4, 2) and np.all(scores == 1.0)
    # and the training side of cross_validate sees only the training classes
    out = cross_validate(_ClassRecorder(), X, y, cv=cv, scoring=_disjoint_scorer,
                         return_estimator=True, return_indices=True)
    for est, test in zip(out["estimator"], out["indices"]["test"]):
        assert len(est.classes_seen_) == 7
        assert not set(est.classes_seen_.tolist()) & set(y[test].tolist())


def test_grid_search_picks_a_pipeline(digits):
    X, y = digits
    pipe = make_pipeline(StandardScaler(), PCA())
    search = GridSearchCV(pipe, {"pca__n_components": [2, 24]},
                          cv=ClassDisjointSplit(n_splits=2, random_state=0),
                          scoring=recall_at_k_scorer(k=1))
    search.fit(X, y)
    assert search.best_params_ == {"pca__n_components": 24}  # 2 dims lose most neighbours
    assert search.cv_results_["mean_test_score"][1] > search.cv_results_["mean_test_score"][0]


def test_works_with_metadata_routing(digits):
    import sklearn

    X, y = digits
    with sklearn.config_context(enable_metadata_routing=True):
        scores = cross_val_score(PCA(8), X, y, cv=ClassDisjointSplit(2, random_state=0),
                                 scoring=recall_at_k_scorer(k=1))
        search = GridSearchCV(PCA(), {"n_components": [2, 8]}, cv=FirstHalfClassSplit(),
                              scoring=recall_at_k_scorer(k=1)).fit(X, y)
    assert scores.shape == (2,) and np.all((scores > 0) & (scores <= 1))
    assert search.best_params_ == {"n_components": 8}


@pytest.mark.parametrize("labels, match", [
    ([1, "a", 2, "b", 1, "a"], "mixes label types"),
    ([1, None, 2, 2, 1, 1], "contains None"),
])
def test_unorderable_or_missing_labels_get_a_clear_error(labels, match):
    y = np.array(labels, dtype=object)
    for splitter in (ClassDisjointSplit(1, random_state=0), FirstHalfClassSplit()):
        with pytest.raises(ValueError, match=match):
            next(splitter.split(np.zeros((len(y), 1)), y))


@pytest.mark.parametrize("test_size, n_classes, expected", [(0.07, 100, 7), (0.28, 25, 7),
                                                            (0.3, 10, 3), (0.25, 10, 3)])
def test_class_fraction_rounds_up_from_the_exact_product(test_size, n_classes, expected):
    # 0.07 * 100 is 7.000000000000001 in floating point: ceil took it to 8
    y = np.repeat(np.arange(n_classes), 2)
    _, test = next(ClassDisjointSplit(1, test_size=test_size, random_state=0).split(
        np.zeros((len(y), 1)), y))
    assert len(np.unique(y[test])) == expected


def test_a_tiny_test_fraction_still_holds_out_one_class():
    # ceil(round(1e-14 * 10, 12)) was 0: every test fold empty, every score NaN
    y = np.repeat(np.arange(10), 3)
    for train, test in ClassDisjointSplit(n_splits=2, test_size=1e-14,
                                          random_state=0).split(np.zeros((30, 1)), y):
        assert len(np.unique(y[test])) == 1 and len(train) == 27


@pytest.mark.parametrize("missing", [np.nan, float("nan")])
def test_nan_among_object_labels_is_refused(missing):
    from skdml.model_selection import ClassDisjointSplit

    y = np.array([1.0, 1.0, 2.0, 2.0, 3.0, 3.0, missing, missing], dtype=object)
    with pytest.raises(ValueError, match="NaN or a missing value"):
        next(ClassDisjointSplit(n_splits=1, test_size=1, random_state=3).split(
            np.zeros((8, 1)), y))


def test_pandas_na_among_labels_is_refused():
    pd = pytest.importorskip("pandas")
    from skdml.model_selection import ClassDisjointSplit

    y = pd.Series(["a", "a", "b", "b", "c", "c", pd.NA, pd.NA], dtype=object)
    with pytest.raises(ValueError, match="NaN or a missing value"):
        next(ClassDisjointSplit(n_splits=1, test_size=1, random_state=0).split(
            np.zeros((8, 1)), y))


def test_a_numpy_float32_test_size_takes_the_classes_its_decimal_says():
    # float32(0.3) is 0.30000001192...: ceil took 4 test classes of 10 (and 2 for 0.1)
    y = np.repeat(np.arange(10), 3)
    X = np.zeros((30, 1))
    for ts, expected in ((np.float32(0.3), 3), (np.float32(0.1), 1), (np.float64(0.3), 3)):
        _, test = next(ClassDisjointSplit(n_splits=1, test_size=ts, random_state=0).split(X, y))
        assert len(np.unique(y[test])) == expected
