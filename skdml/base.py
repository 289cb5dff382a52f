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
from sklearn.decomposition import PCA
from sklearn.utils import check_array
from sklearn.utils.validation import check_is_fitted, validate_data

__all__ = ["BaseMahalanobis", "MahalanobisDistance", "check_n_components", "reduce_input"]


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
        diff = np.asarray(u, dtype=np.float64) - np.asarray(v, dtype=np.float64)
        return float(np.sqrt(np.sum((self.components @ diff) ** 2)))


def check_n_components(n_components, n_features, n_samples=None):
    """Resolve ``n_components`` (``None`` means ``n_features``) and refuse impossible values."""
    if n_components is None:
        return n_features
    if n_components > n_features:
        raise ValueError(
            f"n_components={n_components} must be <= n_features={n_features}: a metric "
            "learner cannot learn more independent directions than the input has."
        )
    return int(n_components)


def reduce_input(X, n_dims, random_state=None):
    """Reduce ``X`` to at most ``n_dims`` dimensions with PCA before optimising.

    The optimisers of SUML, ECAML and JRD cost O(d^2)-O(d^3) in the input
    dimension. Like scikit-learn's NCA with ``init="pca"``, we reduce the input
    first and fold the reduction back into ``components_``: a learner that
    finds ``L_r`` in the reduced space reports ``components_ = L_r @ P``, so that
    ``transform`` stays one linear map of the raw input and
    ``get_mahalanobis_matrix()`` holds in input space.

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
    pca = PCA(n_components=n_dims, svd_solver=solver, random_state=random_state)
    X_reduced = pca.fit_transform(X)
    return X_reduced.astype(X.dtype, copy=False), pca.components_.astype(X.dtype, copy=False)


class BaseMahalanobis(ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator):
    """Base class for linear (Mahalanobis) metric learners.

    Subclasses implement ``fit`` and set ``components_`` of shape
    (n_components, n_features), plus ``n_features_in_`` through
    ``validate_data``. Everything else (transform, distances, metric callables,
    feature names, ``set_output``) lives here.

    Examples
    --------
    >>> import numpy as np
    >>> from skdml.base import BaseMahalanobis
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
        X = validate_data(self, X, reset=False, dtype=[np.float64, np.float32])
        return X @ self.components_.T.astype(X.dtype, copy=False)

    def get_mahalanobis_matrix(self):
        """Return ``M = components_.T @ components_`` of shape (n_features, n_features)."""
        check_is_fitted(self)
        return self.components_.T @ self.components_

    def _check_pairs(self, pairs):
        check_is_fitted(self)
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
        diff = (pairs[:, 0] - pairs[:, 1]) @ self.components_.T
        return np.sqrt(np.einsum("ij,ij->i", diff, diff))

    def pair_score(self, pairs):
        """Similarity score of each pair: minus :meth:`pair_distance` (higher is more similar)."""
        return -self.pair_distance(pairs)

    def get_metric(self):
        """Return a picklable callable ``metric(u, v)`` giving the learned distance.

        Usable as ``KNeighborsClassifier(metric=est.get_metric())``. For speed,
        prefer ``make_pipeline(est, KNeighborsClassifier())``, which embeds once
        and uses Euclidean distance in the embedding: the distances are the same.
        """
        check_is_fitted(self)
        return MahalanobisDistance(self.components_)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.transformer_tags.preserves_dtype = ["float64", "float32"]
        return tags
