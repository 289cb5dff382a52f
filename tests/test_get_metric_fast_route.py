"""get_metric(): shapes it accepts and the compiled route the docs recommend."""

import numpy as np
import pytest
from sklearn.neighbors import KNeighborsClassifier

from skdml import ECAML


@pytest.fixture(scope="module")
def fitted():
    rng = np.random.RandomState(0)
    X = rng.randn(80, 6)
    y = (X[:, 0] + 0.5 * X[:, 1] > 0).astype(int)
    return X, y, ECAML(n_components=3, max_iter=5, random_state=0).fit(X, y)


def test_metric_accepts_row_vectors(fitted):
    X, _, est = fitted
    metric = est.get_metric()
    expected = est.pair_distance(np.stack([X[:1], X[1:2]], axis=1))[0]
    assert metric(X[:1], X[1:2]) == pytest.approx(expected)        # (1, d) inputs
    assert metric(X[0], X[1:2]) == pytest.approx(expected)         # mixed (d,) and (1, d)
    assert metric(X[0], X[1]) == pytest.approx(expected)
    with pytest.raises(ValueError, match="features"):
        metric(X[:1, :4], X[1:2, :4])


def test_documented_fast_route_gives_identical_neighbours(fitted):
    X, y, est = fitted
    slow = KNeighborsClassifier(3, metric=est.get_metric(), algorithm="brute").fit(X, y)
    fast = KNeighborsClassifier(3, metric="mahalanobis", algorithm="brute",
                                metric_params={"VI": est.get_mahalanobis_matrix()}).fit(X, y)
    d_slow, i_slow = slow.kneighbors(X[:20])
    d_fast, i_fast = fast.kneighbors(X[:20])
    np.testing.assert_array_equal(i_slow, i_fast)
    np.testing.assert_allclose(d_slow, d_fast, rtol=1e-6, atol=1e-9)
