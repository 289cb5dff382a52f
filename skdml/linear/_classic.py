"""Helpers shared by the classic learners (ITML, LSML, ... : metric-learn's catalogue).

- :func:`components_from_metric`: ``L`` with ``L.T @ L = M`` for a PSD matrix ``M``;
- :func:`prior_metric`: a Mahalanobis matrix from ``"identity"``, ``"covariance"``,
  ``"random"`` or a user's matrix (ITML's prior, LSML's prior and start);
- :func:`supervised_pairs`: labelled pairs drawn from class labels (the ``*_Supervised``
  learners);
- :func:`initial_map`: the start ``L`` of the learners that optimise a map (LMNN, MLKR)
  from ``init``;
- :func:`check_classic_input`: the supervised input checks, without the
  "two samples a class" rule of the Adam learners where a learner does not need it;
- :class:`SupervisedMixin`: the ``fit(X, y)`` of the ``*_Supervised`` learners, and
  :class:`SupervisedPairsMixin`, its form for the pair learners.
"""

from __future__ import annotations

import numpy as np
from scipy.linalg import eigh
from sklearn.base import _fit_context
from sklearn.datasets import make_spd_matrix
from sklearn.decomposition import PCA
from sklearn.discriminant_analysis import LinearDiscriminantAnalysis
from sklearn.preprocessing import LabelEncoder
from sklearn.utils import check_array, check_random_state
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import validate_data

from .._utils import (check_label_input, check_orderable_labels, plain_labels, transactional_fit,
                      warn_user)
from .._utils._params import positive_int
from ._base import check_init_array, warn_if_outlying_rows

__all__ = ["SupervisedMixin", "SupervisedPairsMixin", "check_classic_input",
           "components_from_metric", "initial_map", "prior_metric", "supervised_pairs",
           "unique_points"]

#: Eigenvalues below this fraction of the largest count as zero (definiteness checks).
RANK_TOL = 1e-10


def symmetric_eigh(M):
    """``np.linalg.eigh(M)``, or LAPACK's ``syevr`` where its ``syevd`` does not converge.

    ``syevd`` failed ("Eigenvalues did not converge") on a finite, well-scaled 64 x 64
    matrix of MMC's projection (standardised digits, whose constant pixels leave
    round-off eigenvalues) that ``syevr`` decomposes. A matrix neither decomposes is
    refused with a ``ValueError``.
    """
    try:
        return np.linalg.eigh(M)
    except np.linalg.LinAlgError:
        try:
            return eigh(M, driver="evr")
        except (np.linalg.LinAlgError, ValueError) as exc:
            raise ValueError(f"The eigendecomposition of a {M.shape[0]} x {M.shape[1]} "
                             "symmetric matrix did not converge (is the input finite and "
                             "of a sensible scale?).") from exc


def components_from_metric(M):
    """``L`` of shape (d, d) with ``L.T @ L == M`` (``M`` symmetric PSD; round-off clipped).

    ``L = diag(sqrt(w)) V.T`` from ``M = V diag(w) V.T``: rows ordered by
    decreasing eigenvalue, so ``L[:k]`` is the best rank-k part.

    Examples
    --------
    >>> M = np.array([[2.0, 1.0], [1.0, 2.0]])
    >>> L = components_from_metric(M)
    >>> bool(np.allclose(L.T @ L, M))
    True
    """
    M = (M + M.T) / 2.0
    w, V = symmetric_eigh(M)
    if w.min(initial=0.0) < -1e-8 * max(abs(w).max(initial=0.0), 1.0):
        raise ValueError(f"The learned matrix is not positive semi-definite (smallest "
                         f"eigenvalue {w.min():.3g}).")
    order = np.argsort(w)[::-1]
    return np.sqrt(np.clip(w[order], 0.0, None))[:, None] * V[:, order].T


def unique_points(tuples, max_points=None, random_state=None):
    """The distinct samples of an array of tuples; at most ``max_points`` of them (drawn), if set.

    Every one by default: the covariance a ``"covariance"`` prior inverts is that of
    all the tuples' samples (metric-learn's; a subsample made it depend on the seed).
    """
    rows = np.ascontiguousarray(tuples.reshape(-1, tuples.shape[-1]))
    # rows compared as raw bytes: one sort of opaque keys, not numpy's field-by-field one
    keys = rows.view(np.dtype((np.void, rows.dtype.itemsize * rows.shape[1]))).ravel()
    X = rows[np.unique(keys, return_index=True)[1]]
    if max_points is not None and len(X) > max_points:
        X = X[check_random_state(random_state).choice(len(X), max_points, replace=False)]
    return X


#: Features whose spreads differ by this factor or more are in other units (LMNN optimises
#: them in common units, LFDA equilibrates their scatters).
SPREAD_RATIO = 2.0 ** 10
#: A spread below this fraction of the largest is round-off of a constant feature (float64's
#: rounding of values of the largest's size: PCA's trailing components of constant pixels,
#: 0.1 * 3 beside 0.3), not a feature in a unit of its own (1e-6 beside 1e6 is 2**-40).
ROUND_OFF = 2.0 ** -46


def spread_units(X):
    """``(spread, real, mixed)`` of the columns of ``X`` (centred or not).

    ``spread``: each feature's standard deviation; ``real``: the features whose spread
    is above :data:`ROUND_OFF` of the largest (the others are round-off of a constant);
    ``mixed``: whether the real spreads lie :data:`SPREAD_RATIO` or more apart.

    >>> spread_units(np.array([[0.0, 0.0, 1.0], [1.0, 2e3, 1.0]]))[1:]
    (array([ True,  True, False]), True)
    """
    # the squares taken at unit scale (a power of two: exact), so that they neither overflow
    # (spreads above 1e154 made every spread "round-off") nor underflow (below 1e-162)
    top = float(np.abs(X).max(initial=0.0))
    unit = 2.0 ** -np.floor(np.log2(top)) if np.isfinite(top) and top > 0.0 else 1.0
    at_unit = (X * unit).std(axis=0)
    real = np.isfinite(at_unit) & (at_unit > ROUND_OFF * at_unit.max(initial=0.0))
    mixed = bool(real.any() and at_unit[real].max() >= SPREAD_RATIO * at_unit[real].min())
    return at_unit / unit, real, mixed


def feature_scales(spread):
    """Each feature's spread rounded to a power of two (1 where it is 0 or not finite).

    Dividing by them is exact, so features already at unit scale keep their bits,
    and it brings features 1e4 and 1e-4 apart to comparable scales for a rank test.

    >>> feature_scales(np.array([3.0, 0.2, 0.0]))
    array([4.  , 0.25, 1.  ])
    """
    usable = np.isfinite(spread) & (spread > 0)
    return np.exp2(np.round(np.log2(np.where(usable, spread, 1.0))))


def prior_metric(prior, X, name="prior", random_state=None, strict_pd=True):
    """A Mahalanobis matrix (n_features, n_features) from its specification.

    Parameters
    ----------
    prior : {"identity", "covariance", "random"} or ndarray of shape (n_features, n_features)
        ``"covariance"``: the inverse covariance of ``X``; ``"random"``: a
        random SPD matrix; an array: that symmetric PSD matrix.
    X : ndarray of shape (n_samples, n_features)
        The samples (for ``"covariance"`` and the dimension).
    name : str
        The parameter's name, for messages.
    random_state : RandomState
    strict_pd : bool
        Refuse a singular matrix (ITML's LogDet divergence needs a definite one).

    Examples
    --------
    >>> prior_metric("identity", np.zeros((3, 2)))
    array([[1., 0.],
           [0., 1.]])
    """
    d = X.shape[1]
    if isinstance(prior, str):
        if prior == "identity":
            return np.eye(d)
        if prior == "random":
            return make_spd_matrix(d, random_state=check_random_state(random_state))
        # inverted as D^-1 R^-1 D^-1 (R the correlations, D the spreads as powers of two,
        # exact): the rank test reads R, so features 1e4 and 1e-4 apart are not singular
        cov = np.atleast_2d(np.cov(X, rowvar=False))
        scale = feature_scales(np.sqrt(np.diag(cov)))
        w, V = eigh(cov / scale[:, None] / scale[None, :])
        if w.min() <= RANK_TOL * max(w.max(), 1e-300):
            if strict_pd:
                raise ValueError(
                    f"{name}='covariance' needs an invertible covariance matrix; this one is "
                    "singular (fewer samples than features, or linearly dependent features). "
                    f"Reduce the input with PCA or use {name}='identity'.")
            w = np.where(w > RANK_TOL * w.max(), w, np.inf)  # pseudo-inverse
        return (V / w) @ V.T / scale[:, None] / scale[None, :]
    M = check_array(prior, dtype=np.float64, input_name=name)
    if M.shape != (d, d):
        raise ValueError(f"{name} must have shape ({d}, {d}) (n_features squared); got "
                         f"{M.shape}.")
    if not np.allclose(M, M.T):
        raise ValueError(f"{name} must be a symmetric matrix.")
    w = np.linalg.eigvalsh(M)
    if not np.abs(w).max() > 0.0:
        raise ValueError(f"{name} must not be the zero matrix (every distance 0).")
    floor = RANK_TOL * max(abs(w).max(), 1e-300)
    if w.min() < (floor if strict_pd else -floor):
        raise ValueError(f"{name} must be positive {'definite' if strict_pd else 'semi-definite'}"
                         f"; its smallest eigenvalue is {w.min():.3g}.")
    return (M + M.T) / 2.0


#: ``||M - P|| / ||P||`` below which a classic learner is said to have kept its prior.
PRIOR_KEPT = 1e-4


def warn_if_prior_kept(estimator, M, P, violated=True):
    """Warn that the learned metric ``M`` is its prior ``P`` to within :data:`PRIOR_KEPT`.

    LSML's and SDML's LogDet term towards the prior does not scale with ``X``,
    their constraints' term does (as its square): on inputs in small units the
    prior wins and the fit returns it, which the user should hear. Not for a
    user's array prior (which may be the solution already) nor ``max_iter=0``, nor
    when no constraint is ``violated`` at the prior (it is then the solution).
    """
    if isinstance(estimator.prior, np.ndarray) or not estimator.max_iter or not violated:
        return
    if np.linalg.norm(M - P) <= PRIOR_KEPT * np.linalg.norm(P):
        warn_user(f"{type(estimator).__name__} barely moved from its prior (the metric is the "
                  f"prior to within {PRIOR_KEPT:g}): at this scale of X the LogDet term "
                  "towards the prior outweighs the constraints, whose term shrinks with the "
                  "square of the scale. Standardise X (e.g. StandardScaler) first.")


def initial_map(init, X, dim, rng, y=None):
    """The start ``L`` (``(dim, n_features)``, float64) of LMNN and MLKR, from ``init``.

    ``"auto"``: the identity at full dimension, PCA below where PCA has that many
    directions (``dim < n_samples``; metric-learn's rule), else the identity's first rows;
    ``"identity"``, ``"pca"``, ``"random"`` (Gaussian rows of norm about 1) and,
    with ``y``, ``"lda"``; an array is checked by :func:`check_init_array`.

    Examples
    --------
    >>> initial_map("auto", np.eye(3), 3, np.random.RandomState(0))
    array([[1., 0., 0.],
           [0., 1., 0.],
           [0., 0., 1.]])
    """
    d = X.shape[1]
    if isinstance(init, np.ndarray):
        return check_init_array(init, d, dim)
    if init == "auto":
        init = "pca" if dim < min(d, X.shape[0]) else "identity"
    if init == "identity":
        return np.eye(dim, d)
    if init == "random":
        return rng.randn(dim, d) / np.sqrt(d)
    if init == "lda":
        n_lda = min(dim, len(np.unique(y)) - 1)
        if n_lda < dim:
            raise ValueError(f"init='lda' gives at most n_classes - 1 = {n_lda} components; "
                             f"n_components={dim}. Set n_components <= {n_lda}, or use "
                             "init='pca'.")
        scalings = LinearDiscriminantAnalysis(n_components=dim).fit(X, y).scalings_
        if scalings.shape[1] < dim:
            raise ValueError(f"init='lda' found {scalings.shape[1]} discriminant directions "
                             f"(the features are linearly dependent); n_components={dim}. "
                             "Lower n_components or use init='pca'.")
        return scalings[:, :dim].T.copy()
    if dim > min(X.shape):  # PCA's own error named its limit, not init
        raise ValueError(f"init='pca' gives at most min(n_samples, n_features) = "
                         f"{min(X.shape)} components; n_components={dim}. Set n_components "
                         f"<= {min(X.shape)}, or use init='auto' or 'identity'.")
    return PCA(n_components=dim, random_state=rng).fit(X).components_


def check_classic_input(estimator, X, y):
    """``(X float64, y encoded, classes)`` for a supervised classic learner; >= 2 classes."""
    X, y = validate_data(estimator, X, check_label_input(y), dtype=np.float64,
                         ensure_min_samples=2)
    y = check_orderable_labels(y)
    if y.dtype.kind not in "iub":  # 1-d integer labels are always classes (its fast answer)
        check_classification_targets(y)
    try:  # LabelEncoder's codes, without its overhead
        classes, y = np.unique(y, return_inverse=True)
    except TypeError:  # mixed label types: LabelEncoder's own error
        encoder = LabelEncoder().fit(y)
        classes, y = encoder.classes_, encoder.transform(y)
    if len(classes) < 2:
        raise ValueError(f"{type(estimator).__name__} is supervised and needs at least 2 "
                         f"classes; y holds only 1 class ({plain_labels(classes[:1])[0]!r}).")
    warn_if_outlying_rows(X, type(estimator).__name__)
    return X, y, classes


#: The ``n_constraints`` parameter of the ``*_Supervised`` learners that draw pairs or
#: quadruplets from labels (ITML, LSML, MMC, SDML): its constraint, in one place.
N_CONSTRAINTS = {"n_constraints": [positive_int(), None]}


def n_constraints_doc(what):
    """The docstring entry of ``n_constraints``: ``what`` are the constraints drawn."""
    return f"""    n_constraints : int, default=None
        {what}; ``None``: ``20 * n_classes ** 2`` (metric-learn's default), at
        most the pairs that exist (an explicit number that cannot be met warns,
        the default does not). The default grows with the square of the
        number of classes: with many small classes it reaches every ordered pair
        of samples (4 million at 2,000 samples in classes of 2, each pair held as
        two rows of ``X``: time and memory quadratic in the samples), so pass a
        number there.
"""


def constraint_count(n_constraints, y):
    """``n_constraints``, or for ``None`` metric-learn's default, ``20 * n_classes ** 2``."""
    return 20 * len(np.unique(y)) ** 2 if n_constraints is None else n_constraints


def supervised_pairs(X, y, n_constraints, random_state, name):
    """Labelled pairs (n_pairs, 2, n_features) and their labels drawn from class labels.

    ``n_constraints`` of each kind (:func:`constraint_count`).
    """
    from ..constraints import Constraints

    # the default count is "at most the pairs that exist": no warning when fewer do
    idx, labels = Constraints(y, unknown_label=None)._labeled_pairs(
        constraint_count(n_constraints, y), False, random_state, warn=n_constraints is not None)
    if not np.any(labels == 1):
        raise ValueError(f"{name}: no class has 2 samples, so no similar pair can be drawn.")
    return X[idx], labels


class SupervisedMixin:
    """``fit(X, y)`` of a ``*_Supervised`` learner: the input checks and the random state,
    then ``_fit_labels(X, y, rng)``, which draws the learner's constraints (pairs, triplets
    or quadruplets) from the class labels and runs its solver. ``y`` is required."""

    @_fit_context(prefer_skip_nested_validation=True)
    @transactional_fit
    def fit(self, X, y):
        """Draw constraints from the labels and fit on them.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)
            Class labels; every label is a class, -1 included (metric-learn's
            ``*_Supervised`` read -1 as "unlabelled": for partly labelled data,
            draw constraints with :class:`~skdml.constraints.Constraints` and
            fit the weakly-supervised learner on them).

        Returns
        -------
        self : object
            The fitted estimator.
        """
        X, y, self.classes_ = check_classic_input(self, X, y)
        self._fit_labels(X, y, check_random_state(self.random_state))
        return self

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.required = True
        return tags


class SupervisedPairsMixin(SupervisedMixin):
    """``*_Supervised`` pair learners: labelled pairs drawn from the class labels
    (``n_constraints`` of each kind), then the learner's own solver,
    ``_fit_pairs(pairs, pair_labels, rng)``."""

    def _fit_labels(self, X, y, rng):
        pairs, labels = supervised_pairs(X, y, self.n_constraints, rng, type(self).__name__)
        self._fit_pairs(pairs, labels, rng)
