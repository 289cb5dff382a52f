"""The working space of the linear learners (skdml/linear/_preprocessing.py)."""

import numpy as np
import pytest
from scipy.spatial.distance import pdist
from sklearn.datasets import load_iris
from sklearn.decomposition import PCA
from sklearn.discriminant_analysis import LinearDiscriminantAnalysis

from skdml import ECAML, JRD, SUML
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


# ------------------------------------------------------------ features in other units
def _digits_in_mixed_units(n=500):
    """scikit-learn's digits with every pixel times 10**u, u uniform in [-2, 2]."""
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    return (X * 10.0 ** np.random.RandomState(0).uniform(-2, 2, 64))[:n], y[:n]


def test_standardizing_pays_where_the_classes_lie_in_small_units_only():
    from sklearn.datasets import load_breast_cancer, load_digits, load_wine
    from sklearn.preprocessing import StandardScaler

    from skdml.linear._preprocessing import standardizing_pays

    for load in (load_wine, load_breast_cancer):  # areas in the thousands beside ratios
        assert standardizing_pays(*load(return_X_y=True)), load.__name__
    assert standardizing_pays(*_digits_in_mixed_units())
    X, y = load_digits(return_X_y=True)
    assert not standardizing_pays(X, y)  # pixels: standardising stretches the quiet borders
    # the trailing principal axes carry little: standardising them (whitening) loses
    Z = np.asarray(PCA(40, random_state=0).fit_transform(X))
    assert not standardizing_pays(Z, y)
    # input already on one scale: no choice to make, whatever the round-off of its spreads
    # (half of a standardised digits set once won the check by 2 of 899 samples)
    Xs = StandardScaler().fit_transform(X)
    assert not standardizing_pays(Xs, y) and not standardizing_pays(Xs[::2], y[::2])


def test_a_standardised_working_space_folds_into_components():
    X = _digits_in_mixed_units(120)[0] + 50.0  # an offset: the mean matters
    for n_dims in (None, 20):
        space, X_t = InputSpace.fit(X, n_dims, 0, standardize=True)
        assert space.spread is not None and space.spread.shape == (64,)
        np.testing.assert_allclose(space.transform(X), X_t, atol=1e-9)
        if n_dims is None:  # each feature on one scale (constant pixels stay at 0)
            spreads = X_t.std(axis=0)
            np.testing.assert_allclose(spreads[spreads > 1e-9], spreads.max(), rtol=1e-9)
        L = np.random.RandomState(1).randn(5, space.dim)
        components = space.fold(L)
        np.testing.assert_allclose(space.unfold(components), L, atol=1e-9)
        # transform(x) = components x: the working embedding times m s, translated
        np.testing.assert_allclose(pdist(X @ components.T),
                                   pdist(X_t @ L.T) * space.peak * space.scale, rtol=1e-9)


@pytest.mark.parametrize("learner", [ECAML, JRD])
def test_default_starts_from_standardised_features_where_the_units_differ(learner):
    from sklearn.model_selection import train_test_split
    from sklearn.neighbors import KNeighborsClassifier
    from sklearn.pipeline import make_pipeline

    X, y = _digits_in_mixed_units()
    X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=0.3, stratify=y, random_state=0)

    def start(**params):
        pipe = make_pipeline(learner(n_components=16, max_iter=0, random_state=0, **params),
                             KNeighborsClassifier(10)).fit(X_tr, y_tr)
        return pipe.score(X_te, y_te), pipe[0].standardize_

    (raw, raw_chosen), (auto, chosen) = start(standardize=False), start()
    assert chosen and not raw_chosen
    assert auto > raw + 0.15, (raw, auto)  # measured: 0.72 -> 0.95


def test_default_on_one_scale_is_the_raw_fit_bit_for_bit():
    # the check reads no random numbers: where it keeps the raw features, the fit is the one
    # of standardize=False (the defaults on AT&T, COIL-20 and USPS did not move)
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    X, y = X[:300], y[:300]
    for learner in (ECAML, JRD):
        auto = learner(n_components=8, max_iter=3, random_state=0).fit(X, y)
        raw = learner(n_components=8, max_iter=3, standardize=False, random_state=0).fit(X, y)
        assert not auto.standardize_
        np.testing.assert_array_equal(auto.components_, raw.components_)


def test_standardised_float32_input_is_centred_before_its_small_spreads_are_stretched():
    # features near 1.0 whose class lies in a variation of 3e-6: dividing by the largest value
    # in float32 first rounded x / m to 6e-8, and the stretch by the spread (up to 1e6) made
    # that 2-5 % of a spread, so fit trained on other values than transform maps X to
    rng = np.random.RandomState(0)
    y = np.repeat(np.arange(3), 100)
    X = np.c_[rng.randn(300, 4), 1.0 + 3e-6 * (np.eye(3)[y] @ rng.randn(3, 4)
                                             + 0.3 * rng.randn(300, 4))].astype(np.float32)
    space, X_t = InputSpace.fit(X, None, 0, standardize=True)
    assert X_t.dtype == np.float32
    np.testing.assert_allclose(space.transform(X), X_t, atol=1e-5)  # was 0.009-0.018


def test_the_units_check_reads_two_samples_of_every_class_it_reads():
    # 5,000 classes of 2, the class in 16 features in units of 1e-3 beside 4 in units of 1e3:
    # 2,000 rows evenly spaced over the sorted labels held no class twice, so leave-one-out
    # k-NN scored 0 either way and the check never standardised; it also counted the votes
    # in a (rows, classes) array per k (80 MB here, 1.5 GB for 50,000 classes)
    import tracemalloc

    from skdml.linear._preprocessing import standardizing_pays

    rng = np.random.RandomState(0)
    y = np.repeat(np.arange(5000), 2)
    centres = rng.randn(5000, 16)
    X = np.c_[1e-3 * (centres[y] + 0.05 * rng.randn(len(y), 16)), 1e3 * rng.randn(len(y), 4)]
    tracemalloc.start()
    try:
        assert standardizing_pays(X, y)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 20 * 2**20, peak / 2**20
