"""The Mahalanobis base shared by every linear metric learner in skdml.

A learner fits ``components_`` ``L`` of shape (n_components, n_features). The
learned distance is ``d(x, x') = ||L (x - x')||``, i.e. the Mahalanobis distance
with matrix ``M = L^T L``.
"""

from __future__ import annotations

import numbers
from abc import abstractmethod

import numpy as np
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.utils import check_array
from sklearn.utils.validation import check_is_fitted

from .._utils import evenly_spaced, validate_fitted_data, warn_user

__all__ = ["BaseMahalanobis", "MahalanobisDistance", "check_init_array", "check_n_components",
           "check_not_constant", "warn_if_orthogonal_is_euclidean", "warn_if_outlying_rows"]


class MahalanobisDistance:
    """Picklable callable ``metric(u, v) = ||L (u - v)||`` for scikit-learn neighbors.

    Parameters
    ----------
    components : ndarray of shape (n_components, n_features)
        The linear map ``L``.

    Examples
    --------
    >>> import numpy as np
    >>> metric = MahalanobisDistance(np.diag([2.0, 0.0]))
    >>> float(metric(np.array([0.0, 0.0]), np.array([1.0, 5.0])))
    2.0
    """

    def __init__(self, components):
        self.components = np.asarray(components, dtype=np.float64)

    def __call__(self, u, v):
        u = np.asarray(u, dtype=np.float64).ravel()
        v = np.asarray(v, dtype=np.float64).ravel()
        if u.shape != v.shape or u.shape[0] != self.components.shape[1]:
            raise ValueError(
                f"The metric compares two samples of {self.components.shape[1]} features; got "
                f"shapes {np.shape(u)} and {np.shape(v)}.")
        return float(mapped_distances(u[None, :], v[None, :], self.components)[0])


def _row_norms(Z):
    """Euclidean norm of each row, without overflow or underflow in the squares."""
    peak = np.max(np.abs(Z), axis=1, initial=0.0)
    safe = np.where(peak > 0, peak, 1.0)
    return peak * np.sqrt(np.einsum("ij,ij->i", Z / safe[:, None], Z / safe[:, None]))


#: Bytes of one block of pair differences in :func:`mapped_distances`.
_PAIR_BLOCK_BYTES = 16 * 2**20


def mapped_distances(A, B, components):
    """``||L (a - b)||`` for each row pair of ``A`` and ``B`` (``L`` = ``components``).

    Finite whenever the answer is: where ``a - b`` overflows (1e308 and -1e308), that
    pair is computed from ``a`` and ``b`` scaled by a power of two (exact), and scaled
    back; other pairs are computed as they are.
    """
    # in blocks of rows: the temporaries (differences, their images) stay a few MiB
    step = max(1, _PAIR_BLOCK_BYTES // (8 * max(A.shape[1], components.shape[0], 1)))
    out = np.empty(A.shape[0])
    for start in range(0, A.shape[0], step):
        a, b = A[start:start + step], B[start:start + step]
        with np.errstate(over="ignore", invalid="ignore"):  # the overflowing pairs are redone
            D = a - b
            part = out[start:start + step]  # a view: the overflowing pairs are redone in it
            part[...] = _row_norms(D @ components.T)
        bad = ~np.all(np.isfinite(D), axis=1)
        if bad.any():
            peak = np.maximum(np.abs(a[bad]).max(axis=1), np.abs(b[bad]).max(axis=1))
            scale = np.exp2(np.floor(np.log2(peak)))[:, None]
            part[bad] = _row_norms((a[bad] / scale - b[bad] / scale) @ components.T) * scale[:, 0]
    return out


#: The largest embedding dimension ``n_components=None`` gives a linear learner.
DEFAULT_MAX_COMPONENTS = 128


def check_n_components(n_components, n_features, n_samples=None):
    """Resolve ``n_components`` and refuse impossible values.

    ``None`` means ``n_features``, or, when ``n_samples`` is given (a
    learner's default), ``min(n_features, n_samples, DEFAULT_MAX_COMPONENTS)``:
    a linear map of ``n_samples`` points has at most that many useful
    directions (as for :class:`~sklearn.decomposition.PCA`), and a step of
    the learners costs O(n_features x n_components), so a default of 4096
    components on 4096 pixels took minutes where 128 (the deep learner's
    default embedding size too) takes seconds.

    Parameters
    ----------
    n_components : int or None
        The requested embedding dimension.
    n_features : int
        Features of the input.
    n_samples : int, default=None
        Training samples, for the learners' default (``n_components=None``).

    Returns
    -------
    n_components : int
        The resolved dimension.

    Raises
    ------
    ValueError
        When ``n_components`` is not a positive integer or exceeds ``n_features``.

    Examples
    --------
    >>> check_n_components(None, 64, n_samples=280)
    64
    >>> check_n_components(None, 4096, n_samples=100)
    100
    >>> check_n_components(None, 4096, n_samples=10000)
    128
    >>> check_n_components(0, 5)
    Traceback (most recent call last):
    ...
    ValueError: n_components=0 must be a positive integer.
    """
    if n_components is None:
        return n_features if n_samples is None else min(n_features, n_samples,
                                                        DEFAULT_MAX_COMPONENTS)
    if isinstance(n_components, bool) or not isinstance(n_components, numbers.Integral) \
            or n_components < 1:
        raise ValueError(f"n_components={n_components!r} must be a positive integer.")
    if n_components > n_features:
        raise ValueError(
            f"n_components={n_components} must be <= n_features={n_features}: a metric "
            "learner cannot learn more independent directions than the input has."
        )
    return int(n_components)


def check_not_constant(X, learner=None):
    """Refuse an ``X`` whose samples are all equal: there is no distance to learn.

    The one test of the learners that read ``X`` itself (the pair learners test
    their pairs instead): every column's samples equal, bit for bit. Not a
    threshold on the spread relative to the largest value: a constant column of
    1e13 beside iris's features leaves them a relative spread of 1e-13, a real
    one that float64 holds exactly enough.

    Parameters
    ----------
    X : ndarray of shape (n_samples, n_features)
        The validated input.
    learner : str, default=None
        The learner's name, to start the message with.

    Raises
    ------
    ValueError
        When ``X`` is empty or constant.

    Examples
    --------
    >>> import numpy as np
    >>> check_not_constant(np.eye(3))
    >>> check_not_constant(np.ones((4, 2)), "LMNN")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: LMNN: X is constant (all samples are equal); there is no distance ...
    """
    if X.size == 0 or not np.any(np.ptp(X, axis=0) > 0):
        prefix = f"{learner}: " if learner else ""
        raise ValueError(f"{prefix}X is constant (all samples are equal); there is no "
                         "distance between samples to learn.")


#: A row this many times farther from the median than the median row is said to dominate.
OUTLIER_RATIO = 1e3
#: The centre is the coordinate-wise median of at most this many rows, evenly spaced: a
#: handful of outlying rows cannot move it, and the fits of milliseconds (RCA, LFDA) do not
#: spend a third of their time on it (the median of every row cost 1.3 ms on COIL-20's
#: 1,008 x 100).
CENTRE_ROWS = 256


def warn_if_outlying_rows(X, learner):
    """Warn when one row of ``X`` lies :data:`OUTLIER_RATIO` times farther out than most.

    The learners scale their working space by the data's peak and fit squared
    distances, so one such row sets the scale and the objective: wine with one
    row at 1e3 fell from a 3-NN accuracy of 1.0 to 0.74 with LMNN and 0.70 with
    LFDA. Distances from the coordinate-wise median (of :data:`CENTRE_ROWS` rows), read
    in blocks of rows.
    """
    n = X.shape[0]
    if n < 3:
        return
    centre = np.median(np.asarray(X[evenly_spaced(np.arange(n), CENTRE_ROWS)],
                                  dtype=np.float64), axis=0)
    dist = np.empty(n)
    step = max(1, 2**22 // max(X.shape[1], 1))
    with np.errstate(over="ignore", invalid="ignore"):
        for start in range(0, n, step):
            part = np.asarray(X[start:start + step], dtype=np.float64) - centre
            # einsum: np.linalg.norm(axis=1) took 1 ms on 1,008 x 100, twelve times longer
            dist[start:start + step] = np.sqrt(np.einsum("ij,ij->i", part, part))
        typical = float(np.median(dist))
        if not (np.isfinite(typical) and typical > 0):
            return
        worst = int(np.argmax(dist))
        ratio = dist[worst] / typical
        n_far = int(np.sum(dist > OUTLIER_RATIO * typical))
    # a handful of rows only: many rows that far out are a distant group (a class), not outliers
    if ratio > OUTLIER_RATIO and n_far <= max(3, n // 100):
        warn_user(f"{learner}: {n_far} row(s) of X (row {worst}: {ratio:.3g} times) lie over "
                  f"{OUTLIER_RATIO:g} times farther from the median than the median row does, "
                  "so they dominate the scale and the learned metric. Remove outliers, or "
                  "scale X robustly (e.g. sklearn's RobustScaler or QuantileTransformer) first.")


def warn_if_orthogonal_is_euclidean(name, manifold, n_components, dim):
    """Warn that an orthonormal ``L`` of full width learns nothing: ``|Lx|`` is ``|x|``."""
    if manifold == "stiefel" and n_components >= dim:
        warn_user(
            f"{name}: with manifold='stiefel' and n_components={n_components} equal to the "
            "input dimension, L is orthogonal and the learned distance is the Euclidean one "
            "whatever the objective; choose n_components < n_features or "
            "manifold='euclidean'.", UserWarning)


def check_init_array(init, n_features, n_components=None):
    """A user's ``init`` map as float64 ``(n_components, n_features)``, or a clear error.

    Refused: another shape (or a row count other than ``n_components``, when
    given), NaN or infinity, and linearly dependent rows (an all-zero matrix
    among them): a gradient cannot separate again the directions such a start
    collapses, so the fit would return a collapsed or zero map.

    Examples
    --------
    >>> check_init_array(np.eye(2), 2).shape
    (2, 2)
    >>> check_init_array(np.zeros((2, 2)), 2)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: The init array has rank 0 < 2 rows (e.g. all zeros): ...
    """
    init = np.asarray(init, dtype=np.float64)
    if init.ndim != 2 or init.shape[1] != n_features:
        raise ValueError(
            f"The init array must have shape (n_components, n_features) = "
            f"(n_components, {n_features}); got shape {init.shape}.")
    if n_components is not None and init.shape[0] != n_components:
        raise ValueError(f"The init array has {init.shape[0]} rows but n_components="
                         f"{n_components}; they must agree.")
    if not np.all(np.isfinite(init)):
        raise ValueError("The init array contains NaN or infinity.")
    rank = np.linalg.matrix_rank(init)
    if rank < init.shape[0]:
        raise ValueError(
            f"The init array has rank {rank} < {init.shape[0]} rows "
            "(e.g. all zeros): its embedding collapses directions that no gradient can "
            "separate again. Pass linearly independent rows.")
    return init.copy()


class BaseMahalanobis(ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator):
    """Base class for linear (Mahalanobis) metric learners.

    Subclasses implement ``fit`` and set ``components_`` of shape
    (n_components, n_features), plus ``n_features_in_`` through
    ``validate_data``. Everything else (transform, distances, metric callables,
    feature names, ``set_output``) lives here.

    Examples
    --------
    >>> import numpy as np
    >>> from skdml.linear import BaseMahalanobis
    >>> from sklearn.utils.validation import validate_data
    >>> class Scale(BaseMahalanobis):
    ...     def fit(self, X, y=None):
    ...         X = validate_data(self, X)
    ...         self.components_ = 2.0 * np.eye(X.shape[1])
    ...         return self
    >>> X = np.array([[0.0, 0.0], [3.0, 4.0]])
    >>> est = Scale().fit(X)
    >>> est.transform(X)
    array([[0., 0.],
           [6., 8.]])
    >>> est.pair_distance(X[None, :, :])
    array([10.])
    >>> est.get_feature_names_out()
    array(['scale0', 'scale1'], dtype=object)
    """

    @abstractmethod
    def fit(self, X, y=None):
        """Fit the metric; subclasses set ``components_``."""

    @property
    def _n_features_out(self):
        return self.components_.shape[0]

    def transform(self, X):
        """Embed ``X`` with the learned linear map: ``X @ components_.T``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        X_embedded : ndarray of shape (n_samples, n_components)
        """
        check_is_fitted(self)
        X = validate_fitted_data(self, X, dtype=[np.float64, np.float32])
        with np.errstate(over="ignore", invalid="ignore"):
            Z = X @ self.components_.T.astype(X.dtype, copy=False)
        if not np.all(np.isfinite(Z)):
            if not np.all(np.isfinite(self.components_)):
                raise ValueError(f"{type(self).__name__}.transform: components_ is not finite "
                                 "(the model was modified or corrupted); refit it.")
            bad = int(np.sum(~np.all(np.isfinite(Z), axis=1)))
            advice = ("pass X as float64, whose range is wider" if X.dtype == np.float32 else
                      "rescale X (the rows lie beyond float64's range once mapped)")
            raise ValueError(
                f"{type(self).__name__}.transform: the embedding of {bad} row(s) of X overflows "
                f"{X.dtype.name} (|X @ components_.T| past {np.finfo(X.dtype).max:.1e}); "
                f"{advice}.")
        return Z

    def get_mahalanobis_matrix(self):
        """Return ``M = components_.T @ components_`` of shape (n_features, n_features)."""
        check_is_fitted(self)
        return self.components_.T @ self.components_

    def _check_pairs(self, pairs):
        check_is_fitted(self)
        if np.ndim(pairs) != 3:
            raise ValueError(
                f"pairs must have shape (n_pairs, 2, n_features); got an array of "
                f"{np.ndim(pairs)} dimensions (shape {np.shape(pairs)}).")
        pairs = check_array(pairs, allow_nd=True, ensure_2d=False, dtype=np.float64,
                            input_name="pairs")
        if pairs.ndim != 3 or pairs.shape[1] != 2:
            raise ValueError(
                f"pairs must have shape (n_pairs, 2, n_features); got shape {pairs.shape}."
            )
        if pairs.shape[2] != self.n_features_in_:
            raise ValueError(
                f"pairs have {pairs.shape[2]} features, but {type(self).__name__} was fitted "
                f"with {self.n_features_in_} features."
            )
        return pairs

    def pair_distance(self, pairs):
        """Learned distance ``||L (x - x')||`` for each pair.

        Parameters
        ----------
        pairs : array-like of shape (n_pairs, 2, n_features)

        Returns
        -------
        distances : ndarray of shape (n_pairs,)
        """
        pairs = self._check_pairs(pairs)
        return mapped_distances(pairs[:, 0], pairs[:, 1], self.components_)

    def pair_score(self, pairs):
        """Similarity score of each pair: minus :meth:`pair_distance` (higher is more similar)."""
        return -self.pair_distance(pairs)

    def get_metric(self):
        """Return a picklable callable ``metric(u, v)`` giving the learned distance.

        ``u`` and ``v`` are two samples of shape ``(n_features,)`` or
        ``(1, n_features)``. The callable works anywhere scikit-learn accepts a
        ``metric=`` callable, but scikit-learn then calls it from Python once per
        pair, which is slow. Two routes give the same distances at compiled speed:

        * ``make_pipeline(est, KNeighborsClassifier())`` embeds once and uses the
          Euclidean distance in the embedding (fastest when ``n_components`` is
          smaller than ``n_features``);
        * ``KNeighborsClassifier(metric="mahalanobis", metric_params={"VI": M},
          algorithm="brute")`` with ``M = est.get_mahalanobis_matrix()`` keeps the
          input space (about 6.5x faster than the callable on AT&T faces, with
          identical predictions).

        Returns
        -------
        metric : MahalanobisDistance
            Callable ``metric(u, v) = ||L (u - v)||`` with ``L = components_``.

        Examples
        --------
        >>> from sklearn.datasets import load_iris
        >>> from sklearn.neighbors import KNeighborsClassifier
        >>> from skdml import ECAML
        >>> X, y = load_iris(return_X_y=True)
        >>> est = ECAML(n_components=2, max_iter=5, random_state=0).fit(X, y)
        >>> slow = KNeighborsClassifier(metric=est.get_metric()).fit(X, y)
        >>> fast = KNeighborsClassifier(
        ...     metric="mahalanobis", metric_params={"VI": est.get_mahalanobis_matrix()},
        ...     algorithm="brute").fit(X, y)
        >>> bool((slow.predict(X) == fast.predict(X)).all())
        True
        """
        check_is_fitted(self)
        return MahalanobisDistance(self.components_)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.transformer_tags.preserves_dtype = ["float64", "float32"]
        return tags
