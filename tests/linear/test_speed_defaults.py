"""Default fits of the linear learners stay fast on wide input (thousands of features).

``n_components=None`` is capped at 128, the PCA start of large data is a randomised
SVD (same leading subspace), and float32 input stays float32 in the working space.
The full 10000 x 4096 default fits are timed by ``benchmarks/studies/bench_linear_speed.py``
and the audit's slow cases (``tests/_robustness_cases_speed_linear.py``).
"""

import time

import numpy as np
import pytest

from skdml import ECAML, JRD, SUML
from skdml.linear import check_n_components
from skdml.linear._preprocessing import InputSpace, initial_components


def test_default_n_components_is_capped():
    assert check_n_components(None, 4096, n_samples=10000) == 128
    assert check_n_components(None, 64, n_samples=1797) == 64  # small inputs keep every axis
    assert check_n_components(None, 4096, n_samples=100) == 100
    assert check_n_components(None, 4096) == 4096  # no n_samples: the input dimension


@pytest.mark.parametrize("learner", [SUML, ECAML, JRD], ids=lambda c: c.__name__)
def test_default_embedding_of_wide_input_has_128_components(learner):
    X = np.random.RandomState(0).rand(300, 200)
    y = np.arange(300) % 6
    est = learner(max_iter=0, random_state=0).fit(X, y)
    assert est.components_.shape == (128, 200)


def test_default_start_on_wide_input_is_fast():
    # was an exact 2048 x 2048 eigendecomposition and an O(k^2 d) Gram-Schmidt of 2048
    # rows: minutes on two cores; now a randomised SVD for 128 axes
    X = np.random.RandomState(0).rand(4000, 2048).astype(np.float32)
    y = np.arange(4000) % 40
    start = time.perf_counter()
    est = ECAML(max_iter=0, random_state=0).fit(X, y)
    assert time.perf_counter() - start < 30.0
    assert est.components_.shape == (128, 2048)


def test_randomised_pca_start_spans_the_leading_axes():
    rng = np.random.RandomState(0)
    axes = np.linalg.qr(rng.randn(1200, 16))[0].T  # 16 strong axes in 1200 dimensions
    X = (rng.randn(1500, 16) * np.linspace(10.0, 5.0, 16)) @ axes + 0.3 * rng.randn(1500, 1200)
    space, X_t = InputSpace.fit(X)
    L = initial_components("pca", X_t, None, 16, space, "euclidean", rng)
    np.testing.assert_allclose(L @ L.T, np.eye(16), atol=1e-10)
    cosines = np.linalg.svd(L @ axes.T, compute_uv=False)  # of the principal angles
    assert cosines.min() > 0.99


def test_float32_input_stays_float32_in_the_working_space():
    X = np.random.RandomState(0).rand(50, 8).astype(np.float32) + 100.0
    space, X_t = InputSpace.fit(X)
    assert X_t.dtype == np.float32
    reference = (X.astype(np.float64) / space.peak - space.mean) / space.scale
    np.testing.assert_allclose(X_t, reference, atol=1e-5)
    assert InputSpace.fit(X.astype(np.float64))[1].dtype == np.float64
