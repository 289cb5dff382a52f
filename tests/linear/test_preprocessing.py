"""The working space of the linear learners (skdml/linear/_preprocessing.py)."""

import numpy as np
import pytest
from sklearn.datasets import load_iris
from sklearn.discriminant_analysis import LinearDiscriminantAnalysis

from skdml import ECAML, SUML
from skdml.linear._preprocessing import InputSpace, initial_components


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


def test_lda_start_leads_with_the_discriminant_directions_and_stiefel_starts_are_orthonormal():
    X, y = load_iris(return_X_y=True)
    space, X_t = InputSpace.fit(X)
    rng = np.random.RandomState(0)
    L0 = initial_components("lda", X_t, y, 3, space, "euclidean", rng)
    scalings = LinearDiscriminantAnalysis(n_components=2, solver="svd").fit(X_t, y).scalings_[:, :2]
    # the first two rows span the discriminant directions (not the principal axes)
    Q = np.linalg.qr(scalings)[0]
    np.testing.assert_allclose(L0[:2] @ Q @ Q.T, L0[:2], atol=1e-8)
    np.testing.assert_allclose(L0 @ L0.T, np.eye(3), atol=1e-10)
    # an init array on the Stiefel manifold is projected onto orthonormal rows
    init = np.array([[2.0, 0.0, 0.0, 0.0], [1.0, 1.0, 0.0, 0.0]])
    L1 = initial_components(init, X_t, y, 2, space, "stiefel", rng)
    np.testing.assert_allclose(L1 @ L1.T, np.eye(2), atol=1e-12)
    # a random Euclidean start has rows of norm about 1 (Gaussian / sqrt(dim))
    L2 = initial_components("random", X_t, y, 3, space, "euclidean", np.random.RandomState(0))
    assert 0.3 < np.linalg.norm(L2, axis=1).mean() < 1.7
