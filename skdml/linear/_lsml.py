"""Least Squared-residual Metric Learning (Liu et al., CIKM 2012): relative comparisons."""

from __future__ import annotations

from numbers import Integral

import numpy as np
import torch
from sklearn.base import _fit_context
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_array, check_random_state
from sklearn.utils._param_validation import StrOptions

from .._training._lbfgs import run_lbfgs
from .._training._progress import IterationBar
from .._utils import thread_limits, torch_fit_modes, transactional_fit, warn_user
from .._utils._params import StrictInterval, non_negative_real
from ._base import BaseMahalanobis
from ._classic import (
    N_CONSTRAINTS,
    SupervisedMixin,
    components_from_metric,
    constraint_count,
    n_constraints_doc,
    prior_metric,
    unique_points,
    warn_if_prior_kept,
)
from ._weakly import BaseQuadrupletsLearner

__all__ = ["LSML", "LSML_Supervised", "lsml_loss"]

_CONSTRAINTS = {
    "prior": [StrOptions({"identity", "covariance", "random"}), np.ndarray],
    "max_iter": [StrictInterval(Integral, 0, None, closed="left")],
    "tol": [non_negative_real()],
    "verbose": ["verbose"],
    "random_state": ["random_state"],
}


def lsml_loss(L, vab, vcd, weights, prior_inv):
    r"""LSML's objective under ``M = L^T L`` (torch, differentiable).

    :math:`\sum_q w_q [\|L v_{ab}\| - \|L v_{cd}\|]_+^2 + \mathrm{tr}(M P^{-1}) - \log\det M`
    (Liu et al. 2012, Eq. 5 with the LogDet regulariser towards the prior ``P``).
    """
    dab = ((vab @ L.T) ** 2).sum(1)
    dcd = ((vcd @ L.T) ** 2).sum(1)
    violated = dab > dcd
    residual = torch.sqrt(dab[violated]) - torch.sqrt(dcd[violated])
    M = L.T @ L
    return (weights[violated] * residual ** 2).sum() + (M * prior_inv).sum() \
        - 2.0 * torch.linalg.slogdet(L)[1]


class _LSMLMixin:
    @torch_fit_modes()
    def _lsml(self, quadruplets, weights, rng):
        vab = quadruplets[:, 0] - quadruplets[:, 1]
        vcd = quadruplets[:, 2] - quadruplets[:, 3]
        keep = np.any(vcd, axis=1)
        if not keep.all():
            warn_user(f"{type(self).__name__}: {int((~keep).sum())} quadruplet(s) whose second "
                      "pair is one sample twice can never hold; they are ignored.")
        if not keep.any():
            raise ValueError(f"{type(self).__name__}: every quadruplet's second pair is one "
                             "sample twice (X constant, or the quadruplets malformed), so none "
                             "can hold.")
        w = np.ones(len(vab)) if weights is None else weights
        vab, vcd, w = vab[keep], vcd[keep], w[keep]
        if not np.any(w > 0):
            raise ValueError("The quadruplet weights sum to 0.")
        w = w / w.max()  # finite weights whose sum overflows (1e308 each) normalise too
        w = w / w.sum()
        P = prior_metric(self.prior, unique_points(quadruplets, random_state=rng), "prior", rng,
                         strict_pd=True)
        L0 = components_from_metric(P)
        d = L0.shape[1]
        args = [torch.tensor(a, dtype=torch.float64) for a in (vab, vcd, w, np.linalg.inv(P))]
        bar = IterationBar(self.verbose, self.max_iter, type(self).__name__)
        with thread_limits(flops_per_step=4.0 * len(vab) * d * d):
            def fun(flat):
                L = torch.tensor(flat.reshape(d, d), requires_grad=True)
                value = lsml_loss(L, *args)
                if not torch.isfinite(value):  # a singular step: the line search backs off
                    return np.inf, np.zeros_like(flat)
                value.backward()
                bar.line(f"{type(self).__name__} loss {float(value.detach()):.6g}")
                return float(value.detach()), L.grad.numpy().ravel()


            L, self.n_iter_ = L0, 0
            if self.max_iter:
                with bar:
                    run = run_lbfgs(fun, L0.ravel(), max_iter=self.max_iter, tol=self.tol,
                                    bar=bar)
                L, self.n_iter_ = run.x.reshape(d, d), run.n_iter
                if run.cut_short:
                    warn_user(f"{type(self).__name__} did not converge in max_iter="
                              f"{self.max_iter} L-BFGS iterations; raise max_iter.",
                              ConvergenceWarning)
            self.objective_ = fun(L.ravel())[0] if np.all(np.isfinite(L)) else np.inf
        if not np.isfinite(self.objective_):  # L-BFGS-B can report success from a NaN point
            raise ValueError(f"{type(self).__name__}: the loss is not finite at the start or "
                             "where L-BFGS stopped (distances beyond float64's range); scale "
                             "the input towards unit size.")
        M = L.T @ L
        # a quadruplet violated under the prior: else the prior is the solution, and kept
        violated = bool(np.any(np.einsum("ij,jk,ik->i", vab, P, vab) >
                               np.einsum("ij,jk,ik->i", vcd, P, vcd)))
        warn_if_prior_kept(self, M, P, violated)
        self.components_ = components_from_metric(M)


_PARAMS_DOC = """\
    prior : {"identity", "covariance", "random"} or ndarray, default="identity"
        The matrix ``P`` the LogDet term regularises towards, and the start:
        the identity, the inverse covariance of the samples, a random SPD
        matrix, or a given SPD matrix of shape (n_features, n_features).
    max_iter : int, default=1000
        L-BFGS iterations at most; ``0`` returns the prior.
    tol : float, default=1e-6
        L-BFGS stops when the relative decrease of the loss is below ``tol``
        (``0``: ``max_iter`` iterations, asked for, so no ``ConvergenceWarning``).
    verbose : int, default=0
        ``1`` shows a progress bar over ``max_iter`` iterations, labelled "(at
        most)" (``tol`` usually ends the fit earlier); ``2`` also prints the loss at
        every evaluation
        (metric-learn's lines at its ``verbose=True``).
    random_state : int, RandomState instance or None, default=None
        Draws ``prior="random"``{extra}.
"""


class LSML(_LSMLMixin, BaseQuadrupletsLearner):
    """Least Squared-residual Metric Learning (LSML) on quadruplets.

    A quadruplet ``(a, b, c, d)`` says ``(a, b)`` should be closer than
    ``(c, d)``. LSML minimises the weighted squared residuals
    ``[d(a, b) - d(c, d)]_+^2`` of the violated quadruplets (unsquared
    learned distances) plus the LogDet divergence to a prior, by L-BFGS on
    ``L`` (``M = L^T L``), with the gradient from torch's autograd.

    Parameters
    ----------
{params}    preprocessor : array-like of shape (n_samples, n_features) or callable, default=None
        When given, quadruplets are rows of 4 indices into it (a callable maps
        a 1-D array of indices to the 2-D array of their features).

    Attributes
    ----------
    components_ : ndarray of shape (n_features, n_features)
    n_iter_ : int
    objective_ : float
        The final objective.
    n_features_in_ : int
    preprocessor_ : ndarray, callable or None

    References
    ----------
    E. Y. Liu, Z. Guo, X. Zhang, V. Jojic and W. Wang. Metric Learning from
    Relative Comparisons by Minimizing Squared Residual. ICDM 2012.

    Examples
    --------
    >>> import numpy as np
    >>> from skdml.linear import LSML
    >>> rng = np.random.RandomState(0)
    >>> X = np.c_[np.repeat([0.0, 3.0], 20) + 0.2 * rng.randn(40), 3.0 * rng.randn(40)]
    >>> same = rng.randint(0, 20, (50, 2)) + rng.randint(0, 2, (50, 1)) * 20
    >>> diff = np.c_[rng.randint(0, 20, 50), rng.randint(20, 40, 50)]
    >>> quadruplets = np.c_[same, diff]  # same-cluster pairs closer than cross-cluster ones
    >>> lsml = LSML(preprocessor=X).fit(quadruplets)
    >>> bool(lsml.score(quadruplets) > LSML(preprocessor=X, max_iter=0).fit(
    ...     quadruplets).score(quadruplets))
    True
    """

    _parameter_constraints: dict = {**_CONSTRAINTS, "preprocessor": ["array-like", callable, None]}

    def __init__(self, prior="identity", max_iter=1000, tol=1e-6, verbose=0, random_state=None,
                 preprocessor=None):
        self.prior = prior
        self.max_iter = max_iter
        self.tol = tol
        self.verbose = verbose
        self.random_state = random_state
        self.preprocessor = preprocessor

    @_fit_context(prefer_skip_nested_validation=True)
    @transactional_fit
    def fit(self, quadruplets, y=None, weights=None):
        """Fit LSML on quadruplets.

        Parameters
        ----------
        quadruplets : array-like of shape (n, 4, n_features) or (n, 4)
            The quadruplets, or indices of samples of ``preprocessor``.
        y : None
            Ignored.
        weights : array-like of shape (n,), default=None
            Non-negative weight of each quadruplet (normalised to sum 1).

        Returns
        -------
        self : object
            The fitted learner.
        """
        quadruplets = self._validate_tuples(quadruplets, reset=True)
        if weights is not None:
            weights = check_array(weights, ensure_2d=False, dtype=np.float64,
                                  input_name="weights")
            if weights.shape != (len(quadruplets),) or np.any(weights < 0):
                raise ValueError(f"weights must be {len(quadruplets)} non-negative numbers, one "
                                 "per quadruplet.")
        self._lsml(quadruplets, weights, check_random_state(self.random_state))
        return self

    def _fit_tuples(self, tuples, y):
        self._lsml(tuples, None, check_random_state(self.random_state))


class LSML_Supervised(SupervisedMixin, _LSMLMixin, BaseMahalanobis):
    """LSML on quadruplets drawn from class labels.

    ``n_constraints`` similar pairs ``(a, b)`` and as many dissimilar pairs
    ``(c, d)`` are drawn (:meth:`skdml.constraints.Constraints.positive_negative_pairs`,
    ``same_length=True``) and paired into quadruplets ``(a, b, c, d)``.

    Parameters
    ----------
{params}{n_constraints}
    Attributes
    ----------
    components_ : ndarray of shape (n_features, n_features)
    n_iter_ : int
    objective_ : float
    classes_ : ndarray of shape (n_classes,)
    n_features_in_ : int
    feature_names_in_ : ndarray of shape (`n_features_in_`,)
        Defined when ``X`` has feature names that are all strings.

    Examples
    --------
    >>> from sklearn.datasets import load_iris
    >>> from skdml.linear import LSML_Supervised
    >>> X, y = load_iris(return_X_y=True)
    >>> lsml = LSML_Supervised(n_constraints=100, random_state=0).fit(X, y)
    >>> lsml.transform(X).shape
    (150, 4)
    """

    _parameter_constraints: dict = {
        **_CONSTRAINTS, **N_CONSTRAINTS}

    def __init__(self, prior="identity", max_iter=1000, tol=1e-6, n_constraints=None, verbose=0,
                 random_state=None):
        self.prior = prior
        self.max_iter = max_iter
        self.tol = tol
        self.n_constraints = n_constraints
        self.verbose = verbose
        self.random_state = random_state

    def _fit_labels(self, X, y, rng):
        from ..constraints import Constraints

        a, b, c, d = Constraints(y, unknown_label=None)._positive_negative_pairs(
            constraint_count(self.n_constraints, y), True, rng,
            warn=self.n_constraints is not None)  # the default: at most the pairs that exist
        if len(a) == 0:
            raise ValueError("LSML_Supervised: no class has 2 samples, so no similar pair can "
                             "be drawn.")
        self._lsml(X[np.column_stack([a, b, c, d])], None, rng)


if LSML.__doc__ is not None:  # docstrings kept (not python -OO)
    LSML.__doc__ = LSML.__doc__.replace("{params}", _PARAMS_DOC.replace("{extra}", ""))
    LSML_Supervised.__doc__ = LSML_Supervised.__doc__.replace(
        "{n_constraints}", n_constraints_doc("Quadruplets")).replace(
        "{params}", _PARAMS_DOC.replace("{extra}", ", and the quadruplets"))
