import pickle
import warnings

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.neighbors import KNeighborsClassifier
from sklearn.pipeline import make_pipeline
from sklearn.utils.estimator_checks import parametrize_with_checks
from sklearn.utils.validation import validate_data

from skdml.linear import BaseMahalanobis, check_n_components
from skdml.linear._base import check_init_array, warn_if_outlying_rows
from skdml.linear._preprocessing import reduce_input


class RandomProjection(BaseMahalanobis):
    """Minimal concrete learner: a seeded random linear map."""

    _parameter_constraints = {"n_components": [int, None], "random_state": ["random_state"]}

    def __init__(self, n_components=None, random_state=None):
        self.n_components = n_components
        self.random_state = random_state

    def fit(self, X, y=None):
        self._validate_params()
        X = validate_data(self, X, dtype=[np.float64, np.float32])
        n = check_n_components(self.n_components, X.shape[1])
        rng = np.random.RandomState(self.random_state)
        self.components_ = rng.randn(n, X.shape[1])
        return self


@parametrize_with_checks([RandomProjection(), RandomProjection(n_components=1, random_state=0)])
def test_sklearn_compatible(estimator, check):
    check(estimator)


def test_transform_matrix_and_distances_agree():
    rng = np.random.RandomState(0)
    X = rng.randn(30, 5)
    est = RandomProjection(n_components=3, random_state=1).fit(X)
    L = est.components_
    np.testing.assert_allclose(est.transform(X), X @ L.T)
    M = est.get_mahalanobis_matrix()
    np.testing.assert_allclose(M, L.T @ L)
    pairs = np.stack([X[:10], X[10:20]], axis=1)
    diff = X[:10] - X[10:20]
    expected = np.sqrt(np.einsum("ij,jk,ik->i", diff, M, diff))
    np.testing.assert_allclose(est.pair_distance(pairs), expected)
    np.testing.assert_allclose(est.pair_score(pairs), -expected)
    metric = est.get_metric()
    np.testing.assert_allclose([metric(a, b) for a, b in zip(X[:10], X[10:20])], expected)


def test_get_metric_in_knn_matches_pipeline_and_pickles():
    rng = np.random.RandomState(0)
    X = rng.randn(60, 4)
    y = (X[:, 0] > 0).astype(int)
    est = RandomProjection(n_components=2, random_state=0).fit(X)
    knn = KNeighborsClassifier(3, metric=est.get_metric(), algorithm="brute").fit(X, y)
    pipe = make_pipeline(clone(est), KNeighborsClassifier(3)).fit(X, y)
    np.testing.assert_array_equal(knn.predict(X), pipe.predict(X))
    metric = pickle.loads(pickle.dumps(est.get_metric()))
    assert metric(X[0], X[1]) == pytest.approx(est.pair_distance(X[None, :2])[0])


def test_feature_names_and_set_output():
    pd = pytest.importorskip("pandas")
    X = pd.DataFrame(np.random.RandomState(0).randn(10, 3), columns=["a", "b", "c"])
    est = RandomProjection(n_components=2, random_state=0).set_output(transform="pandas").fit(X)
    out = est.transform(X)
    assert list(out.columns) == ["randomprojection0", "randomprojection1"]


@pytest.mark.parametrize(
    "pairs, match",
    [
        (np.zeros((3, 3, 4)), "shape"),
        (np.zeros((3, 2, 5)), "features"),
        (np.full((3, 2, 4), np.nan), "NaN"),
    ],
)
def test_pair_distance_rejects_bad_pairs(pairs, match):
    est = RandomProjection(random_state=0).fit(np.random.RandomState(0).randn(10, 4))
    with pytest.raises(ValueError, match=match):
        est.pair_distance(pairs)


def test_check_n_components_and_reduction():
    with pytest.raises(ValueError, match="n_components=5 must be <= n_features=4"):
        check_n_components(5, 4)
    assert check_n_components(None, 4) == 4
    X = np.random.RandomState(0).randn(50, 10)
    Xr, P = reduce_input(X, 4, random_state=0)
    np.testing.assert_allclose(P @ P.T, np.eye(4), atol=1e-10)
    np.testing.assert_allclose(Xr, (X - X.mean(0)) @ P.T, atol=1e-10)




def test_distances_stay_finite_where_the_difference_overflows():
    # u - v = inf for 1e308 and -1e308: the norm's inf / inf gave NaN, though the true
    # distance, 0.25 x 2e308 = 5e307, is finite
    from skdml.linear._base import MahalanobisDistance, mapped_distances
    metric = MahalanobisDistance(np.array([[0.25]]))
    assert metric([1e308], [-1e308]) == pytest.approx(5e307, rel=1e-12)
    assert metric([1.0], [3.0]) == 0.5
    A, B = np.array([[1e308, 0.0], [1.0, 2.0]]), np.array([[-1e308, 0.0], [0.0, 0.0]])
    L = np.array([[0.25, 0.0], [0.0, 1.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = mapped_distances(A, B, L)
    np.testing.assert_allclose(got, [5e307, np.hypot(0.25, 2.0)], rtol=1e-12)


def test_pair_distances_are_computed_in_blocks_with_the_same_values(monkeypatch):
    # blocks of a few rows (the temporaries stay small), overflowing pairs redone in place
    from skdml.linear import _base

    rng = np.random.RandomState(0)
    A, B, L = rng.randn(50, 4), rng.randn(50, 4), 0.01 * rng.randn(3, 4)
    A[7], B[7] = 1e308, -1e308
    whole = _base.mapped_distances(A, B, L)
    monkeypatch.setattr(_base, "_PAIR_BLOCK_BYTES", 8 * 4 * 3)  # 3 rows a block
    np.testing.assert_array_equal(_base.mapped_distances(A, B, L), whole)
    assert np.isfinite(whole).all()


def test_a_transform_that_overflows_its_dtype_is_refused():
    # float32 rows whose embedding passes 3.4e38 came back NaN, with numpy's RuntimeWarning only
    from skdml.linear import LFDA
    from sklearn.datasets import load_iris

    X, y = load_iris(return_X_y=True)
    est = LFDA().fit(X * 1e-10, y)  # components_ of about 1e10
    assert np.all(np.isfinite(est.transform(np.full((1, 4), 1e30))))  # float64: in range
    with pytest.raises(ValueError, match="overflows float32.*float64"):
        est.transform(np.full((1, 4), 1e30, np.float32))


@pytest.mark.parametrize("learner", ["ECAML", "LMNN", "LFDA", "MLKR", "SUML"])
def test_one_row_that_dominates_the_scale_is_named(learner):
    # one row at 1e3 took LMNN's 3-NN accuracy on wine from 1.0 to 0.74, LFDA's to 0.70, quietly
    import skdml
    from sklearn.datasets import load_wine
    from sklearn.preprocessing import StandardScaler

    X, y = load_wine(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    est = getattr(skdml, learner)(max_iter=2) if learner != "LFDA" else skdml.LFDA()
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*farther from the median")
        est.fit(X, y)  # ordinary data: no warning
    X[7] = 1e4
    with pytest.warns(UserWarning, match=r"1 row\(s\) of X \(row 7: .* farther from the median"):
        est.fit(X, y)


def test_non_finite_components_are_named_not_blamed_on_x():
    from skdml.linear import LFDA
    from sklearn.datasets import load_iris

    X, y = load_iris(return_X_y=True)
    est = LFDA().fit(X, y)
    est.components_[0, 0] = np.nan
    with pytest.raises(ValueError, match="components_ is not finite"):
        est.transform(X)


def test_a_distant_group_is_not_called_an_outlier():
    # a review regression: 40 % of the rows far from a tight majority were "one row"
    from skdml import LMNN

    rng = np.random.RandomState(0)
    X = np.r_[rng.randn(60, 2) * 0.01, rng.randn(40, 2) + 50]
    y = np.r_[np.zeros(60), np.ones(40)]
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*farther from the median")
        LMNN(max_iter=2).fit(X, y)


def _warns(X):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warn_if_outlying_rows(X, "T")
    return any("farther from the median" in str(w.message) for w in caught)


def test_the_outlier_warning_keeps_its_documented_ratio_size_and_count():
    rng = np.random.RandomState(0)
    X = rng.randn(200, 2)
    typical = np.median(np.linalg.norm(X - np.median(X, axis=0), axis=1))
    X[0] = 2e3 * typical  # twice OUTLIER_RATIO (1e3): warned
    assert _warns(X)
    X[0] = 5e2 * typical  # half of it: quiet
    assert not _warns(X)
    X[0] = X[1] = X[2] = 1e5 * typical  # three rows (<= max(3, n // 100)): still outliers
    assert _warns(X)
    small = np.r_[rng.randn(9, 2), [[1e6, 1e6]]]  # ten rows: enough to name one
    assert _warns(small)


def test_init_array_is_copied_and_rank_checked_exactly():
    init = np.eye(3)
    out = check_init_array(init, 3)
    out[0, 0] = 5.0
    assert init[0, 0] == 1.0  # the user's array is not the returned one
    with pytest.raises(ValueError, match="rank 2 < 3"):
        check_init_array(np.array([[1.0, 0, 0], [0, 1, 0], [1, 1, 0]]), 3)


def test_the_dtype_tag_promises_float32_and_transform_keeps_it():
    from sklearn.datasets import load_iris
    from skdml.linear import LFDA

    X, y = load_iris(return_X_y=True)
    est = LFDA().fit(X, y)
    assert set(est.__sklearn_tags__().transformer_tags.preserves_dtype) == {"float64", "float32"}
    assert est.transform(X.astype(np.float32)).dtype == np.float32
