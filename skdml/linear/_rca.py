"""Relevant Component Analysis (Bar-Hillel et al., JMLR 2005): whitening within chunklets."""

from __future__ import annotations

from numbers import Integral

import numpy as np
from scipy.linalg import LinAlgError, eigh, lapack
from sklearn.base import _fit_context
from sklearn.utils import check_random_state, column_or_1d
from sklearn.utils.validation import validate_data

from .._utils import flatten_label_column, transactional_fit
from .._utils._params import StrictInterval, positive_int
from ._base import BaseMahalanobis, check_n_components
from ._classic import check_classic_input, feature_scales, symmetric_eigh

__all__ = ["RCA", "RCA_Supervised"]

#: Eigenvalues of the within-chunk covariance below this fraction of the largest are zero.
RANK_TOL = 1e-10


class RCA(BaseMahalanobis):
    r"""Relevant Component Analysis (RCA), fitted on chunklets.

    A *chunklet* is a group of samples known to share a class (labels
    unknown). RCA centres each chunklet on its mean and whitens the data by
    the covariance :math:`C` of the centred points, so the within-chunklet
    variations, irrelevant to the class, are shrunk: the metric is
    :math:`M = L^\top L = C^{-1}`, with :math:`L = G^{-1}` the inverse of
    the Cholesky factor :math:`C = G G^\top`. With
    ``n_components < n_features`` it first keeps the directions of smallest
    within-chunklet to total variance (the generalised eigenvectors of
    :math:`(C, S_t)`, Bar-Hillel et al. 2005, Sec. 2.4) and whitens them.
    Closed form.

    Parameters
    ----------
    n_components : int, default=None
        Embedding dimension; ``None``: ``n_features``.

    Attributes
    ----------
    components_ : ndarray of shape (n_components, n_features)
    n_features_in_ : int
    feature_names_in_ : ndarray of shape (`n_features_in_`,)
        Defined when ``X`` has feature names that are all strings.

    Notes
    -----
    A singular within-chunklet covariance (fewer chunked samples than
    features, or a constant feature) raises a ``ValueError`` here, where
    metric-learn warns and returns NaN components. metric-learn's map is the
    symmetric :math:`C^{-1/2}` (an eigendecomposition); skdml's Cholesky
    whitening gives the same metric :math:`M` (same distances, same
    neighbours), its embedding rotated.

    References
    ----------
    A. Bar-Hillel, T. Hertz, N. Shental and D. Weinshall. Learning a
    Mahalanobis Metric from Equivalence Constraints. JMLR 6, 2005.

    Examples
    --------
    >>> import numpy as np
    >>> from skdml.linear import RCA
    >>> rng = np.random.RandomState(0)
    >>> X = rng.randn(40, 3) * [1.0, 1.0, 10.0]
    >>> chunks = np.repeat(np.arange(20), 2)  # 20 chunklets of 2 samples
    >>> rca = RCA().fit(X, chunks)
    >>> (np.diag(rca.get_mahalanobis_matrix()) > 0.1).tolist()  # feature 3 shrunk
    [True, True, False]
    """

    _parameter_constraints: dict = {
        "n_components": [positive_int(), None],
    }

    def __init__(self, n_components=None):
        self.n_components = n_components

    @_fit_context(prefer_skip_nested_validation=True)
    @transactional_fit
    def fit(self, X, y):
        """Fit RCA on chunklets.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)
            The chunklet of each sample (any labels; metric-learn calls it
            ``chunks``), -1 for a sample in none.

        Returns
        -------
        self : object
            The fitted estimator.
        """
        X, chunks = validate_data(self, X, flatten_label_column(y), dtype=np.float64,
                                  ensure_min_samples=2)
        self._fit_chunks(X, column_or_1d(chunks))
        return self

    def _fit_chunks(self, X, chunks):
        d = X.shape[1]
        dim = check_n_components(self.n_components, d)
        in_chunk = chunks != -1
        ids, inverse = np.unique(chunks[in_chunk], return_inverse=True)
        counts = np.bincount(inverse, minlength=len(ids))
        if not np.any(counts >= 2):
            raise ValueError("RCA needs a chunklet of at least 2 samples; every chunk has one "
                             "sample (or every sample is -1).")
        # RCA is invariant to one scale per feature (L X and L D^-1 . D X whiten alike): solved
        # with the features at comparable scales, by powers of two (exact: features at unit
        # scale keep their bits), so that features 1e4 and 1e-4 apart are not found singular
        Xc = X[in_chunk]  # only the chunked samples enter RCA
        with np.errstate(over="ignore"):
            scale = feature_scales(Xc.std(axis=0))
        Xc /= scale
        self.components_ = _whitening(Xc, inverse, counts, dim, d) / scale

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.required = True
        return tags


def _whitening(Xc, inverse, counts, dim, d):
    """RCA's map ``L`` (``(dim, d)``) of the chunklets' samples ``Xc`` (chunk ``inverse``):
    ``L C L^T = I``."""
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    sums = np.add.reduceat(Xc[np.argsort(inverse, kind="stable")], starts, axis=0)
    centred = Xc - (sums / counts[:, None])[inverse]
    C = centred.T @ centred / len(Xc)
    if dim < d:
        S_t = np.atleast_2d(np.cov(Xc, rowvar=False))
        try:
            w, A = eigh(C, S_t, subset_by_index=[0, dim - 1])
        except LinAlgError as exc:
            raise ValueError("RCA: the total covariance of the chunked samples is singular; "
                             "reduce the input with PCA first.") from exc
        # A.T @ S_t @ A = I and A.T @ C @ A = diag(w): whitening scales the columns
        _check_rank(w)
        return (A / np.sqrt(w)).T
    return inverse_cholesky_factor((C + C.T) / 2.0)


def _check_rank(w):
    """Refuse a within-chunklet covariance of eigenvalues ``w`` and (numerically) deficient rank."""
    if w.min() <= RANK_TOL * max(w.max(), 1e-300):
        raise ValueError(
            f"RCA: the within-chunklet covariance is singular (rank "
            f"{int(np.sum(w > RANK_TOL * w.max()))} < {len(w)}): add chunked samples, lower "
            "n_components, or reduce the input with PCA first.")


def inverse_cholesky_factor(C):
    """``L = G^{-1}`` with ``C = G G^T`` (Cholesky): a whitening, ``L C L^T = I`` and
    ``L^T L = C^{-1}``; ``ValueError`` when ``C`` is singular (condition number of
    ``1 / RANK_TOL`` or more).

    The condition number ``kappa`` lies between ``tr(C) tr(C^{-1}) / d^2`` and
    ``tr(C) tr(C^{-1})``, where ``tr(C^{-1})`` is the squared Frobenius norm of ``L``:
    when the product is below ``1 / RANK_TOL``, ``C`` is invertible with no
    eigendecomposition; otherwise (or when the factorisation fails) the eigenvalues decide.
    """
    G, info = lapack.dpotrf(C, lower=1, clean=1)
    if info == 0:
        L, info = lapack.dtrtri(G, lower=1)
        if info == 0 and np.trace(C) * np.einsum("ij,ij->", L, L) < 1.0 / RANK_TOL:
            return L
    w, V = symmetric_eigh(C)
    _check_rank(w)
    return L if info == 0 else (V / np.sqrt(w)) @ V.T


class RCA_Supervised(RCA):
    """RCA on chunklets drawn from class labels.

    ``n_chunks`` disjoint chunklets of ``chunk_size`` samples of one class
    each (:meth:`skdml.constraints.Constraints.chunks`), then :class:`RCA`.

    Parameters
    ----------
    n_components : int, default=None
        Embedding dimension; ``None``: ``n_features``.
    n_chunks : int, default=100
        Chunklets to draw (at most what the classes allow).
    chunk_size : int, default=2
        Samples per chunklet.
    random_state : int, RandomState instance or None, default=None
        Draws the chunklets.

    Attributes
    ----------
    components_ : ndarray of shape (n_components, n_features)
    chunks_ : ndarray of shape (n_samples,)
        The chunklet of each training sample (-1: none).
    classes_ : ndarray of shape (n_classes,)
    n_features_in_ : int
    feature_names_in_ : ndarray of shape (`n_features_in_`,)
        Defined when ``X`` has feature names that are all strings.

    Notes
    -----
    The chunklets are drawn as metric-learn 0.7.0 draws them
    (:meth:`skdml.constraints.Constraints.chunks`), so the same integer
    ``random_state`` gives the same chunklets and the same metric. metric-learn
    raises when fewer than ``n_chunks`` chunklets can be formed; skdml draws
    as many as the classes allow (``chunks_`` says which) and raises only
    when none can be formed.

    Examples
    --------
    >>> from sklearn.datasets import load_iris
    >>> from skdml.linear import RCA_Supervised
    >>> X, y = load_iris(return_X_y=True)
    >>> rca = RCA_Supervised(n_chunks=30, chunk_size=3, random_state=0).fit(X, y)
    >>> rca.transform(X).shape, int((rca.chunks_ >= 0).sum())
    ((150, 4), 90)
    """

    _parameter_constraints: dict = {
        **RCA._parameter_constraints,
        "n_chunks": [positive_int()],
        "chunk_size": [StrictInterval(Integral, 2, None, closed="left")],
        "random_state": ["random_state"],
    }

    def __init__(self, n_components=None, n_chunks=100, chunk_size=2, random_state=None):
        super().__init__(n_components=n_components)
        self.n_chunks = n_chunks
        self.chunk_size = chunk_size
        self.random_state = random_state

    @_fit_context(prefer_skip_nested_validation=True)
    @transactional_fit
    def fit(self, X, y):
        """Draw chunklets from the labels and fit RCA.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)
            Class labels.

        Returns
        -------
        self : object
            The fitted estimator.
        """
        from ..constraints import draw_chunks

        X, y, self.classes_ = check_classic_input(self, X, y)
        possible = int(np.sum(np.bincount(y) // self.chunk_size))
        if possible == 0:
            raise ValueError(f"RCA_Supervised: no class has chunk_size={self.chunk_size} "
                             "samples; lower chunk_size.")
        self.chunks_ = draw_chunks(y, np.arange(len(y)), len(y), min(self.n_chunks, possible),
                                   self.chunk_size, check_random_state(self.random_state))
        self._fit_chunks(X, self.chunks_)
        return self
