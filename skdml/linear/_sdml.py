"""Sparse Determinant Metric Learning (Qi et al., ICML 2009): a graphical lasso on pairs."""

from __future__ import annotations

from numbers import Integral, Real

import numpy as np
from sklearn.covariance import graphical_lasso
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import StrOptions

from .._utils import only_thread, quiet_warnings, warn_user
from .._utils._params import StrictInterval, non_negative_real
from ._base import BaseMahalanobis
from ._classic import (
    N_CONSTRAINTS,
    SupervisedPairsMixin,
    components_from_metric,
    n_constraints_doc,
    prior_metric,
    unique_points,
    warn_if_prior_kept,
)
from ._weakly import BasePairsLearner

__all__ = ["SDML", "SDML_Supervised"]

_CONSTRAINTS = {
    "balance_param": [non_negative_real()],
    "sparsity_param": [StrictInterval(Real, 0, None, closed="neither")],
    "prior": [StrOptions({"identity", "covariance", "random"}), np.ndarray],
    # scikit-learn's graphical lasso counts its iterations in a C unsigned int
    "max_iter": [StrictInterval(Integral, 1, 2**32 - 1, closed="both")],
    "tol": [StrictInterval(Real, 0, None, closed="neither")],
    "verbose": ["verbose"],
    "random_state": ["random_state"],
}


class _SDMLMixin:
    def _sdml(self, pairs, y, rng):
        name = type(self).__name__
        if pairs.shape[2] < 2:
            raise ValueError(f"{name} needs at least 2 features (a graphical lasso on a 1 x 1 "
                             "matrix); got n_features=1.")
        if not np.any(pairs[:, 0] != pairs[:, 1]):
            raise ValueError(f"{name}: every pair joins two equal points (X constant?); there "
                             "is no distance between samples to learn.")
        P = prior_metric(self.prior, unique_points(pairs, random_state=rng), "prior", rng,
                         strict_pd=True)
        diff = pairs[:, 0] - pairs[:, 1]
        S = np.linalg.inv(P) + self.balance_param * (diff.T * y) @ diff
        S = (S + S.T) / 2.0
        self.min_eigenvalue_ = float(np.linalg.eigvalsh(S).min())
        advice = ("lower balance_param (e.g. 1e-4), raise sparsity_param or use "
                  "prior='covariance'")
        try:
            # scikit-learn's ConvergenceWarning (said below, as SDML's, at the user's line)
            with quiet_warnings({"category": ConvergenceWarning,
                                 "module": r"sklearn\.covariance"}):
                # scikit-learn's coordinate descent draws (and ignores) a number from numpy's
                # global generator: a seeded fit leaves the user's stream where it was, when
                # no other thread of the program could have drawn from it meanwhile (putting
                # it back under another thread's draws repeated them)
                global_state = np.random.get_state() if only_thread() else None
                try:
                    _, M, costs, self.n_iter_ = graphical_lasso(
                        S, alpha=self.sparsity_param, max_iter=self.max_iter, tol=self.tol,
                        verbose=bool(self.verbose), return_costs=True, return_n_iter=True)
                finally:
                    if global_state is not None and only_thread():
                        np.random.set_state(global_state)
        except (FloatingPointError, ValueError, np.linalg.LinAlgError) as exc:
            raise ValueError(
                f"{name}: the graphical lasso failed ({exc}). The matrix it is given, the "
                f"prior's inverse plus balance_param x the pairs' scatter, has smallest "
                f"eigenvalue {self.min_eigenvalue_:.3g}; when it is negative the SDML problem "
                f"may have no minimum: {advice}.") from exc
        # its own last duality gap, scikit-learn's stopping rule (not the warnings recorded
        # meanwhile: those of every thread; nor n_iter_, which is max_iter also for a run that
        # converged at its last iteration)
        truncated = not (costs and abs(costs[-1][1]) < self.tol)
        if not np.all(np.isfinite(M)) or np.linalg.eigvalsh((M + M.T) / 2).min() < 0:
            if self.min_eigenvalue_ < 0:  # the problem itself may have no minimum
                advice = (f"the matrix it is given has smallest eigenvalue "
                          f"{self.min_eigenvalue_:.3g} < 0, so the SDML problem may have no "
                          f"minimum: {advice} (balance_param=0.5 and prior='identity', "
                          "metric-learn's defaults, fail so on most data)")
            elif truncated:  # stopped before converging: the iterate, not the problem
                advice = (f"it stopped at max_iter={self.max_iter} before converging: raise "
                          f"max_iter (if that does not help: {advice})")
            raise ValueError(f"{name}: the graphical lasso returned a matrix that is not "
                             f"positive semi-definite; {advice}.")
        if truncated:
            warn_user(f"{name}: the graphical lasso did not converge in max_iter="
                      f"{self.max_iter} iterations; raise max_iter.", ConvergenceWarning)
        warn_if_prior_kept(self, M, P)
        self.components_ = components_from_metric(M)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.required = True
        return tags


_PARAMS_DOC = """\
    balance_param : float, default=0.5
        Weight ``eta`` of the pairs' term ``tr(M K)``, ``K`` the scatter of the
        similar pairs minus that of the dissimilar ones. metric-learn's default:
        with ``prior="identity"`` it leaves the problem without a minimum on
        most data (iris, wine, digits: the fit says so); ``1e-4`` with
        ``prior="covariance"`` fits them.
    sparsity_param : float, default=0.01
        Weight ``lambda`` of the L1 penalty on ``M`` (the graphical lasso's ``alpha``).
    prior : {"identity", "covariance", "random"} or ndarray, default="identity"
        The prior ``P`` (the identity, the inverse covariance of the samples,
        a random SPD matrix or a given SPD matrix).
    max_iter : int, default=100
        Iterations of the graphical lasso at most (from 1 to ``2**32 - 1``, the
        graphical lasso's own bound).
    tol : float, default=1e-4
        Tolerance of the graphical lasso.
    verbose : int, default=0
        Print the graphical lasso's progress.
    random_state : int, RandomState instance or None, default=None
        Draws ``prior="random"``{extra}. scikit-learn's graphical lasso also
        draws from numpy's global generator (an unused seed); the fit puts that
        stream back where it found it when no other (non-daemon) thread exists,
        and otherwise leaves it advanced, as ``GraphicalLasso`` does: putting it
        back under another thread's draws would repeat them.
"""


class SDML(_SDMLMixin, BasePairsLearner):
    r"""Sparse Determinant Metric Learning (SDML) on labelled pairs.

    Solves :math:`\min_{M \succ 0} \mathrm{tr}(M (P^{-1} + \eta K)) - \log\det M
    + \lambda \|M\|_1` (Qi et al. 2009), a graphical lasso on the matrix
    :math:`P^{-1} + \eta K`, with scikit-learn's
    :func:`~sklearn.covariance.graphical_lasso` (which, like metric-learn,
    leaves the diagonal of ``M`` out of the L1 penalty). ``K`` sums
    :math:`y (x - x')(x - x')^T` over the pairs: similar pairs are pulled
    in, dissimilar ones pushed out, and ``M`` stays close to the prior and
    sparse.

    Parameters
    ----------
{params}    preprocessor : array-like of shape (n_samples, n_features) or callable, default=None
        When given, pairs are rows of 2 indices into it (a callable maps
        a 1-D array of indices to the 2-D array of their features).

    Attributes
    ----------
    components_ : ndarray of shape (n_features, n_features)
    min_eigenvalue_ : float
        Smallest eigenvalue of the graphical lasso's input (negative: a
        large ``balance_param`` may leave the problem without a minimum).
    n_iter_ : int
    threshold_ : float
    classes_ : ndarray of shape (2,)
    n_features_in_ : int
    preprocessor_ : ndarray, callable or None

    Notes
    -----
    metric-learn 0.7.0 passes ``cov_init`` to scikit-learn's
    ``graphical_lasso``, which no longer takes it: its SDML raises a
    ``RuntimeError`` without the optional skggm solver, on every
    scikit-learn it supports. skdml calls the solver without it (with the
    keyword removed, metric-learn's result is skdml's:
    ``tests/linear/test_sdml.py``).

    References
    ----------
    G.-J. Qi, J. Tang, Z.-J. Zha, T.-S. Chua and H.-J. Zhang. An Efficient
    Sparse Metric Learning in High-Dimensional Space via L1-Penalized
    Log-Determinant Regularization. ICML 2009.

    Examples
    --------
    >>> import numpy as np
    >>> from skdml.constraints import Constraints
    >>> from skdml.linear import SDML
    >>> rng = np.random.RandomState(0)
    >>> y = np.repeat([0, 1, 2], 10)
    >>> X = np.c_[3.0 * y + 0.3 * rng.randn(30), 5.0 * rng.randn(30)]
    >>> pairs, labels = Constraints(y).labeled_pairs(20, random_state=0)
    >>> sdml = SDML(balance_param=1e-2, prior="covariance", preprocessor=X).fit(pairs, labels)
    >>> sdml.score(pairs, labels) > 0.9
    True
    """

    _parameter_constraints: dict = {**_CONSTRAINTS, "preprocessor": ["array-like", callable, None]}

    def __init__(self, balance_param=0.5, sparsity_param=0.01, prior="identity", max_iter=100,
                 tol=1e-4, verbose=0, random_state=None, preprocessor=None):
        self.balance_param = balance_param
        self.sparsity_param = sparsity_param
        self.prior = prior
        self.max_iter = max_iter
        self.tol = tol
        self.verbose = verbose
        self.random_state = random_state
        self.preprocessor = preprocessor

    def _fit_tuples(self, pairs, y):
        self._sdml(pairs, y, check_random_state(self.random_state))


class SDML_Supervised(SupervisedPairsMixin, _SDMLMixin, BaseMahalanobis):
    """SDML on similar and dissimilar pairs drawn from class labels.

    Parameters
    ----------
{params}{n_constraints}
    Attributes
    ----------
    components_ : ndarray of shape (n_features, n_features)
    min_eigenvalue_ : float
    n_iter_ : int
    classes_ : ndarray of shape (n_classes,)
    n_features_in_ : int
    feature_names_in_ : ndarray of shape (`n_features_in_`,)
        Defined when ``X`` has feature names that are all strings.

    Examples
    --------
    >>> from sklearn.datasets import load_iris
    >>> from skdml.linear import SDML_Supervised
    >>> X, y = load_iris(return_X_y=True)
    >>> sdml = SDML_Supervised(balance_param=1e-4, prior="covariance", random_state=0)
    >>> sdml.fit(X, y).transform(X).shape
    (150, 4)
    """

    _parameter_constraints: dict = {
        **_CONSTRAINTS, **N_CONSTRAINTS}

    def __init__(self, balance_param=0.5, sparsity_param=0.01, prior="identity", max_iter=100,
                 tol=1e-4, n_constraints=None, verbose=0, random_state=None):
        self.balance_param = balance_param
        self.sparsity_param = sparsity_param
        self.prior = prior
        self.max_iter = max_iter
        self.tol = tol
        self.n_constraints = n_constraints
        self.verbose = verbose
        self.random_state = random_state

    _fit_pairs = _SDMLMixin._sdml


if SDML.__doc__ is not None:  # docstrings kept (not python -OO)
    SDML.__doc__ = SDML.__doc__.replace("{params}", _PARAMS_DOC.replace("{extra}", ""))
    SDML_Supervised.__doc__ = SDML_Supervised.__doc__.replace(
        "{n_constraints}", n_constraints_doc("Pairs of each kind")).replace(
        "{params}", _PARAMS_DOC.replace("{extra}", ", and the pairs"))
