"""Mahalanobis Metric for Clustering (Xing et al., NIPS 2002): spread dissimilar pairs."""

from __future__ import annotations

from numbers import Integral, Real

import numpy as np
import torch
from scipy.optimize import brentq
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import StrOptions

from .._training._lbfgs import run_lbfgs
from .._training._progress import IterationBar
from .._utils import thread_limits, torch_fit_modes, warn_user
from .._utils._params import StrictInterval, non_negative_real
from ._base import BaseMahalanobis
from ._classic import (
    N_CONSTRAINTS,
    SupervisedPairsMixin,
    components_from_metric,
    n_constraints_doc,
    prior_metric,
    symmetric_eigh,
    unique_points,
)
from ._weakly import BasePairsLearner

__all__ = ["MMC", "MMC_Supervised", "mmc_objective"]

_CONSTRAINTS = {
    "max_iter": [StrictInterval(Integral, 0, None, closed="left")],
    "tol": [non_negative_real()],
    "init": [StrOptions({"identity", "covariance", "random"}), np.ndarray],
    "diagonal": ["boolean"],
    "diagonal_c": [StrictInterval(Real, 0, None, closed="neither")],
    "verbose": ["verbose"],
    "random_state": ["random_state"],
}


def mmc_objective(L, pos, neg, diagonal=False, diagonal_c=1.0):
    r"""MMC's objective to *minimise*, under ``M = L^T L`` (``L`` a vector when diagonal).

    Full: :math:`\tfrac12 \log \sum_S d_M - \log \sum_D \sqrt{d_M}`, Xing et al.'s
    ``max sum_D sqrt(d) s.t. sum_S d <= t`` with the constraint eliminated (the
    maximum lies on it, and ``log sum_D sqrt(d)`` gains ``log c / 2`` when
    ``M`` is scaled by ``c``). Diagonal (``M = diag(w)``, ``w = L ** 2``, so ``w >= 0``
    without bounds): :math:`\sum_S d_w - c \log \sum_D \sqrt{d_w}` (their Eq. 6).
    """
    if diagonal:
        d_pos = (pos * pos) @ (L * L)
        d_neg = (neg * neg) @ (L * L)
        return d_pos.sum() - diagonal_c * torch.log(torch.sqrt(d_neg.clamp(min=1e-300)).sum())
    d_pos = ((pos @ L.T) ** 2).sum(1)
    d_neg = ((neg @ L.T) ** 2).sum(1)
    return 0.5 * torch.log(d_pos.sum()) - torch.log(torch.sqrt(d_neg.clamp(min=1e-300)).sum())


def _log_spread(A, neg, gradient=True, eps=1e-6):
    """metric-learn's ``g(A) = log(sum_D sqrt(d_A) + eps)`` and, if ``gradient``, its
    gradient in ``A`` with metric-learn's ``0.5 / (sqrt(d) + eps)`` for the square roots'
    derivative (finite at ``d = 0``); ``neg`` holds the dissimilar pairs' differences.
    metric-learn's ``eps`` is ``1e-6``; :func:`_spread_eps` scales it down with the data."""
    root = np.sqrt(np.maximum(np.einsum("ij,ij->i", neg @ A, neg), 0.0))
    total = root.sum()
    value = float(np.log(total + eps))
    if not gradient:
        return value, None
    return value, (neg.T * (0.5 / (root + eps))) @ neg / (total + eps)


def _spread_eps(A0, neg):
    """metric-learn's ``1e-6``, times the dissimilar pairs' mean distance under the start when
    below 1: a constant beside distances of 1e-10 (inputs in small units) decided the metric
    (iris at 1e-10: 3-NN accuracy 0.78 for 0.98); at unit scale and above, metric-learn's own."""
    mean = float(np.mean(np.sqrt(np.maximum(np.einsum("ij,ij->i", neg @ A0, neg), 0.0))))
    return 1e-6 * min(1.0, mean)


def _project_constraints(A, W, t):
    """The nearest (Frobenius) symmetric PSD ``X`` to ``A`` with ``<W, X> <= t``.

    Xing et al.'s constraint sets ``C1 = {<W, X> <= t}`` (``W`` PSD, ``t > 0``) and
    ``C2 = {X PSD}``: by the KKT conditions the projection onto their intersection
    is ``P_psd(A - lam W)`` for the multiplier ``lam >= 0`` at which ``<W, X> = t``
    (``lam = 0`` when ``P_psd(A)`` already meets it). ``<W, P_psd(A - lam W)>``
    decreases in ``lam``, so a bracketed 1-D root search finds it with one
    eigendecomposition per trial, where metric-learn alternates the two
    projections (up to ``max_proj`` eigendecompositions) until within 1 %.

    Returns ``X`` and the number of eigendecompositions.
    """
    S = (A + A.T) / 2.0
    calls = [0]

    def psd(lam):
        calls[0] += 1
        w, V = symmetric_eigh(S - lam * W)
        return (V * np.maximum(w, 0.0)) @ V.T

    def excess(lam):
        return float(np.vdot(W, psd(lam))) - t

    X = psd(0.0)
    if np.vdot(W, X) <= t:
        return X, calls[0]
    # the halfspace projection's multiplier: P_psd only adds PSD parts, so lam* >= lo (with W
    # at unit norm first: <W, W> of inputs scaled by 1e-100 underflows, by 1e100 overflows)
    norm_W = float(np.linalg.norm(W))
    lo = max((float(np.vdot(W / norm_W, S)) - t / norm_W) / norm_W, 0.0)
    if lo > 0.0 and excess(lo) <= 0.0:  # A - lo W is PSD (up to round-off)
        return psd(lo), calls[0]
    # lam W is compared with S: the bracket and the tolerance in that unit, so that the
    # multiplier (which scales as 1 / s**2 for inputs scaled by s) is found at every scale
    unit = float(np.linalg.norm(S)) / norm_W
    hi = max(lo, 1e-12 * unit) * 2.0
    while excess(hi) > 0.0:
        lo, hi = hi, hi * 2.0
    lam = brentq(excess, lo, hi, xtol=1e-14 * unit, rtol=1e-12)
    return psd(lam), calls[0]


#: The scale (the similar pairs' summed squared distance under init, over 100) MMC accepts.
_MIN_SCALE = 1e-150

# metric-learn projects until sum_S d is within eps = 1 % of t, so the g it compares
# (log sum_D sqrt(d), which gains log(c) / 2 when M is scaled by c) is known to
# log(1.01) / 2 only: a step gaining less is a coin toss there, a rejection here
_RESOLUTION = 0.5 * np.log1p(0.01)


class _MMCMixin:
    def _mmc(self, pairs, y, rng):
        diffs = pairs[:, 0] - pairs[:, 1]
        pos, neg = diffs[y == 1], diffs[y == -1]
        neg = neg[np.any(neg, axis=1)]
        name = type(self).__name__
        if not np.any(pos) or len(neg) == 0:
            raise ValueError(f"{name} needs similar pairs of distinct samples and dissimilar "
                             "pairs of distinct samples (labels +1 and -1).")
        A0 = prior_metric(self.init, unique_points(pairs, random_state=rng), "init", rng,
                          strict_pd=False)
        d = A0.shape[0]
        if self.diagonal and not np.all(np.diag(A0) > 0.0):
            # the diagonal form scales square-root weights: a zero weight has no gradient
            raise ValueError(f"{name}(diagonal=True) needs an init with a positive diagonal "
                             "(a feature weighted 0 at the start stays at 0); got diagonal "
                             f"{np.array2string(np.diag(A0), precision=3, threshold=8)}.")
        # Xing et al.'s scale: the similar pairs' summed squared distance at most t, set as
        # metric-learn sets it (a hundredth of its value under the start)
        W = pos.T @ pos
        t = float(np.vdot(W, A0)) / 100.0
        if not t > 0.0:
            raise ValueError(f"{name}: init gives every similar pair the distance 0, so the "
                             "scale of Xing et al.'s constraint is 0; use an init that "
                             "separates them (the default 'identity').")
        # the projection squares W (t's scale): beyond 1e+-150 its products under- or overflow
        if not _MIN_SCALE <= t <= 1.0 / _MIN_SCALE:
            raise ValueError(f"{name}: the similar pairs' summed squared distance under init "
                             f"is {100 * t:.3g}, too far from 1 for the ascent's steps; scale "
                             "the input or init.")
        with thread_limits(flops_per_step=4.0 * len(diffs) * d * d):
            if self.diagonal:
                x = self._mmc_diagonal(A0, pos, neg, name)
                M = np.diag(x * x)
                self.objective_ = float(mmc_objective(torch.tensor(x), torch.tensor(pos),
                                                      torch.tensor(neg), True, self.diagonal_c))
            else:
                M = self._mmc_full(A0, W, t, neg, name)
                M *= t / np.vdot(W, M)
                if not np.all(np.isfinite(M)):
                    raise ValueError(f"{name}: the ascent reached non-finite values; scale the "
                                     "input (or init) towards unit size.")
                L = torch.tensor(components_from_metric(M))
                self.objective_ = float(mmc_objective(L, torch.tensor(pos), torch.tensor(neg)))
        if not np.all(np.isfinite(M)):
            raise ValueError(f"{name}: the ascent reached non-finite values; scale the input "
                             "(or init) towards unit size.")
        self.components_ = components_from_metric(M)

    def _mmc_full(self, A0, W, t, neg, name):
        """metric-learn 0.7.0's projected gradient ascent on ``g``, its projections exact."""
        W_unit = W / np.linalg.norm(W)
        eps = _spread_eps(A0, neg)

        def direction(A):
            # the ascent direction of g orthogonal to the constraint's normal W, unit length
            value, grad = _log_spread(A, neg, eps=eps)
            grad = grad / np.linalg.norm(grad)
            step = grad - np.vdot(grad, W_unit) * W_unit
            norm = np.linalg.norm(step)
            # no ascent direction along the constraint (one feature, say): a stationary point
            return value, (step / norm if norm > 1e-12 else None)

        A, A_old, g_old = A0.copy(), None, -np.inf
        alpha, M = 0.1, None  # metric-learn's initial step size
        self.n_iter_, delta = 0, np.inf
        with IterationBar(self.verbose, self.max_iter, name) as bar:
            for cycle in range(self.max_iter):
                A, n_eigh = _project_constraints(A, W, t)
                g = _log_spread(A, neg, gradient=False, eps=eps)[0]
                if A_old is None or g > g_old + _RESOLUTION:
                    # an improving step: lengthen the next one; move on from here
                    alpha *= 1.05
                    A_old, g_old = A, g
                    M = direction(A)[1]
                    if M is None:
                        self.n_iter_, delta = cycle + 1, 0.0
                        break
                    A = A_old + alpha * M
                else:
                    # no gain beyond the resolution after projection: halve the step, retry from
                    # the last point
                    alpha /= 2.0
                    A = A_old + alpha * M
                self.n_iter_ = cycle + 1
                delta = alpha / np.linalg.norm(A_old)  # ||alpha M|| / ||A_old||, ||M|| = 1
                bar.update()
                bar.line(f"{name} iteration {cycle}: log spread {g_old:.6g}, step {delta:.3g}, "
                         f"{n_eigh} eigendecompositions")
                if delta < self.tol:
                    break
        if self.max_iter == 0:
            return _project_constraints(A0, W, t)[0]
        if delta >= self.tol and self.tol > 0:  # tol=0: max_iter steps asked for
            warn_user(f"{name} did not converge in max_iter={self.max_iter} iterations "
                      f"(relative step {delta:.3g} >= tol={self.tol}); raise max_iter.",
                      ConvergenceWarning)
        return A_old

    @torch_fit_modes()
    def _mmc_diagonal(self, A0, pos, neg, name):
        """Xing et al.'s Eq. 6 by L-BFGS on the square roots of the weights."""
        x0 = np.sqrt(np.clip(np.diag(A0), 0.0, None))
        P, N = torch.tensor(pos), torch.tensor(neg)

        def fun(flat):
            L = torch.tensor(flat, requires_grad=True)
            value = mmc_objective(L, P, N, True, self.diagonal_c)
            if not torch.isfinite(value):
                return np.inf, np.zeros_like(flat)
            value.backward()
            bar.line(f"{name} objective {float(value.detach()):.6g}")
            return float(value.detach()), L.grad.numpy().ravel()

        self.n_iter_ = 0
        if not self.max_iter:
            return x0
        with IterationBar(self.verbose, self.max_iter, name) as bar:
            run = run_lbfgs(fun, x0, max_iter=self.max_iter, tol=self.tol, bar=bar)
        self.n_iter_ = run.n_iter
        if run.cut_short:
            warn_user(f"{name} did not converge in max_iter={self.max_iter} L-BFGS "
                      "iterations; raise max_iter.", ConvergenceWarning)
        return run.x

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.required = True
        return tags


_PARAMS_DOC = """\
    max_iter : int, default=100
        Gradient steps at most (L-BFGS iterations when ``diagonal``); ``0``
        returns the start (projected onto the constraints).
    tol : float, default=1e-3
        The ascent stops when a step, relative to the size of ``M``, is below
        ``tol`` (metric-learn's rule and default); when ``diagonal``, L-BFGS
        stops when the objective's relative decrease is below ``tol``
        (``0``: ``max_iter`` steps, asked for, so no ``ConvergenceWarning``).
    init : {"identity", "covariance", "random"} or ndarray, default="identity"
        The start ``M``: the identity, the inverse covariance of the samples,
        a random SPD matrix, or a given PSD matrix.
    diagonal : bool, default=False
        Learn a diagonal ``M`` (feature weights) by Xing et al.'s Eq. 6.
    diagonal_c : float, default=1.0
        Weight of the dissimilar pairs' term when ``diagonal=True``.
    verbose : int, default=0
        ``1`` shows a progress bar over ``max_iter`` iterations, labelled "(at
        most)" (``tol`` usually ends the fit earlier); ``2`` also prints the
        objective at every iteration
        (metric-learn's lines at its ``verbose=True``).
    random_state : int, RandomState instance or None, default=None
        Draws ``init="random"``{extra}.
"""


class MMC(_MMCMixin, BasePairsLearner):
    """Mahalanobis Metric for Clustering (MMC) on labelled pairs.

    Maximises the summed (unsquared) distances of the dissimilar pairs while
    the summed squared distances of the similar pairs stay fixed (Xing et
    al. 2002), by metric-learn's projected gradient ascent: from ``init``,
    steps along the gradient orthogonal to the constraint's normal, each
    followed by the projection onto the constraint and the PSD cone; a step
    that gains lengthens the next by 5 %, one that does not is halved and
    retried. With ``diagonal=True`` it learns feature weights (their Eq. 6,
    by L-BFGS on their square roots).

    Parameters
    ----------
{params}    preprocessor : array-like of shape (n_samples, n_features) or callable, default=None
        When given, pairs are rows of 2 indices into it (a callable maps
        a 1-D array of indices to the 2-D array of their features).

    Attributes
    ----------
    components_ : ndarray of shape (n_features, n_features)
    objective_ : float
        The final value of :func:`mmc_objective`.
    n_iter_ : int
    threshold_ : float
    classes_ : ndarray of shape (2,)
    n_features_in_ : int
    preprocessor_ : ndarray, callable or None

    Notes
    -----
    metric-learn 0.7.0 projects by alternating the two projections, up to
    ``max_proj`` eigendecompositions a step, until the constraint holds
    within 1 %; skdml projects exactly (a 1-D search on the multiplier, one
    eigendecomposition a trial). A step must
    gain more than metric-learn's projections resolve (``log(1.01) / 2`` in
    ``log sum_D sqrt(d)``), so the ascent stops where metric-learn's stalls,
    short of Xing et al.'s optimum, whose low-rank metric suits k-NN less.
    Its metric tracks metric-learn's over the first steps
    (``tests/linear/test_mmc.py``).

    References
    ----------
    E. P. Xing, A. Y. Ng, M. I. Jordan and S. Russell. Distance Metric
    Learning, with Application to Clustering with Side-Information. NIPS 2002.

    Examples
    --------
    >>> import numpy as np
    >>> from skdml.constraints import Constraints
    >>> from skdml.linear import MMC
    >>> rng = np.random.RandomState(0)
    >>> y = np.repeat([0, 1, 2], 10)
    >>> X = np.c_[3.0 * y + 0.3 * rng.randn(30), 5.0 * rng.randn(30)]
    >>> pairs, labels = Constraints(y).labeled_pairs(20, random_state=0)
    >>> mmc = MMC(preprocessor=X).fit(pairs, labels)
    >>> M = mmc.get_mahalanobis_matrix()
    >>> bool(M[0, 0] > 10 * M[1, 1]), mmc.score(pairs, labels) > 0.9
    (True, True)
    """

    _parameter_constraints: dict = {**_CONSTRAINTS, "preprocessor": ["array-like", callable, None]}

    def __init__(self, max_iter=100, tol=1e-3, init="identity", diagonal=False, diagonal_c=1.0,
                 verbose=0, random_state=None, preprocessor=None):
        self.max_iter = max_iter
        self.tol = tol
        self.init = init
        self.diagonal = diagonal
        self.diagonal_c = diagonal_c
        self.verbose = verbose
        self.random_state = random_state
        self.preprocessor = preprocessor

    def _fit_tuples(self, pairs, y):
        self._mmc(pairs, y, check_random_state(self.random_state))


class MMC_Supervised(SupervisedPairsMixin, _MMCMixin, BaseMahalanobis):
    """MMC on similar and dissimilar pairs drawn from class labels.

    Parameters
    ----------
{params}{n_constraints}
    Attributes
    ----------
    components_ : ndarray of shape (n_features, n_features)
    objective_ : float
    n_iter_ : int
    classes_ : ndarray of shape (n_classes,)
    n_features_in_ : int
    feature_names_in_ : ndarray of shape (`n_features_in_`,)
        Defined when ``X`` has feature names that are all strings.

    Examples
    --------
    >>> from sklearn.datasets import load_iris
    >>> from skdml.linear import MMC_Supervised
    >>> X, y = load_iris(return_X_y=True)
    >>> mmc = MMC_Supervised(n_constraints=100, random_state=0).fit(X, y)
    >>> mmc.transform(X).shape
    (150, 4)
    """

    _parameter_constraints: dict = {
        **_CONSTRAINTS, **N_CONSTRAINTS}

    def __init__(self, max_iter=100, tol=1e-3, init="identity", diagonal=False, diagonal_c=1.0,
                 n_constraints=None, verbose=0, random_state=None):
        self.max_iter = max_iter
        self.tol = tol
        self.init = init
        self.diagonal = diagonal
        self.diagonal_c = diagonal_c
        self.n_constraints = n_constraints
        self.verbose = verbose
        self.random_state = random_state

    _fit_pairs = _MMCMixin._mmc


if MMC.__doc__ is not None:  # docstrings kept (not python -OO)
    MMC.__doc__ = MMC.__doc__.replace("{params}", _PARAMS_DOC.replace("{extra}", ""))
    MMC_Supervised.__doc__ = MMC_Supervised.__doc__.replace(
        "{n_constraints}", n_constraints_doc("Pairs of each kind")).replace(
        "{params}", _PARAMS_DOC.replace("{extra}", ", and the pairs"))
