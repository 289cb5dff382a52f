"""Where the linear learners optimise: input reduction, standardisation, initialisation.

Every linear learner optimises a map ``L`` of the *working space*

.. math::  x_t = P D^{-1} (x / m - \\mu) / s,

where ``m`` is the largest absolute input value (so that nothing overflows or
underflows, whatever the input's scale), ``mu`` the mean, ``D`` the features'
standard deviations when the learner works on standardised features (ECAML's
and JRD's ``standardize``, see :func:`standardizing_pays`; the identity
otherwise), ``P`` an optional PCA projection (orthonormal rows) and ``s`` the
root mean squared norm of the centred data, so that ``mean ||x_t||^2 = 1``.
All of it is computed in float64
(float32 for float32 input, with a float64 mean); the optimisers then work in
float32 on data of unit scale. ``components_`` reports ``L P D^{-1}``:
``transform(x) = (L P D^{-1}) x`` differs from the working-space
embedding ``L x_t`` only by a translation and a positive factor, so it has the
same nearest neighbours, and :meth:`get_mahalanobis_matrix` holds in input
space.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from sklearn.decomposition import PCA
from sklearn.discriminant_analysis import LinearDiscriminantAnalysis
from sklearn.utils import check_random_state

from .._utils import evenly_spaced
from ._base import check_not_constant
from ._validation import SIGNIFICANCE_Z, VALIDATION_KS

__all__ = ["InputSpace", "check_n_reduce", "initial_components", "orthonormal_rows", "polar",
           "qr_retraction", "reduce_input", "standardizing_pays"]


def check_n_reduce(n_reduce, n_components):
    """An int ``n_reduce`` (every learner's one meaning): the PCA reduction's exact dimension.

    Refused below ``n_components``: the input cannot be reduced below the embedding
    (SUML once raised such a value to ``n_components`` where ECAML and JRD refused it).
    """
    if n_reduce < n_components:
        raise ValueError(
            f"n_reduce={n_reduce} is smaller than n_components={n_components}: the input "
            "cannot be reduced below the embedding dimension.")
    return int(n_reduce)


def reduce_input(X, n_dims, random_state=None):
    """Reduce ``X`` to at most ``n_dims`` dimensions with PCA (centred output).

    Parameters
    ----------
    X : ndarray of shape (n_samples, n_features)
    n_dims : int or None
        Target dimension. ``None`` or ``n_dims >= n_features`` means no reduction.
    random_state : int, RandomState or None
        Passed to :class:`~sklearn.decomposition.PCA`.

    Returns
    -------
    X_reduced : ndarray of shape (n_samples, r)
        Centred, projected data (or ``X`` itself when no reduction is done).
    projection : ndarray of shape (r, n_features) or None
        Orthonormal rows ``P`` (``None`` when no reduction is done).

    Examples
    --------
    >>> import numpy as np
    >>> X = np.random.RandomState(0).rand(20, 6)
    >>> Xr, P = reduce_input(X, 3)
    >>> Xr.shape, P.shape
    ((20, 3), (3, 6))
    >>> reduce_input(X, None)[1] is None
    True
    """
    n_samples, n_features = X.shape
    if n_dims is None or n_dims >= n_features:
        return X, None
    n_dims = int(min(n_dims, n_samples, n_features))
    # Exact SVD unless the data are large in both directions: randomized PCA is
    # approximate and, on AT&T (280 x 4096), slower than the exact one.
    solver = "full" if min(X.shape) <= 1000 else "auto"
    # numpy out whatever the user's global output is (sklearn.set_config(transform_output=
    # "pandas") made this a DataFrame, read back as a read-only view under pandas 3)
    pca = PCA(n_components=n_dims, svd_solver=solver, random_state=random_state)
    X_reduced = pca.set_output(transform="default").fit_transform(X)
    return X_reduced.astype(X.dtype, copy=False), pca.components_.astype(X.dtype, copy=False)


#: A feature whose spread is below this fraction of the largest one is divided by that
#: fraction of the largest instead when the features are standardised: a constant feature,
#: or one of round-off, is not stretched to the others' size.
MIN_RELATIVE_SPREAD = 1e-6
#: Training samples the units check reads (leave-one-out k-NN) on up to 256 features; on wider
#: input fewer, so that its cost (rows^2 x features) stays that of 2,000 x 256 (about 0.1 s).
UNITS_CHECK_ROWS = 2000


def _units_check_rows(y, n_features):
    """The rows the units check reads: every class (or evenly spaced classes), rows of each.

    Up to :data:`UNITS_CHECK_ROWS` (fewer on wide input): all rows when they fit,
    else the same number of rows of each class (at least 2, evenly spaced within
    it), from evenly spaced classes when there are too many classes for that.
    Deterministic: no random numbers.
    """
    budget = int(UNITS_CHECK_ROWS * min(1.0, np.sqrt(256.0 / max(n_features, 1))))
    budget = max(budget, 100)
    if len(y) <= budget:
        return np.arange(len(y))
    order = np.argsort(y, kind="stable")
    _, counts = np.unique(y, return_counts=True)
    starts = np.cumsum(counts) - counts
    per_class = max(2, budget // len(counts))
    classes = evenly_spaced(np.arange(len(counts)), max(1, budget // per_class))
    return np.concatenate([order[starts[c]:starts[c] + counts[c]][
        evenly_spaced(np.arange(counts[c]), per_class)] for c in classes])


def feature_spreads(X_c):
    """The standard deviations of the centred ``X_c``'s features, floored (float64).

    Floored at :data:`MIN_RELATIVE_SPREAD` of the largest, and 1 where every
    feature is constant: dividing by them never stretches a constant feature.
    """
    spread = np.sqrt(np.mean(np.square(X_c, dtype=np.float64), axis=0))
    top = float(np.max(spread, initial=0.0))
    if not top > 0:
        return np.ones_like(spread)
    return np.maximum(spread, MIN_RELATIVE_SPREAD * top)


def _loo_knn_hits(Z, y):
    """Per sample, how many of its leave-one-out k-NN votes (k in ``VALIDATION_KS``) it wins
    (``knn_votes``: a tie goes to the smallest label)."""
    from ..metrics import nearest_neighbors
    from ..metrics._neighbors import knn_votes

    k = min(max(VALIDATION_KS), Z.shape[0] - 1)
    neighbours = y[nearest_neighbors(Z, k)]
    ks = [min(kk, k) for kk in VALIDATION_KS]
    return knn_votes(neighbours, y, ks, int(y.max()) + 1).sum(axis=1).astype(np.float64)


def standardizing_pays(X, y):
    """Whether k-NN of the training samples is better on standardised features.

    The choice of ``standardize="auto"`` (ECAML, JRD).

    Features in different units (centimetres beside grams, counts beside ratios) give
    the raw distance to the largest ones, and a gradient method that starts from the
    leading principal axes (ECAML's and JRD's start), whose steps move each feature's
    share of the embedding in proportion to its scale, hardly ever reaches the small
    ones. Dividing each feature by its standard deviation removes the units, but it
    also stretches features that are quiet because they carry little (image borders,
    the trailing principal axes of a PCA-reduced input). So the choice is measured:
    the leave-one-out k-NN accuracy of the training samples (k = 1 and 10, summed;
    at most :data:`UNITS_CHECK_ROWS` of them, fewer on wide input, the same number of
    each class, see :func:`_units_check_rows`) on the raw features and on the
    standardised ones (the k of the early-stopping score,
    ``VALIDATION_KS``); the standardised ones are taken when they win by
    ``SIGNIFICANCE_Z`` (2) standard errors, a paired test over the samples, as the
    class-disjoint guard's. It reads no random numbers.

    It reads every training sample's label, the early-stopping hold-out's too: it
    chooses the space in which the start and every epoch live, so it favours
    neither when the hold-out compares them (a start that reads labels, an
    ``init="lda"``, is fitted on the other rows only: it would favour itself).

    It standardises scikit-learn's wine and breast cancer and the mixed-unit sets of
    ``benchmarks/studies/bench_units.py``, and keeps the raw features of digits, of
    AT&T, COIL-20 and USPS (pixels, and PCA-100 in the closed-set splits), Omniglot and
    the training data of ``bench_stress.py`` and ``bench_linear_unseen.py``
    (``bench_units.py --choices``), whose fits therefore keep their bits.

    Parameters
    ----------
    X : ndarray of shape (n_samples, n_features)
        The validated training input.
    y : ndarray of shape (n_samples,)
        Its class codes, ``0 .. n_classes - 1``.

    Returns
    -------
    bool

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.RandomState(0)
    >>> y = np.repeat([0, 1], 50)
    >>> noise = rng.randn(100)
    >>> standardizing_pays(np.c_[1000 * noise, y + 0.1 * rng.randn(100)], y)  # class: small
    True
    >>> standardizing_pays(np.c_[y + 0.1 * rng.randn(100), 0.01 * noise], y)  # class: large
    False
    """
    y = np.asarray(y)
    rows = _units_check_rows(y, X.shape[1])
    X_s, y_s = np.array(X[rows], dtype=np.float64), y[rows]
    if X_s.shape[0] < 3:
        return False
    peak = float(np.max(np.abs(X_s)))
    X_s /= peak if np.isfinite(peak) and peak > 0 else 1.0
    X_s -= X_s.mean(axis=0)
    spread = feature_spreads(X_s)
    varying = spread[spread > MIN_RELATIVE_SPREAD * spread.max()]
    if varying.max() <= varying.min() * (1 + 1e-6):
        return False  # already on one scale (standardised input): the same neighbours
    gain = _loo_knn_hits(X_s / spread, y_s) - _loo_knn_hits(X_s, y_s)
    error = float(np.std(gain, ddof=1)) / np.sqrt(len(gain))
    # two standard errors, as the class-disjoint guard: on half of a standardised digits set
    # the standardised features won by 2 of 899 samples, noise that moved the fit
    return bool(np.mean(gain) > SIGNIFICANCE_Z * error)


@dataclass
class InputSpace:
    """The map ``x -> P D^-1 (x / m - mu) / s`` to the working space (see the module docstring).

    ``spread`` is ``D``'s diagonal (the features' floored standard deviations, in units
    of ``m``), or None where the features are not standardised.
    """

    peak: float
    mean: np.ndarray
    projection: np.ndarray | None
    scale: float
    spread: np.ndarray | None = None

    @classmethod
    def fit(cls, X, n_dims=None, random_state=None, standardize=False):
        """Fit the map on ``X``; return ``(space, X_t)``.

        ``n_dims`` is the PCA target (``None``: no reduction); ``standardize``
        divides each feature by its standard deviation first (see
        :func:`feature_spreads`). ``X_t`` is float32
        for float32 input (the optimisers work in float32; on 10000 x 4096
        float64 copies cost seconds), float64 otherwise; the mean is always
        accumulated in float64.

        Raises
        ------
        ValueError
            When ``X`` is constant (every sample equal): there is no distance to learn;
            or when its features lie so many orders of magnitude apart that the spread
            vanishes in float64 once divided by the largest value.
        """
        dtype = np.float32 if np.asarray(X).dtype == np.float32 else np.float64
        X = np.asarray(X, dtype=dtype)
        check_not_constant(X)
        peak = float(max(np.max(X), -np.min(X)))
        peak = peak if np.isfinite(peak) and peak > 0 else 1.0
        spread = None
        if standardize:
            # in float64: a feature of a small spread beside a large value (1 + 1e-6 u) is
            # stretched up to 1e6 times, and so would be float32's rounding of x / m
            X = X.astype(np.float64)  # one copy (float32 input: twice its memory)
            X /= peak
            mean = X.mean(axis=0)
            X -= mean  # our own copy; reduce_input leaves it centred
            spread = feature_spreads(X)
            X /= spread
        else:
            X = X / dtype(peak)
            mean = X.mean(axis=0, dtype=np.float64)
        X_red, projection = reduce_input(X, n_dims, random_state)
        if projection is None:
            X_c = X.astype(dtype, copy=False)
            if spread is None:
                X_c -= mean.astype(dtype)  # X is our own copy
        else:
            X_c = np.asarray(X_red, dtype=dtype)
        scale = float(np.sqrt(np.mean(np.einsum("ij,ij->i", X_c, X_c), dtype=np.float64)))
        if not np.isfinite(scale) or scale == 0:
            # the spread underflows once divided by the largest value (features 1e300 apart)
            raise ValueError(
                "X's features lie on scales too far apart for float64 once divided by the "
                f"largest absolute value ({peak:.3g}): the spread of the others vanishes. "
                "Standardise X (e.g. StandardScaler) before fitting.")
        X_c /= dtype(scale)
        return cls(peak, mean, projection, scale, spread), X_c

    @property
    def dim(self):
        """Dimension of the working space."""
        return len(self.mean) if self.projection is None else self.projection.shape[0]

    def transform(self, X):
        """Map raw input to the working space (float64)."""
        X_c = np.asarray(X, dtype=np.float64) / self.peak - self.mean
        if self.spread is not None:
            X_c /= self.spread
        if self.projection is not None:
            X_c = X_c @ self.projection.T
        return X_c / self.scale

    def fold(self, L):
        """``components_`` of a working-space map ``L`` (n_components, dim): ``L P D^-1``."""
        L = np.asarray(L, dtype=np.float64)
        L = L if self.projection is None else L @ self.projection
        return L if self.spread is None else L / self.spread

    def unfold(self, components):
        """A working-space map equivalent to input-space ``components`` (for an init array)."""
        components = np.asarray(components, dtype=np.float64)
        if self.spread is not None:
            components = components * self.spread
        return components if self.projection is None else components @ self.projection.T


def orthonormal_rows(candidates, n_rows, random_state):
    """Gram-Schmidt over candidate rows, completed by random rows, to ``n_rows`` orthonormal rows.

    Rows (nearly) in the span of the accepted ones are skipped, so the result
    keeps the order of preference of ``candidates``.

    Examples
    --------
    >>> import numpy as np
    >>> Q = orthonormal_rows(np.array([[2.0, 0.0, 0.0], [1.0, 1.0, 0.0]]), 3, 0)
    >>> np.allclose(Q @ Q.T, np.eye(3)), np.allclose(Q[0], [1, 0, 0])
    (True, True)
    """
    candidates = np.asarray(candidates, dtype=np.float64).reshape(-1, np.shape(candidates)[-1])
    dim = candidates.shape[1]
    basis = np.zeros((0, dim))
    pool = [candidates]
    rng = check_random_state(random_state)
    for _ in range(4):
        for row in np.concatenate(pool):
            if basis.shape[0] == n_rows:
                return basis
            norm0 = np.linalg.norm(row)
            if norm0 == 0:
                continue
            for _ in range(2):  # twice is enough (Kahan)
                row = row - basis.T @ (basis @ row)
            norm = np.linalg.norm(row)
            if norm > 1e-8 * max(norm0, 1.0):
                basis = np.vstack([basis, row / norm])
        pool = [rng.standard_normal((n_rows, dim))]
    return basis


def qr_retraction(L):
    """Map ``L`` (k, r) to the nearest-by-QR matrix with orthonormal rows (signs fixed)."""
    Q, R = torch.linalg.qr(L.T)
    signs = torch.sign(torch.diagonal(R))
    signs = torch.where(signs == 0, torch.ones_like(signs), signs)
    return (Q * signs).T


def polar(A):
    """Nearest matrix with orthonormal rows (the polar factor ``U V^T``)."""
    U, _, Vt = torch.linalg.svd(torch.as_tensor(A, dtype=torch.float64), full_matrices=False)
    return (U @ Vt).numpy()


#: Exact principal axes up to this many samples or dimensions; above it, when few axes are
#: wanted (at most a quarter), a randomised SVD (Halko et al.) finds them in a few passes
#: over the data. On 10000 x 4096 the exact (4096, 4096) eigendecomposition took 24-99 s on
#: two cores, the randomised one about a second.
EXACT_PCA_MAX_DIM = 1000


def _principal_rows(X_t, n_components, projection, random_state=None):
    """The ``n_components`` leading principal axes of the centred ``X_t``, orthonormal rows."""
    n_samples, dim = X_t.shape
    if projection is not None:  # already in decreasing-variance PCA coordinates
        return np.eye(n_components, dim)
    if min(n_samples, dim) > EXACT_PCA_MAX_DIM and 4 * n_components <= min(n_samples, dim):
        from sklearn.utils.extmath import randomized_svd

        _, _, Vt = randomized_svd(np.asarray(X_t, dtype=np.float32), n_components, n_iter=4,
                                  random_state=random_state)
        Q, R = np.linalg.qr(np.asarray(Vt, dtype=np.float64).T)  # float32 round-off out
        return (Q * np.where(np.diag(R) < 0, -1.0, 1.0)).T
    # float32 for the large ones (a start needs no float64 axes; 3-4x faster)
    dtype = torch.float32 if min(n_samples, dim) > EXACT_PCA_MAX_DIM else torch.float64
    X_t = torch.as_tensor(X_t, dtype=dtype)
    if dim <= n_samples:  # eigenvectors of the (d, d) scatter: cheaper than an SVD
        _, eigvec = torch.linalg.eigh(X_t.T @ X_t)
        rows = eigvec.flip(1)[:, :n_components].T
    else:
        rows = torch.linalg.svd(X_t, full_matrices=False)[2][:n_components]
    rows = rows.to(torch.float64)
    return rows.numpy() if dtype == torch.float64 else torch.linalg.qr(rows.T)[0].T.numpy()


def initial_components(init, X_t, y, n_components, space, manifold, random_state):
    """The starting ``L`` (n_components, dim) in the working space.

    Parameters
    ----------
    init : {"pca", "lda", "identity", "random"} or ndarray
        ``"pca"``: leading principal axes; ``"lda"``: the discriminant
        directions completed by principal axes; ``"identity"``: the first
        axes; ``"random"``: a random matrix; an array of shape
        (n_components, n_features) in input space (checked by the caller).
    X_t : ndarray of shape (n_samples, dim)
        Working-space data.
    y : ndarray or None
        Encoded labels (``"lda"`` only).
    n_components : int
    space : InputSpace
    manifold : {"euclidean", "stiefel"}
        ``"stiefel"`` projects the start onto orthonormal rows.
    random_state : numpy.random.RandomState
    """
    dim = X_t.shape[1]
    stiefel = manifold == "stiefel"
    if isinstance(init, np.ndarray):
        L0 = space.unfold(init)
        return polar(L0) if stiefel else L0
    if init == "identity":
        return np.eye(n_components, dim)
    if init == "random":
        L0 = random_state.standard_normal((n_components, dim))
        return polar(L0) if stiefel else L0 / np.sqrt(dim)
    pca_rows = _principal_rows(X_t, n_components, space.projection, random_state)
    if init == "pca":
        if pca_rows.shape[0] == n_components:  # orthonormal already: no O(k^2 d) Gram-Schmidt
            return pca_rows
        return orthonormal_rows(pca_rows, n_components, random_state)
    n_lda = min(n_components, len(np.unique(y)) - 1, dim)
    lda = LinearDiscriminantAnalysis(n_components=n_lda, solver="svd").fit(X_t, y)
    return orthonormal_rows(np.vstack([lda.scalings_.T[:n_lda], pca_rows]), n_components,
                            random_state)
