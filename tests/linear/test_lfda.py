"""skdml.linear.LFDA: the local scatters against their definition, learning, metric-learn."""

import numpy as np
import pytest
from _classic_data import knn_score, noisy_classes
from _metric_learn import needs_metric_learn, run_metric_learn
from sklearn.datasets import load_digits

from skdml.linear import LFDA
from skdml.linear._lfda import local_scatters


def _brute_scatters(X, y, k):
    """Sugiyama's Eq. 11-14 written as explicit double sums over the pairs."""
    n = len(X)
    D = ((X[:, None] - X[None]) ** 2).sum(-1)
    Ww, Wb = np.zeros((n, n)), np.full((n, n), 1.0 / n)
    for c in np.unique(y):
        m = np.flatnonzero(y == c)
        Dc = D[np.ix_(m, m)]
        sigma = np.sqrt(np.sort(Dc, axis=1)[:, min(k, len(m) - 1)])
        A = np.exp(-Dc / np.outer(sigma, sigma))
        Ww[np.ix_(m, m)] = A / len(m)
        Wb[np.ix_(m, m)] = A * (1.0 / n - 1.0 / len(m))
    diff = X[:, None] - X[None]
    return (0.5 * np.einsum("ij,ijk,ijl->kl", Ww, diff, diff),
            0.5 * np.einsum("ij,ijk,ijl->kl", Wb, diff, diff))


#: Scatters within this of the float64 definition, relative to their largest entry.
FLOAT32_TOL = 1e-5


@pytest.mark.parametrize("k", [1, 3, 50])
def test_local_scatters_match_their_definition(k):
    rng = np.random.RandomState(0)
    X, y = rng.randn(40, 4), rng.randint(0, 3, 40)
    for mine, brute in zip(local_scatters(X, y, k), _brute_scatters(X, y, k)):
        # the n_c^2 products run in float32 on centred classes (see local_scatters)
        np.testing.assert_allclose(mine, brute, atol=FLOAT32_TOL * np.abs(brute).max())


def test_local_scatters_batch_classes_of_one_size(monkeypatch):
    """Classes of equal sizes go through one batched product, cut into batches of at most
    BLOCK_ENTRIES distances."""
    import skdml.linear._lfda as lfda

    rng = np.random.RandomState(1)
    y = np.repeat(np.arange(7), [5, 5, 5, 3, 3, 8, 2])
    X, y = rng.randn(len(y), 4), rng.permutation(y)
    brute = _brute_scatters(X, y, 3)
    for entries in (1, 50, 1 << 21):
        monkeypatch.setattr(lfda, "BLOCK_ENTRIES", entries)
        for mine, expected in zip(local_scatters(X, y, 3), brute):
            np.testing.assert_allclose(mine, expected, atol=FLOAT32_TOL * np.abs(expected).max())


def test_lfda_solves_the_generalised_eigenproblem_and_embedding_types():
    X, y = noisy_classes(modes=2)
    plain = LFDA(n_components=3, embedding_type="plain").fit(X, y)
    S_w, S_b = local_scatters(X, y, 7)
    V = plain.components_.T
    np.testing.assert_allclose(S_b @ V, S_w @ V * plain.eigenvalues_, rtol=1e-6, atol=1e-6)
    weighted = LFDA(n_components=3).fit(X, y)
    np.testing.assert_allclose(weighted.components_,
                               np.sqrt(plain.eigenvalues_)[:, None] * plain.components_)
    ortho = LFDA(n_components=3, embedding_type="orthonormalized").fit(X, y).components_
    np.testing.assert_allclose(ortho @ ortho.T, np.eye(3), atol=1e-10)


def test_lfda_learns_on_multimodal_classes():
    X, y = noisy_classes(modes=2, seed=1)
    assert knn_score(LFDA(n_components=2), X, y) > knn_score(None, X, y) + 0.2


def test_lfda_refuses_bad_input():
    X, y = noisy_classes()
    with pytest.raises(ValueError, match="at least 2 classes"):
        LFDA().fit(X, np.zeros(len(X)))
    with pytest.raises(ValueError, match="n_components=9 must be <= n_features=8"):
        LFDA(n_components=9).fit(X, y)
    with pytest.raises(ValueError, match="NaN"):
        LFDA().fit(np.full_like(X, np.nan), y)


@needs_metric_learn
def test_lfda_agrees_with_metric_learn_once_its_local_scaling_is_corrected():
    """metric-learn 0.7.0's LFDA differs from Sugiyama's in two places (see
    doc/migrating_from_metric_learn.md):
    ``np.partition(dist, k, axis=0)[:, k]`` takes column k of a column-partitioned matrix, not
    each sample's k-th neighbour distance, and its between-class scatter is ours plus
    ``2 S_w`` (eigenvalues + 2, same eigenvectors). With the first slip patched in its own
    module, its eigenvectors are ours within 1e-6 and its eigenvalues ours plus 2."""
    X, y = noisy_classes(n=60, n_noise=3)
    out = run_metric_learn("""
import metric_learn.lfda as lfda
class _NumPy:
    def __getattr__(self, name):
        return getattr(np, name)
    def partition(self, a, kth, axis=0):
        return np.partition(a, kth, axis=1)  # row-wise: dist is symmetric
lfda.np = _NumPy()
est = metric_learn.LFDA(k=3, n_components=2, embedding_type="plain").fit(inp["X"], inp["y"])
w = metric_learn.LFDA(k=3, n_components=2, embedding_type="weighted").fit(inp["X"], inp["y"])
out["plain"], out["weighted"] = est.components_, w.components_
""", X=X, y=y)
    mine = LFDA(k=3, n_components=2, embedding_type="plain").fit(X, y)
    for a, b in zip(mine.components_, out["plain"]):
        cos = abs(a @ b) / (np.linalg.norm(a) * np.linalg.norm(b))
        assert cos == pytest.approx(1.0, abs=1e-6)
    theirs_vals = (np.linalg.norm(out["weighted"], axis=1)
                   / np.linalg.norm(out["plain"], axis=1)) ** 2
    np.testing.assert_allclose(theirs_vals, mine.eigenvalues_ + 2.0, rtol=1e-6)


@pytest.mark.parametrize("scale", [1e-300, 1e-23, 1e19, 1e300])
def test_lfda_is_scale_free_at_any_input_scale(scale):
    # its float32 products used to underflow (1e-23: eigenvalues 1e266) or overflow (1e19)
    from sklearn.datasets import load_iris
    X, y = load_iris(return_X_y=True)
    ref = LFDA(n_components=2).fit(X, y)
    est = LFDA(n_components=2).fit(X * scale, y)
    # float32 products: a margin for another CPU's rounding (the old code was off by 1e263)
    np.testing.assert_allclose(est.eigenvalues_, ref.eigenvalues_, rtol=1e-4)
    Z, Z_ref = est.transform(X * scale), ref.transform(X)
    np.testing.assert_allclose(Z, Z_ref, rtol=1e-4, atol=1e-6 * np.abs(Z_ref).max())
    plain = LFDA(n_components=2, embedding_type="plain")
    L_ref = plain.fit(X, y).components_
    np.testing.assert_allclose(plain.fit(X * scale, y).components_ * scale, L_ref, rtol=1e-4,
                               atol=1e-5 * np.abs(L_ref).max())


def test_lfda_refuses_a_zero_within_class_scatter_and_constant_input():
    y = np.repeat([0, 1, 2], 5)
    points = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]])[y]  # each class one point
    with pytest.raises(ValueError, match="within-class scatter is 0"):  # was NaN
        LFDA().fit(points, y)
    with pytest.raises(ValueError, match="X is constant"):  # was an all-zero map
        LFDA().fit(np.ones((10, 2)), np.repeat([0, 1], 5))


def test_the_default_ridge_holds_a_scatter_of_deficient_rank():
    # 40 digits, 10 classes, 64 pixels: the float32 scatter's null directions reached -1.7e-7
    # while the ridge added 1.9e-10, so the default failed ("singular") and 1e-6 worked
    X, y = load_digits(return_X_y=True)
    est = LFDA(n_components=5).fit(X[:40], y[:40])
    assert np.all(np.isfinite(est.components_)) and np.all(est.eigenvalues_ > 0)


def test_an_offset_does_not_move_the_metric():
    # the between-class scatter's products of class sums cancelled an offset: wine + 1e8 gave
    # eigenvalues [310, 109] for [58.7, 28.2] and a 3-NN accuracy of 0.65 for 1.0
    from sklearn.datasets import load_wine
    from sklearn.preprocessing import StandardScaler

    X, y = load_wine(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    ref = LFDA(n_components=2).fit(X, y)
    for offset in (1e8, 1e9):
        est = LFDA(n_components=2).fit(X + offset, y)
        np.testing.assert_allclose(est.eigenvalues_, ref.eigenvalues_, rtol=1e-6)
        np.testing.assert_allclose(est.components_, ref.components_, atol=1e-5)


def test_the_ridge_is_relative_to_each_features_own_scatter():
    """Features at 1e-6 and 1e6 (full rank): the default ridge must not swamp the small one.

    Scaled by the mean eigenvalue (about 1e11 here), the 1e-10 ridge was about 10, a
    thousand billion times the small feature's within-class scatter: its Fisher ratio fell
    from 48.4 to 2.7 and its direction was lost (audit 19).
    """
    from scipy.linalg import eigh

    rng = np.random.RandomState(0)
    y = np.repeat([0, 1, 2], 20)
    X = np.c_[y + 0.3 * rng.randn(60), rng.randn(60), rng.randn(60)] * [1e-6, 1e6, 1.0]
    S_w, S_b = _brute_scatters(X, y, 3)
    exact = eigh(S_b, S_w, eigvals_only=True)[::-1]
    np.testing.assert_allclose(LFDA(k=3).fit(X, y).eigenvalues_, exact, rtol=1e-4)
    # and its embedding separates the classes better than the raw features (0.43, where the
    # swamped direction left it)
    assert knn_score(LFDA(k=3), X, y, k=3) > knn_score(None, X, y, k=3) + 0.1


def test_digits_with_round_off_components_still_fit():
    # equilibrating every feature scaled the float32 rounding of PCA's trailing components
    # (constant pixels, spreads ~1e-15) up to unit size: the within-class scatter turned
    # indefinite and PCA -> LFDA on digits raised "singular" (a review of audit 19's fix)
    from sklearn.decomposition import PCA

    X, y = load_digits(return_X_y=True)
    Z = PCA().fit_transform(X)
    lfda = LFDA(n_components=9).fit(Z, y)
    assert np.isfinite(lfda.components_).all() and lfda.eigenvalues_[0] > 10
    assert np.all(np.diff(lfda.eigenvalues_) <= 0)
    # the trailing (round-off) components carry no weight
    assert np.abs(lfda.components_[:, -3:]).max() < 1e-6 * np.abs(lfda.components_).max()
    # a column constant up to one ulp beside wine's features carries no weight
    from sklearn.datasets import load_wine
    Xw, yw = load_wine(return_X_y=True)
    ulp = np.full(len(Xw), 0.3)
    ulp[::2] = 0.1 * 3
    fitted = LFDA(n_components=2).fit(np.c_[Xw, ulp], yw)
    assert np.abs(fitted.components_[:, -1]).max() * 5.6e-17 < 1e-20


@pytest.mark.parametrize("scale", [1e-165, 1.0, 1e194])
def test_features_in_other_units_are_found_at_any_input_scale(scale):
    # the unit gate squared the raw spreads: above 1e154 they overflowed (every column
    # "round-off", with an overflow warning), below 1e-162 they underflowed, and LFDA took
    # the one-unit path with the ridge swamping the small feature (a review of audit 19)
    import warnings

    from sklearn.datasets import load_wine
    from sklearn.preprocessing import StandardScaler

    X, y = load_wine(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    X[:, 0] *= 1e6
    reference = LFDA(n_components=3).fit(X, y).eigenvalues_
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = LFDA(n_components=3).fit(X * scale, y).eigenvalues_
    np.testing.assert_allclose(got, reference, rtol=1e-6)
    assert reference[1] > 100  # the mixed-unit path (the swamped ridge gave 79.4)


def test_rank_deficiency_counts_the_class_means():
    # 20 samples of 4 classes in 18 features: S_w has rank at most 20 - 4 = 16 < 18 even
    # though n_samples > n_features, so the deficient-rank ridge must apply (the float32
    # scatter's null directions are +-1e-7, and a 1e-10 ridge leaves S_w indefinite)
    rng = np.random.RandomState(0)
    y = np.repeat(np.arange(4), 5)
    X = rng.randn(20, 18) + 3.0 * np.eye(18)[y]
    est = LFDA(k=2).fit(X, y)
    assert np.all(np.isfinite(est.components_)) and np.all(np.isfinite(est.eigenvalues_))
    assert np.all(est.eigenvalues_[:-1] >= est.eigenvalues_[1:])
    assert est.eigenvalues_.min() > -1e-6 * est.eigenvalues_.max()


def test_a_sample_whose_kth_neighbour_is_its_duplicate_gets_no_affinity_not_nan():
    # sigma_i = 0 (duplicates): the affinity exp(-0 / 0) is undefined; LFDA sets it to 0
    X, y = noisy_classes(seed=0)
    X2, y2 = np.vstack([X, X[:10]]), np.r_[y, y[:10]]
    S_w, S_b = local_scatters(X2, y2, 1, dtype=np.float64)
    assert np.all(np.isfinite(S_w)) and np.all(np.isfinite(S_b))
    est = LFDA(k=1).fit(X2, y2)
    assert np.all(np.isfinite(est.components_))


@pytest.mark.parametrize("embedding_type", ["weighted", "plain"])
def test_each_direction_has_its_largest_entry_positive(embedding_type):
    # the eigenvectors' signs are arbitrary: LFDA fixes them so that refits (other LAPACK,
    # other threads) give the same embedding
    X, y = noisy_classes(seed=0)
    L = LFDA(n_components=3, embedding_type=embedding_type).fit(X, y).components_
    largest = L[np.arange(len(L)), np.argmax(np.abs(L), axis=1)]
    assert np.all(largest > 0)
