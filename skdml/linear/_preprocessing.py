"""Where the linear learners optimise: input reduction, standardisation, initialisation.

Every linear learner optimises a map ``L`` of the *working space*

.. math::  x_t = P (x / m - \\mu) / s,

where ``m`` is the largest absolute input value (so that nothing overflows or
underflows, whatever the input's scale), ``mu`` the mean, ``P`` an optional
PCA projection (orthonormal rows) and ``s`` the root mean squared norm of the
centred data, so that ``mean ||x_t||^2 = 1``. All of it is computed in float64;
the optimisers then work in float32 on data of unit scale. ``components_``
reports ``L P``: ``transform(x) = (L P) x`` differs from the working-space
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

__all__ = ["InputSpace", "initial_components", "orthonormal_rows", "polar", "qr_retraction",
           "reduce_input"]


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
    pca = PCA(n_components=n_dims, svd_solver=solver, random_state=random_state)
    X_reduced = pca.fit_transform(X)
    return X_reduced.astype(X.dtype, copy=False), pca.components_.astype(X.dtype, copy=False)


@dataclass
class InputSpace:
    """The map ``x -> P (x / m - mu) / s`` to the working space (see the module docstring)."""

    peak: float
    mean: np.ndarray
    projection: np.ndarray | None
    scale: float

    @classmethod
    def fit(cls, X, n_dims=None, random_state=None):
        """Fit the map on ``X``; return ``(space, X_t)`` with ``X_t`` in float64.

        ``n_dims`` is the PCA target (``None``: no reduction).

        Raises
        ------
        ValueError
            When ``X`` is constant (every sample equal): there is no distance to learn.
        """
        X = np.asarray(X, dtype=np.float64)
        peak = float(np.max(np.abs(X))) if X.size else 0.0
        peak = peak if np.isfinite(peak) and peak > 0 else 1.0
        X = X / peak
        mean = X.mean(axis=0)
        X_red, projection = reduce_input(X, n_dims, random_state)
        X_c = X - mean if projection is None else np.asarray(X_red, dtype=np.float64)
        scale = float(np.sqrt(np.mean(np.sum(X_c * X_c, axis=1))))
        if not np.isfinite(scale) or scale <= 1e-12:
            raise ValueError(
                "X is constant (all samples are equal, or differ only below float64 "
                "precision): there is no distance between samples to learn.")
        return cls(peak, mean, projection, scale), X_c / scale

    @property
    def dim(self):
        """Dimension of the working space."""
        return len(self.mean) if self.projection is None else self.projection.shape[0]

    def transform(self, X):
        """Map raw input to the working space (float64)."""
        X_c = np.asarray(X, dtype=np.float64) / self.peak - self.mean
        if self.projection is not None:
            X_c = X_c @ self.projection.T
        return X_c / self.scale

    def fold(self, L):
        """``components_`` of a working-space map ``L`` (n_components, dim): ``L P``."""
        L = np.asarray(L, dtype=np.float64)
        return L if self.projection is None else L @ self.projection

    def unfold(self, components):
        """A working-space map equivalent to input-space ``components`` (for an init array)."""
        components = np.asarray(components, dtype=np.float64)
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


def _principal_rows(X_t, n_components, projection):
    dim = X_t.shape[1]
    if projection is not None:  # already in decreasing-variance PCA coordinates
        return np.eye(n_components, dim)
    X_t = torch.as_tensor(X_t, dtype=torch.float64)
    if dim <= X_t.shape[0]:  # eigenvectors of the (d, d) scatter: cheaper than an SVD
        _, eigvec = torch.linalg.eigh(X_t.T @ X_t)
        return eigvec.flip(1)[:, :n_components].T.numpy()
    _, _, Vt = torch.linalg.svd(X_t, full_matrices=False)
    return Vt[:n_components].numpy()


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
    pca_rows = _principal_rows(X_t, n_components, space.projection)
    if init == "pca":
        return orthonormal_rows(pca_rows, n_components, random_state)
    n_lda = min(n_components, len(np.unique(y)) - 1, dim)
    lda = LinearDiscriminantAnalysis(n_components=n_lda, solver="svd").fit(X_t, y)
    return orthonormal_rows(np.vstack([lda.scalings_.T[:n_lda], pca_rows]), n_components,
                            random_state)
