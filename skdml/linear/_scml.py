"""Sparse Compositional Metric Learning (Shi, Bellet & Sha, AAAI 2014): a sparse sum of
rank-one metrics, learned on triplets."""

from __future__ import annotations

import warnings
from numbers import Integral, Real

import numpy as np
from sklearn.base import _fit_context
from sklearn.cluster import KMeans
from sklearn.discriminant_analysis import LinearDiscriminantAnalysis
from sklearn.neighbors import NearestNeighbors
from sklearn.preprocessing import normalize
from sklearn.utils import check_array, check_random_state
from sklearn.utils._param_validation import StrOptions

from .._utils import transactional_fit
from .._utils._params import StrictInterval
from ._base import BaseMahalanobis
from ._classic import check_classic_input, components_from_metric
from ._weakly import BaseTripletsLearner

__all__ = ["SCML", "SCML_Supervised", "lda_basis", "rda_weights", "triplet_diff_basis"]

#: ``dist_diff`` (n_triplets x n_basis) is kept in memory up to this many entries (1 GiB
#: of float64; COIL-20's 30,240 triplets x 2,000 bases take half of it), else its rows are
#: recomputed when needed (each objective evaluation then costs a pass over the triplets).
MAX_CACHED = 2 ** 27

_CONSTRAINTS = {
    "beta": [StrictInterval(Real, 0, None, closed="left")],
    "n_basis": [StrictInterval(Integral, 1, None, closed="left"), None],
    "gamma": [StrictInterval(Real, 0, None, closed="neither")],
    "max_iter": [StrictInterval(Integral, 1, None, closed="left")],
    "output_iter": [StrictInterval(Integral, 1, None, closed="left")],
    "batch_size": [StrictInterval(Integral, 1, None, closed="left")],
    "verbose": ["verbose"],
    "random_state": ["random_state"],
}


class _DistDiff:
    """Rows of ``dist_diff[t, k] = (b_k . (a - p))^2 - (b_k . (a - n))^2``.

    Kept in memory when it has at most :data:`MAX_CACHED` entries; otherwise
    each row is recomputed from the triplets' differences when needed (memory
    O(n_triplets x n_features)).
    """

    def __init__(self, triplets, basis):
        self.dp = triplets[:, 0] - triplets[:, 1]
        self.dn = triplets[:, 0] - triplets[:, 2]
        self.basis = basis
        self.shape = (len(self.dp), len(basis))
        self.cache = None
        if self.shape[0] * self.shape[1] <= MAX_CACHED:
            self.cache = self._compute(slice(None))

    def _compute(self, idx):
        return (self.dp[idx] @ self.basis.T) ** 2 - (self.dn[idx] @ self.basis.T) ** 2

    def rows(self, idx):
        return self.cache[idx] if self.cache is not None else self._compute(idx)

    def objective(self, w, beta):
        """``beta sum(w) + mean_t [1 + dist_diff[t] . w]_+`` over every triplet."""
        n = self.shape[0]
        step = max(1, 2 ** 22 // max(self.shape[1], 1))
        hinge = sum(np.maximum(1.0 + self.rows(slice(s, s + step)) @ w, 0.0).sum()
                    for s in range(0, n, step))
        return beta * w.sum() + hinge / n


def rda_weights(dist_diff, beta, gamma, max_iter, batch_size, output_iter, rng, verbose=0,
                name="SCML"):
    """SCML's stochastic regularised dual averaging with AdaGrad steps (their Algorithm 1).

    Minimises ``beta sum(w) + mean_t [1 + dist_diff[t] . w]_+`` over ``w >= 0``,
    keeping the best ``w`` of the full objective evaluated every ``output_iter``
    iterations and at the last. Returns ``(w, best objective, n_iter)``.
    """
    n, k = dist_diff.shape
    draws = rng.randint(0, n, size=(max_iter, batch_size))
    w = np.zeros(k)
    avg_grad = np.zeros(k)
    ada = np.zeros(k)
    best, best_w = np.inf, w
    for it in range(max_iter):
        D = dist_diff.rows(draws[it])
        active = 1.0 + D @ w > 0
        grad = D[active].sum(axis=0) / batch_size
        avg_grad = (it * avg_grad + grad) / (it + 1)
        ada = np.sqrt(ada * ada + grad * grad)
        w = -(it + 1) / (gamma * (1e-3 + ada)) * np.minimum(avg_grad + beta, 0.0)
        if (it + 1) % output_iter == 0 or it + 1 == max_iter:
            value = dist_diff.objective(w, beta)
            if verbose:
                print(f"[{name}] iteration {it + 1}: objective {value:.6f}")
            if value < best:
                best, best_w = value, w
    return best_w, best, max_iter


def triplet_diff_basis(triplets, n_basis, rng):
    """Bases from triplet differences: the positive eigendirections of
    ``(sum_pos dd^T - sum_neg dd^T)^2`` over random sets of ``n_features`` triplets."""
    n, _, d = triplets.shape
    if d > n:
        raise ValueError(f"basis='triplet_diffs' needs at least n_features={d} triplets; got "
                         f"{n}. Reduce the input with PCA or pass basis as an array.")
    pos, neg = triplets[:, 0] - triplets[:, 1], triplets[:, 0] - triplets[:, 2]
    out, count = [], 0
    while count < n_basis:
        pick = rng.choice(n, size=d, replace=False)
        S = pos[pick].T @ pos[pick] - neg[pick].T @ neg[pick]
        vals, vecs = np.linalg.eigh(S.T @ S)
        found = vecs[:, vals > 1e-12 * max(vals.max(), 1e-300)].T  # eigenvectors: columns
        out.append(found)
        count += len(found)
    return np.vstack(out)[:n_basis]


def lda_basis(X, y, n_basis, rng):
    """Local LDA directions: at k-means centres, LDA on each class's nearest samples (2 scales)."""
    labels = np.unique(y)
    n, d = X.shape
    num_eig = min(len(labels) - 1, d)
    if n_basis >= n * 2 * num_eig:
        raise ValueError(f"n_basis must be below {n * 2 * num_eig} (n_samples x 2 x "
                         f"min(n_classes - 1, n_features)) for basis='lda'; got {n_basis}.")
    n_clusters = int(np.ceil(n_basis / (2 * num_eig)))
    centres = KMeans(n_clusters=n_clusters, n_init=10,
                     random_state=rng.randint(np.iinfo(np.int32).max)).fit(X).cluster_centers_
    scales = (20, 50) if d > 50 else (10, 20)
    found = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # collinear local sets
        for scale in scales:
            nearest = []
            for c in labels:
                members = np.flatnonzero(y == c)
                k = min(len(members), scale)
                nearest.append(members[NearestNeighbors(n_neighbors=k).fit(X[members])
                                       .kneighbors(centres, return_distance=False)])
            local = np.hstack(nearest)  # (n_clusters, samples of every class)
            for rows in local:
                scalings = LinearDiscriminantAnalysis().fit(X[rows], y[rows]).scalings_
                found.append(normalize(scalings[:, :num_eig].T))
    return np.vstack(found)[:n_basis]


class _SCMLMixin:
    def _scml(self, triplets, basis, rng):
        if self.output_iter > self.max_iter:
            raise ValueError(f"output_iter={self.output_iter} must be at most max_iter="
                             f"{self.max_iter}.")
        d = triplets.shape[2]
        if basis.ndim != 2 or basis.shape[1] != d:
            raise ValueError(f"basis must have shape (n_basis, {d}); got {basis.shape}.")
        dist_diff = _DistDiff(triplets, basis)
        w, self.objective_, self.n_iter_ = rda_weights(
            dist_diff, self.beta, self.gamma, self.max_iter, self.batch_size, self.output_iter,
            rng, self.verbose, type(self).__name__)
        active = w > 0
        if not active.any():
            raise ValueError(f"{type(self).__name__}: no basis got a positive weight (every "
                             "triplet already holds, or beta is too large); lower beta.")
        self.basis_, self.weights_ = basis[active], w[active]
        if active.sum() < d:  # a low-rank metric: L = sqrt(w) * B, fewer rows than features
            self.components_ = np.sqrt(self.weights_)[:, None] * self.basis_
        else:
            self.components_ = components_from_metric(
                self.basis_.T @ (self.weights_[:, None] * self.basis_))

    def _array_basis(self, d):
        basis = check_array(self.basis, dtype=np.float64, input_name="basis")
        if basis.shape[1] != d:
            raise ValueError(f"basis must have shape (n_basis, {d}); got {basis.shape}.")
        return basis


_PARAMS_DOC = """\
    beta : float, default=1e-5
        Weight of the L1 penalty on the basis weights (sparsity).
    n_basis : int, default=None
        Rank-one bases generated; ``None``: ``80 * n_features`` for
        ``"triplet_diffs"``, ``min(20 * n_features, 2 * n_samples * (n_classes - 1) - 1)``
        for ``"lda"`` (metric-learn's defaults).
    gamma : float, default=5e-3
        Step-size parameter of the dual averaging.
    max_iter : int, default=10000
        Stochastic iterations.
    output_iter : int, default=500
        The full objective is evaluated every ``output_iter`` iterations (and at
        the last); the best weights are kept.
    batch_size : int, default=10
        Triplets per stochastic iteration.
    verbose : int, default=0
        Print the objective at every evaluation.
    random_state : int, RandomState instance or None, default=None
        Draws the bases and the batches.
"""


class SCML(_SCMLMixin, BaseTripletsLearner):
    r"""Sparse Compositional Metric Learning (SCML) on triplets.

    The metric is a sparse non-negative combination of rank-one metrics,
    :math:`M = \sum_k w_k b_k b_k^T`, over bases :math:`b_k` generated from
    the triplets; the weights minimise
    :math:`\beta \|w\|_1 + \frac{1}{T} \sum_t [1 + d_w(a_t, p_t) - d_w(a_t, n_t)]_+`
    by stochastic regularised dual averaging with AdaGrad steps (Shi et al.
    2014), the best weights of the full objective being kept.

    Parameters
    ----------
    basis : "triplet_diffs" or ndarray of shape (n_basis, n_features), default="triplet_diffs"
        The bases: eigendirections of the differences of random sets of
        triplets, or given ones.
{params}    preprocessor : array-like of shape (n_samples, n_features) or callable, default=None
        When given, triplets are rows of 3 indices into it (a callable maps
        a 1-D array of indices to the 2-D array of their features).

    Attributes
    ----------
    components_ : ndarray of shape (n_components, n_features)
        ``n_features`` rows, or fewer when fewer bases are active (a low-rank metric).
    basis_ : ndarray of shape (n_active, n_features)
        The bases with a positive weight.
    weights_ : ndarray of shape (n_active,)
        Their weights.
    objective_ : float
        The best objective evaluated.
    n_iter_ : int
    n_features_in_ : int
    preprocessor_ : ndarray, callable or None

    Notes
    -----
    metric-learn 0.7.0 takes the *rows* of the eigenvector matrix as
    ``"triplet_diffs"`` bases (``v[pos_eig_mask]``), which are not eigenvectors;
    skdml takes its columns. Given the same bases and seed, the weights are
    metric-learn's (``tests/linear/test_scml.py``).

    References
    ----------
    Y. Shi, A. Bellet and F. Sha. Sparse Compositional Metric Learning. AAAI 2014.

    Examples
    --------
    >>> import numpy as np
    >>> from skdml.constraints import Constraints
    >>> from skdml.linear import SCML
    >>> rng = np.random.RandomState(0)
    >>> y = np.repeat([0, 1, 2], 20)
    >>> X = np.c_[3.0 * y + 0.3 * rng.randn(60), 5.0 * rng.randn(60, 2)]
    >>> triplets = Constraints(y).generate_knntriplets(X, k_genuine=3, k_impostor=5)
    >>> scml = SCML(n_basis=30, max_iter=2000, random_state=0, preprocessor=X).fit(triplets)
    >>> a, p, n = X[triplets].transpose(1, 0, 2)
    >>> euclidean = np.mean(((a - p) ** 2).sum(1) < ((a - n) ** 2).sum(1))
    >>> bool(scml.score(triplets) > euclidean + 0.1)
    True
    """

    _parameter_constraints: dict = {
        **_CONSTRAINTS, "basis": [StrOptions({"triplet_diffs"}), np.ndarray],
        "preprocessor": ["array-like", callable, None]}

    def __init__(self, beta=1e-5, basis="triplet_diffs", n_basis=None, gamma=5e-3,
                 max_iter=10000, output_iter=500, batch_size=10, verbose=0, random_state=None,
                 preprocessor=None):
        self.beta = beta
        self.basis = basis
        self.n_basis = n_basis
        self.gamma = gamma
        self.max_iter = max_iter
        self.output_iter = output_iter
        self.batch_size = batch_size
        self.verbose = verbose
        self.random_state = random_state
        self.preprocessor = preprocessor

    def _fit_tuples(self, triplets, y):
        rng = check_random_state(self.random_state)
        d = triplets.shape[2]
        if isinstance(self.basis, str):
            basis = triplet_diff_basis(triplets, self.n_basis or 80 * d, rng)
        else:
            basis = self._array_basis(d)
        self._scml(triplets, basis, rng)


class SCML_Supervised(_SCMLMixin, BaseMahalanobis):
    """SCML on k-NN triplets drawn from class labels.

    Each sample's ``k_genuine`` nearest same-class samples and ``k_impostor``
    nearest samples of other classes form its triplets
    (:meth:`skdml.constraints.Constraints.generate_knntriplets`).

    Parameters
    ----------
    k_genuine : int, default=3
    k_impostor : int, default=10
    basis : {"lda", "triplet_diffs"} or ndarray of shape (n_basis, n_features), default="lda"
        ``"lda"``: local LDA directions around k-means centres (Shi et al.).
{params}
    Attributes
    ----------
    components_ : ndarray of shape (n_components, n_features)
    basis_ : ndarray of shape (n_active, n_features)
    weights_ : ndarray of shape (n_active,)
    objective_ : float
    n_iter_ : int
    classes_ : ndarray of shape (n_classes,)
    n_features_in_ : int
    feature_names_in_ : ndarray of shape (`n_features_in_`,)
        Defined when ``X`` has feature names that are all strings.

    Examples
    --------
    >>> from sklearn.datasets import load_iris
    >>> from skdml.linear import SCML_Supervised
    >>> X, y = load_iris(return_X_y=True)
    >>> scml = SCML_Supervised(n_basis=40, max_iter=1000, random_state=0).fit(X, y)
    >>> scml.transform(X).shape[0]
    150
    """

    _parameter_constraints: dict = {
        **_CONSTRAINTS, "basis": [StrOptions({"lda", "triplet_diffs"}), np.ndarray],
        "k_genuine": [StrictInterval(Integral, 1, None, closed="left")],
        "k_impostor": [StrictInterval(Integral, 1, None, closed="left")]}

    def __init__(self, k_genuine=3, k_impostor=10, beta=1e-5, basis="lda", n_basis=None,
                 gamma=5e-3, max_iter=10000, output_iter=500, batch_size=10, verbose=0,
                 random_state=None):
        self.k_genuine = k_genuine
        self.k_impostor = k_impostor
        self.beta = beta
        self.basis = basis
        self.n_basis = n_basis
        self.gamma = gamma
        self.max_iter = max_iter
        self.output_iter = output_iter
        self.batch_size = batch_size
        self.verbose = verbose
        self.random_state = random_state

    @_fit_context(prefer_skip_nested_validation=True)
    @transactional_fit
    def fit(self, X, y):
        """Draw k-NN triplets from the labels and fit SCML on them.

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
        from ..constraints import Constraints

        X, y, self.classes_ = check_classic_input(self, X, y)
        rng = check_random_state(self.random_state)
        n, d = X.shape
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # small classes: fewer neighbours
            triplets = X[Constraints(y, unknown_label=None).generate_knntriplets(
                X, self.k_genuine, self.k_impostor)]
        if isinstance(self.basis, str) and self.basis == "lda":
            num_eig = min(len(self.classes_) - 1, d)
            basis = lda_basis(X, y, self.n_basis or min(20 * d, 2 * n * num_eig - 1), rng)
        elif isinstance(self.basis, str):
            basis = triplet_diff_basis(triplets, self.n_basis or 80 * d, rng)
        else:
            basis = self._array_basis(d)
        self._scml(triplets, basis, rng)
        return self

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.required = True
        return tags


if SCML.__doc__ is not None:  # docstrings kept (not python -OO)
    SCML.__doc__ = SCML.__doc__.replace("{params}", _PARAMS_DOC)
    SCML_Supervised.__doc__ = SCML_Supervised.__doc__.replace("{params}", _PARAMS_DOC)
