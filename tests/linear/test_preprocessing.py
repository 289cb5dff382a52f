"""The working space of the linear learners (skdml/linear/_preprocessing.py)."""

import numpy as np
import pytest
from sklearn.datasets import load_iris

from skdml import ECAML, SUML
from skdml.linear._preprocessing import InputSpace


@pytest.mark.parametrize("make", [
    lambda X: np.hstack([X, np.full((len(X), 1), 1e13)]),  # a constant column beside them
    lambda X: 1e8 + 1e-5 * X,  # a large offset: relative spread 2e-13, far above float64's eps
])
def test_data_with_a_small_spread_relative_to_their_largest_value_are_not_constant(make):
    # both were refused as "X is constant (... differ only below float64 precision)"
    X = make(load_iris().data)
    space, X_t = InputSpace.fit(X)
    assert np.isfinite(X_t).all()
    assert np.sqrt(np.mean(np.sum(X_t ** 2, axis=1))) == pytest.approx(1.0)  # unit RMS
    np.testing.assert_allclose(space.transform(X), X_t, atol=1e-6)


def test_learners_fit_beside_a_large_constant_column():
    from scipy.spatial.distance import pdist
    X, y = load_iris(return_X_y=True)
    Xc = np.hstack([X, np.full((150, 1), 1e13)])
    with_column = ECAML(n_components=2, max_iter=3, random_state=0).fit(Xc, y)
    reference = ECAML(n_components=2, max_iter=3, random_state=0).fit(X, y)
    # the constant column changes no distance: the same metric as without it
    np.testing.assert_allclose(pdist(with_column.transform(Xc)), pdist(reference.transform(X)),
                               atol=1e-6)
    assert np.isfinite(SUML(max_iter=3, random_state=0).fit(Xc).transform(Xc)).all()


def test_constant_data_and_scales_beyond_float64_are_refused_clearly():
    with pytest.raises(ValueError, match="X is constant"):
        InputSpace.fit(np.full((5, 3), 7.0))
    X = np.hstack([load_iris().data, np.full((150, 1), 1e300)])
    with pytest.raises(ValueError, match="scales too far apart"):  # was "X is constant"
        InputSpace.fit(X)
