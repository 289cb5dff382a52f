"""Mahalanobis Metric for Clustering (Xing et al., NIPS 2002): spread dissimilar pairs."""

from __future__ import annotations

from numbers import Integral, Real

import numpy as np
import torch
from scipy.optimize import minimize
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import StrOptions

from .._utils import thread_limits, warn_user
from .._utils._params import StrictInterval
from ._base import BaseMahalanobis
from ._classic import (
    SupervisedPairsMixin,
    components_from_metric,
    prior_metric,
    unique_points,
)
from ._weakly import BasePairsLearner

__all__ = ["MMC", "MMC_Supervised", "mmc_objective"]

_CONSTRAINTS = {
    "max_iter": [StrictInterval(Integral, 0, None, closed="left")],
    "tol": [StrictInterval(Real, 0, None, closed="left")],
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
        if self.diagonal:
            x0, bounds = np.sqrt(np.clip(np.diag(A0), 0.0, None)), None
        else:
            x0, bounds = components_from_metric(A0).ravel(), None
        P, N = torch.tensor(pos), torch.tensor(neg)
        with thread_limits(flops_per_step=4.0 * len(diffs) * d * d):
            def fun(flat):
                L = torch.tensor(flat if self.diagonal else flat.reshape(d, d),
                                 requires_grad=True)
                value = mmc_objective(L, P, N, self.diagonal, self.diagonal_c)
                if not torch.isfinite(value):
                    return np.inf, np.zeros_like(flat)
                value.backward()
                if self.verbose:
                    print(f"{name} objective {float(value):.6g}")
                return float(value.detach()), L.grad.numpy().ravel()

            x, self.n_iter_ = x0, 0
            if self.max_iter:
                result = minimize(fun, x0, jac=True, method="L-BFGS-B", bounds=bounds,
                                  options={"maxiter": self.max_iter, "ftol": self.tol,
                                           "gtol": 0.0})
                # n_iter_ >= 1: a start already optimal took one (checking) iteration
                x, self.n_iter_ = result.x, max(int(result.nit), 1)
                if result.status == 1:
                    warn_user(f"{name} did not converge in max_iter={self.max_iter} L-BFGS "
                              "iterations; raise max_iter.", ConvergenceWarning)
            self.objective_ = fun(x)[0]
        if self.diagonal:
            M = np.diag(x * x)
        else:
            L = x.reshape(d, d)
            M = L.T @ L
            # Xing et al.'s scale: the similar pairs' summed squared distance at t, set as
            # metric-learn sets it (a hundredth of its value under the start)
            t = np.einsum("ij,jk,ik->", pos, A0, pos) / 100.0
            M *= t / np.einsum("ij,jk,ik->", pos, M, pos)
        self.components_ = components_from_metric(M)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.required = True
        return tags


_PARAMS_DOC = """\
    max_iter : int, default=100
        L-BFGS iterations at most; ``0`` returns the start.
    tol : float, default=1e-6
        L-BFGS stops when the relative decrease of the objective is below ``tol``.
    init : {"identity", "covariance", "random"} or ndarray, default="identity"
        The start ``M``: the identity, the inverse covariance of the samples,
        a random SPD matrix, or a given PSD matrix.
    diagonal : bool, default=False
        Learn a diagonal ``M`` (feature weights) by Xing et al.'s Eq. 6.
    diagonal_c : float, default=1.0
        Weight of the dissimilar pairs' term when ``diagonal=True``.
    verbose : int, default=0
        Print the objective at every evaluation.
    random_state : int, RandomState instance or None, default=None
        Draws ``init="random"``{extra}.
"""


class MMC(_MMCMixin, BasePairsLearner):
    """Mahalanobis Metric for Clustering (MMC) on labelled pairs.

    Maximises the summed (unsquared) distances of the dissimilar pairs while
    the summed squared distances of the similar pairs stay fixed (Xing et
    al. 2002). skdml solves the equivalent unconstrained, scale-free
    problem in ``L`` (``M = L^T L``, so ``M`` stays PSD) by L-BFGS with
    torch's autograd, then scales ``M`` as metric-learn does. With
    ``diagonal=True`` it learns feature weights (their Eq. 6, by L-BFGS on
    their square roots).

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
    metric-learn 0.7.0 alternates gradient steps with projections onto the
    constraint and the PSD cone (``max_proj`` of them a step); skdml's
    reformulation needs neither and reaches its objective or a better one
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

    def __init__(self, max_iter=100, tol=1e-6, init="identity", diagonal=False, diagonal_c=1.0,
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
{params}    n_constraints : int, default=None
        Pairs of each kind; ``None``: ``20 * n_classes ** 2`` (metric-learn's default).

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
        **_CONSTRAINTS, "n_constraints": [StrictInterval(Integral, 1, None, closed="left"), None]}

    def __init__(self, max_iter=100, tol=1e-6, init="identity", diagonal=False, diagonal_c=1.0,
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
        "{params}", _PARAMS_DOC.replace("{extra}", ", and the pairs"))
