"""Sparse Compositional Metric Learning (Shi, Bellet & Sha, AAAI 2014): a sparse sum of
rank-one metrics, learned on triplets."""

from __future__ import annotations

import inspect
from numbers import Integral, Real

import numpy as np
from sklearn.cluster import KMeans
from sklearn.exceptions import ConvergenceWarning
from sklearn.neighbors import NearestNeighbors
from sklearn.preprocessing import normalize
from sklearn.utils import check_array, check_random_state
from sklearn.utils._param_validation import StrOptions

from .._training._progress import IterationBar
from .._utils import quiet_warnings
from .._utils._params import StrictInterval, non_negative_real, positive_int
from ._base import BaseMahalanobis
from ._classic import ROUND_OFF, SupervisedMixin, components_from_metric, symmetric_eigh
from ._weakly import BaseTripletsLearner

__all__ = ["SCML", "SCML_Supervised", "lda_basis", "lda_scalings", "rda_weights",
           "triplet_diff_basis"]

#: The squared projections of the distinct pairs (n_pairs x n_basis) are kept in memory
#: up to this many entries (1 GiB of float64), and ``dist_diff`` (n_triplets x n_basis)
#: too when both together fit (COIL-20: 13,104 pairs and 30,240 triplets x 2,000 bases,
#: 0.7 GiB); else they are recomputed when needed.
MAX_CACHED = 2 ** 27

#: Entries of a block of rows built at once (512 KiB: in the CPU caches).
_BLOCK = 2 ** 16

#: ``dist_diff`` is built only when its rows are drawn this many times on average (a
#: row costs about as much to build, memory pages included, as 4 to 5 gathers of it).
_REUSE = 5
#: Triplet draws of one fit at most (int64: 1 GiB), all made before the dual averaging.
_MAX_DRAWS = 2**27

#: Iterations whose batches are gathered at once by :func:`rda_weights`.
_GATHER = 16

_CONSTRAINTS = {
    "beta": [non_negative_real()],
    "n_basis": [positive_int(), None],
    "gamma": [StrictInterval(Real, 0, None, closed="neither")],
    "max_iter": [positive_int()],
    "output_iter": [positive_int()],
    "batch_size": [positive_int()],
    "verbose": ["verbose"],
    "random_state": ["random_state"],
}


class _DistDiff:
    """Rows of ``dist_diff[t, k] = (b_k . (x_a - x_p))^2 - (b_k . (x_a - x_n))^2``.

    ``X`` (n_points, n_features) are the points, ``triplets`` (n_triplets, 3) the
    indices of each triplet's anchor, positive and negative. The points are
    projected on the bases once (``X @ basis.T``); a triplet's row is the
    difference of the squared projections of its two pairs, computed once per
    distinct pair (as metric-learn does). The distinct pairs' squared projections
    are kept in memory when they have at most :data:`MAX_CACHED` entries, and the
    triplets' rows too when both together do; what is not kept is recomputed
    when needed. Everything is built in blocks that stay in the CPU caches.
    """

    def __init__(self, X, triplets, basis, n_draws=None):
        n = len(triplets)
        pairs = np.sort(np.vstack((triplets[:, [0, 1]], triplets[:, [0, 2]])), axis=1)
        self.pairs, inverse = np.unique(pairs, axis=0, return_inverse=True)
        inverse = inverse.ravel()
        self.pos, self.neg = inverse[:n], inverse[n:]
        self.XB = X @ basis.T
        k, u = len(basis), len(self.pairs)
        self.shape = (n, k)
        self.step = max(1, _BLOCK // max(k, 1))  # rows per block
        self.dist = self.cache = None
        if u * k <= MAX_CACHED:
            self.dist = np.empty((u, k))
            for s in range(0, u, self.step):
                self._pair_dist(slice(s, s + self.step), out=self.dist[s:s + self.step])
        reused = n_draws is None or n_draws >= _REUSE * n
        if self.dist is not None and (n + u) * k <= MAX_CACHED and reused:
            self.cache = np.empty(self.shape)
            for s in range(0, n, self.step):
                self._compute(slice(s, s + self.step), out=self.cache[s:s + self.step])

    def _pair_dist(self, u, out=None):
        diff = np.subtract(self.XB[self.pairs[u, 0]], self.XB[self.pairs[u, 1]], out=out)
        return np.square(diff, out=diff)

    def _compute(self, idx, out=None):
        if self.dist is not None:
            return np.subtract(self.dist[self.pos[idx]], self.dist[self.neg[idx]], out=out)
        return np.subtract(self._pair_dist(self.pos[idx]), self._pair_dist(self.neg[idx]),
                           out=out)

    def rows(self, idx):
        return self.cache[idx] if self.cache is not None else self._compute(idx)

    def may_violate(self, W):
        """For weights ``w_0 >= w_1`` (``W``'s rows), whether a triplet may have a positive
        hinge argument ``1 + dist_diff[t] . w`` for some ``w_1 <= w <= w_0``: the pairs'
        squared projections are non-negative, so the argument is at most
        ``1 + dist[pos] . w_0 - dist[neg] . w_1`` (with a margin for rounding)."""
        proj = np.vstack([self.dist[s:s + 8 * self.step] @ W.T
                          for s in range(0, len(self.dist), 8 * self.step)])
        upper, lower = proj[self.pos, 0], proj[self.neg, 1]
        return 1.0 + upper - lower > -1e-9 * (1.0 + upper + lower)

    def objectives(self, W, beta):
        """``beta sum(w) + mean_t [1 + dist_diff[t] . w]_+`` for each row ``w`` of ``W``."""
        W = np.atleast_2d(W)
        n = self.shape[0]
        step = 8 * self.step
        if self.dist is not None:  # through the distinct pairs: fewer rows
            proj = np.vstack([self.dist[s:s + step] @ W.T
                              for s in range(0, len(self.dist), step)])
            hinge = np.maximum(1.0 + proj[self.pos] - proj[self.neg], 0.0).sum(axis=0)
        else:
            hinge = sum(np.maximum(1.0 + self.rows(slice(s, s + step)) @ W.T, 0.0).sum(axis=0)
                        for s in range(0, n, step))
        return beta * W.sum(axis=1) + hinge / n


def rda_weights(dist_diff, beta, gamma, max_iter, batch_size, output_iter, rng, verbose=0,
                name="SCML"):
    """SCML's stochastic regularised dual averaging with AdaGrad steps (their Algorithm 1).

    Minimises ``beta sum(w) + mean_t [1 + dist_diff[t] . w]_+`` over ``w >= 0``,
    keeping the best ``w`` of the full objective evaluated every ``output_iter``
    iterations and at the last. Returns ``(w, best objective, n_iter)``.

    The iterates are metric-learn's: with ``G`` the sum of the gradients so far
    and ``a`` the root of the sum of their squares, the weights after iteration
    ``i`` (from 0) are ``w_i = max(-G - (i + 1) beta, 0) / (gamma (1e-3 + a))``.
    A batch whose triplets all have a negative hinge argument (the usual case
    once the first few hundred iterations are past) has a zero gradient and
    leaves ``G`` and ``a`` as they are, so the weights of a run of such
    iterations are known in advance, and non-increasing. The hinge arguments of
    whole windows of iterations are computed at once, and the state is updated
    only at the first iteration of a window with a positive argument; the window
    then restarts after it. After a long enough run of such iterations, one
    pass over the distinct pairs bounds every triplet's argument over the next
    span of iterations (:meth:`_DistDiff.may_violate`), and only the iterations
    that drew a triplet the bound does not clear are computed. The objective is
    evaluated for every kept ``w`` in one pass at the end.
    """
    n, k = dist_diff.shape
    if max_iter * batch_size > _MAX_DRAWS:
        raise ValueError(
            f"{name}: max_iter x batch_size = {max_iter * batch_size:,} triplet draws, made up "
            f"front ({8 * max_iter * batch_size / 2**30:,.1f} GiB); at most {_MAX_DRAWS:,} "
            "(metric-learn's defaults draw 100,000): lower max_iter or batch_size.")
    draws = rng.randint(0, n, size=(max_iter, batch_size))
    checks = list(range(output_iter - 1, max_iter, output_iter))
    if not checks or checks[-1] != max_iter - 1:
        checks.append(max_iter - 1)
    kept = np.empty((len(checks), k))
    G, ada = np.zeros(k), np.zeros(k)
    scale = np.full(k, 1.0 / (gamma * 1e-3))

    def used(j):  # the weights used at iterations j (those after iterations j - 1)
        return scale * np.maximum(-G - np.asarray(j, dtype=float)[..., None] * beta, 0.0)

    def first_hit(iters):  # the first of these iterations with a positive hinge argument
        for s in range(0, len(iters), _GATHER):
            chunk = iters[s:s + _GATHER]
            D = dist_diff.rows(draws[chunk].ravel()).reshape(len(chunk), batch_size, k)
            slack = 1.0 + np.matmul(D, used(chunk)[:, :, None])[:, :, 0]
            hits = np.flatnonzero((slack > 0).any(axis=1))
            if len(hits):
                return chunk[hits[0]], D[hits[0]][slack[hits[0]] > 0]
        return None, None

    # a bound for every triplet over a span costs a pass over the distinct pairs, about
    # as much as gathering the rows of U / (4 batch_size) iterations: taken once as many
    # iterations have passed since the last update, for a span at least as long
    pass_span = None
    if dist_diff.dist is not None:
        pass_span = max(1, len(dist_diff.dist) // (4 * batch_size))
    it, c, streak = 0, 0, 0
    with IterationBar(verbose, max_iter, name, may_stop_early=False) as bar:
        while it < max_iter:
            if pass_span is not None and streak >= pass_span:
                span = min(max_iter - it, max(streak, pass_span))
                may = dist_diff.may_violate(used([it, it + span - 1]))
                iters = it + np.flatnonzero(may[draws[it:it + span]].any(axis=1))
            else:
                span = min(max_iter - it, _GATHER)
                iters = np.arange(it, it + span)
            j, active_rows = first_hit(iters)
            quiet_end = it + span if j is None else j
            while c < len(checks) and checks[c] < quiet_end:
                kept[c] = used(checks[c] + 1)
                c += 1
            if j is None:
                it, streak = quiet_end, streak + span
                bar.to(it)
                continue
            grad = active_rows.sum(axis=0) / batch_size
            G += grad
            ada = np.sqrt(ada * ada + grad * grad)
            scale = 1.0 / (gamma * (1e-3 + ada))
            if c < len(checks) and checks[c] == j:
                kept[c] = used(j + 1)
                c += 1
            it, streak = j + 1, 0
            bar.to(it)
    values = dist_diff.objectives(kept, beta)
    if verbose >= 2:  # metric-learn's lines (its verbose=True): the objective is evaluated
        # once, at the end, for every kept weight vector
        for i, value in zip(checks, values):
            print(f"[{name}] iteration {i + 1}: objective {value:.6f}")
    best = int(np.argmin(values))
    return kept[best], float(values[best]), max_iter


#: Draws of ``triplet_diff_basis`` in a row that may find no direction before it gives up.
_MAX_EMPTY_DRAWS = 100


def triplet_diff_basis(triplets, n_basis, rng):
    """Bases from triplet differences: the positive eigendirections of
    ``(sum_pos dd^T - sum_neg dd^T)^2`` over random sets of ``n_features`` triplets."""
    n, _, d = triplets.shape
    if d > n:
        raise ValueError(f"basis='triplet_diffs' needs at least n_features={d} triplets; got "
                         f"{n}. Reduce the input with PCA or pass basis as an array.")
    pos, neg = triplets[:, 0] - triplets[:, 1], triplets[:, 0] - triplets[:, 2]
    out, count, empty = [], 0, 0
    while count < n_basis:
        pick = rng.choice(n, size=d, replace=False)
        S = pos[pick].T @ pos[pick] - neg[pick].T @ neg[pick]
        vals, vecs = symmetric_eigh(S.T @ S)
        found = vecs[:, vals > 1e-12 * max(vals.max(), 1e-300)].T  # eigenvectors: columns
        out.append(found)
        count += len(found)
        empty = 0 if len(found) else empty + 1
        if empty == _MAX_EMPTY_DRAWS:
            raise ValueError(
                f"basis='triplet_diffs' found no direction in {_MAX_EMPTY_DRAWS} draws of "
                f"{d} triplets: their positive and negative differences cancel (negatives "
                "equal to their positives, or X constant). Check the triplets, or pass "
                "basis='lda' or an array.")
    return np.vstack(out)[:n_basis]


def lda_scalings(X, y, tol=1e-4):
    """scikit-learn's ``LinearDiscriminantAnalysis(solver="svd").fit(X, y).scalings_``,
    up to the signs of its columns, without the estimator's overhead.

    The singular value decomposition of the standardised within-class residuals
    ``Z`` (n_samples x n_features) comes from the eigendecomposition of ``Z^T Z``
    (n_features x n_features, unit diagonal): the same rank (singular values above
    ``tol``) and directions, at a fraction of the cost when n_samples > n_features.
    """
    classes, yi = np.unique(y, return_inverse=True)
    n, d = X.shape
    counts = np.bincount(yi)
    means = np.zeros((len(classes), d))
    np.add.at(means, yi, X)
    means /= counts[:, None]
    Xc = X - means[yi]
    std = Xc.std(axis=0)
    # a feature constant within every class leaves only the round-off of its class means
    # (7 x 3.7 / 7 is not 3.7): read as 0, not standardised up to a direction of weight
    # 1e15 that every basis then followed (every weight ended at 0)
    flat = std <= ROUND_OFF * np.abs(X).max(axis=0)
    Xc[:, flat] = 0.0
    std[flat] = 1.0
    Z = Xc / (std * np.sqrt(n))
    values, vectors = symmetric_eigh(Z.T @ Z)
    S = np.sqrt(np.clip(values[::-1], 0.0, None))
    rank = int(np.sum(S > tol))
    if rank == 0:
        raise ValueError("basis='lda' found no direction: X does not vary within its classes "
                         "(each class one point repeated, or X constant).")
    scalings = vectors[:, ::-1][:, :rank] / std[:, None] / S[:rank]
    priors = counts / n
    fac = 1.0 if len(classes) == 1 else 1.0 / (len(classes) - 1)
    between = np.sqrt(n * priors * fac)[:, None] * (means - priors @ means)
    _, S, Vt = np.linalg.svd(between @ scalings, full_matrices=False)
    if not S.size or not S[0] > 0.0:
        raise ValueError("basis='lda' found no direction: the class means coincide.")
    return scalings @ Vt[:int(np.sum(S > tol * S[0]))].T


def lda_basis(X, y, n_basis, random_state):
    """Local LDA directions: at k-means centres, LDA on each class's nearest samples (2 scales).

    ``random_state`` seeds the k-means (metric-learn passes its own ``random_state``)."""
    labels = np.unique(y)
    n, d = X.shape
    num_eig = min(len(labels) - 1, d)
    if n_basis >= n * 2 * num_eig:
        raise ValueError(f"n_basis must be below {n * 2 * num_eig} (n_samples x 2 x "
                         f"min(n_classes - 1, n_features)) for basis='lda'; got {n_basis}.")
    n_clusters = int(np.ceil(n_basis / (2 * num_eig)))
    # fewer distinct samples than centres: k-means repeats a centre and says so with a
    # ConvergenceWarning, though nothing was cut short (a repeated centre adds the same
    # directions again, as in metric-learn)
    with quiet_warnings({"message": "Number of distinct clusters",
                         "category": ConvergenceWarning}):
        centres = KMeans(n_clusters=n_clusters, n_init=10, random_state=random_state,
                         algorithm="elkan").fit(X).cluster_centers_
    scales = (20, 50) if d > 50 else (10, 20)
    nearest = []  # per class, its samples nearest to each centre (closest first)
    for c in labels:
        members = np.flatnonzero(y == c)
        k = min(len(members), max(scales))
        nearest.append(members[NearestNeighbors(n_neighbors=k).fit(X[members])
                               .kneighbors(centres, return_distance=False)])
    found = []
    for scale in scales:
        local = np.hstack([idx[:, :scale] for idx in nearest])  # (n_clusters, samples)
        for rows in local:
            try:
                found.append(normalize(lda_scalings(X[rows], y[rows])[:, :num_eig].T))
            except ValueError:  # each class one repeated point here: no local direction
                continue
    if not found:
        raise ValueError("basis='lda' found no direction: near every k-means centre each "
                         "class is one point repeated; use basis='triplet_diffs'.")
    return np.vstack(found)[:n_basis]


class _SCMLMixin:
    def _scml(self, X, triplets, basis, rng):
        """Fit the weights on ``triplets`` (n_triplets, 3), indices of rows of ``X``."""
        if self.output_iter > self.max_iter:
            raise ValueError(f"output_iter={self.output_iter} must be at most max_iter="
                             f"{self.max_iter}.")
        d = X.shape[1]
        if basis.ndim != 2 or basis.shape[1] != d:
            raise ValueError(f"basis must have shape (n_basis, {d}); got {basis.shape}.")
        dist_diff = _DistDiff(X, triplets, basis, self.max_iter * self.batch_size)
        w, self.objective_, self.n_iter_ = rda_weights(
            dist_diff, self.beta, self.gamma, self.max_iter, self.batch_size, self.output_iter,
            rng, self.verbose, type(self).__name__)
        active = w > 0
        if not active.any():
            raise ValueError(
                f"{type(self).__name__}: the dual averaging ended with every weight 0 (every "
                "triplet already holds, beta outweighs the violations, or the steps are too "
                "long): lower beta, or raise gamma (shorter steps). The violations scale with "
                "the square of X (here its largest |x| is "
                f"{float(np.abs(X).max()):.3g}), beta does not: on inputs in small units, "
                "standardise X first (e.g. StandardScaler).")
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
        Stochastic iterations (at least 1). Every batch is drawn before the
        first iteration: ``max_iter * batch_size`` draws, at most ``2**27``.
    output_iter : int, default=500
        The full objective is evaluated every ``output_iter`` iterations (and at
        the last); the best weights are kept.
    batch_size : int, default=10
        Triplets per stochastic iteration.
    verbose : int, default=0
        ``1`` shows a progress bar over the ``max_iter`` iterations (every one
        runs); ``2`` also prints the objective at every evaluation, once
        the run has ended (metric-learn's lines at its ``verbose=True``).
    random_state : int, RandomState instance or None, default=None
        Draws the bases and the batches. As in metric-learn, an integer seed
        restarts for each step (the basis, then the batches: both draw the same
        stream from its start), while a ``RandomState`` is drawn on in turn, so
        ``random_state=0`` and ``np.random.RandomState(0)`` give different fits
        (an integer gives metric-learn's fit for that seed).
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
        points, index = np.unique(triplets.reshape(-1, d), axis=0, return_inverse=True)
        # the dual averaging starts from the seed afresh, as metric-learn's does (an integer
        # seed; a RandomState is drawn on in turn)
        self._scml(points, index.reshape(-1, 3), basis, check_random_state(self.random_state))


class SCML_Supervised(SupervisedMixin, _SCMLMixin, BaseMahalanobis):
    """SCML on k-NN triplets drawn from class labels.

    Each sample's ``k_genuine`` nearest same-class samples and ``k_impostor``
    nearest samples of other classes form its triplets
    (:meth:`skdml.constraints.Constraints.generate_knntriplets`).

    Parameters
    ----------
    k_genuine : int, default=3
        Target neighbours of each sample: its nearest samples of its own class,
        the positives of its triplets.
    k_impostor : int, default=10
        Impostors of each sample: its nearest samples of other classes, the
        negatives of its triplets (``k_genuine * k_impostor`` triplets a sample).
        Both are capped at what a sample's class and the others hold: quietly at
        the defaults, with a warning for numbers you chose.
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
        "k_genuine": [positive_int()],
        "k_impostor": [positive_int()]}

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

    def _fit_labels(self, X, y, rng):
        from ..constraints import Constraints

        n, d = X.shape
        # small classes: fewer neighbours, quietly at the defaults, with a warning for numbers
        # the user chose (no catch_warnings: it is not thread-safe, and it silenced the user's
        # UserWarnings after two fits in two threads)
        defaults = inspect.signature(SCML_Supervised.__init__).parameters
        chosen = (self.k_genuine != defaults["k_genuine"].default,
                  self.k_impostor != defaults["k_impostor"].default)
        triplets = Constraints(y, unknown_label=None)._knntriplets(
            X, self.k_genuine, self.k_impostor, warn=chosen)
        if isinstance(self.basis, str) and self.basis == "lda":
            num_eig = min(len(self.classes_) - 1, d)
            # metric-learn's seeding: the k-means gets the integer seed itself, so ``rng``
            # (that seed's fresh generator) is left whole for the dual averaging's draws
            seed = self.random_state if isinstance(self.random_state, Integral) else rng
            basis = lda_basis(X, y, self.n_basis or min(20 * d, 2 * n * num_eig - 1), seed)
        elif isinstance(self.basis, str):
            basis = triplet_diff_basis(X[triplets], self.n_basis or 80 * d, rng)
            rng = check_random_state(self.random_state)  # afresh, as after the lda basis
        else:
            basis = self._array_basis(d)
        self._scml(X, triplets, basis, rng)


if SCML.__doc__ is not None:  # docstrings kept (not python -OO)
    SCML.__doc__ = SCML.__doc__.replace("{params}", _PARAMS_DOC)
    SCML_Supervised.__doc__ = SCML_Supervised.__doc__.replace("{params}", _PARAMS_DOC)
