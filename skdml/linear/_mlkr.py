"""Metric Learning for Kernel Regression (Weinberger & Tesauro, AISTATS 2007)."""

from __future__ import annotations

from numbers import Integral, Real

import numpy as np
import torch
from scipy.optimize import minimize
from sklearn.base import _fit_context
from sklearn.decomposition import PCA
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import StrOptions
from sklearn.utils.validation import validate_data

from .._utils import thread_limits, transactional_fit, warn_user
from .._utils._params import StrictInterval
from ._base import BaseMahalanobis, check_n_components

__all__ = ["MLKR", "mlkr_loss"]

#: Rows of the kernel matrix held at once (memory: block x n_samples).
BLOCK_ELEMENTS = 2 ** 22


class MLKR(BaseMahalanobis):
    r"""Metric Learning for Kernel Regression (MLKR).

    Learns ``L`` so that Nadaraya-Watson regression with a Gaussian kernel
    in the embedding predicts the targets well: it minimises the
    leave-one-out squared error

    .. math::

        \sum_i (y_i - \hat y_i)^2, \qquad
        \hat y_i = \frac{\sum_{j \neq i} y_j\, e^{-\|L(x_i - x_j)\|^2}}
                        {\sum_{j \neq i} e^{-\|L(x_i - x_j)\|^2}},

    by L-BFGS, with the gradient from torch's autograd (rows in blocks, so
    memory is O(block x n_samples), not O(n_samples^2)).

    Parameters
    ----------
    n_components : int, default=None
        Embedding dimension; ``None``: ``n_features``.
    init : {"auto", "identity", "pca", "random"} or ndarray, default="auto"
        The start: ``"auto"`` is the identity when ``n_components`` equals
        ``n_features``, PCA otherwise; or an array of shape
        (n_components, n_features). The kernel width is that of ``L``: scale
        the input (e.g. ``StandardScaler``) so that the start is sensible.
    max_iter : int, default=1000
        L-BFGS iterations at most; ``0`` returns the start.
    tol : float, default=1e-6
        L-BFGS stops when the relative decrease of the loss is below ``tol``.
    verbose : int, default=0
        Print the loss at every iteration.
    random_state : int, RandomState instance or None, default=None
        Draws ``init="random"``.

    Attributes
    ----------
    components_ : ndarray of shape (n_components, n_features)
    n_iter_ : int
    loss_ : float
        The final leave-one-out squared error.
    initial_loss_ : float
        The same at the start.
    n_features_in_ : int
    feature_names_in_ : ndarray of shape (`n_features_in_`,)
        Defined when ``X`` has feature names that are all strings.

    References
    ----------
    K. Q. Weinberger and G. Tesauro. Metric Learning for Kernel Regression.
    AISTATS 2007.

    Examples
    --------
    >>> import numpy as np
    >>> from skdml.linear import MLKR
    >>> rng = np.random.RandomState(0)
    >>> X = rng.randn(80, 4)
    >>> y = np.sin(2 * X[:, 0])  # only feature 1 matters
    >>> mlkr = MLKR(max_iter=50).fit(X, y)
    >>> bool(mlkr.loss_ < 0.5 * mlkr.initial_loss_)
    True
    >>> weights = np.linalg.norm(mlkr.components_, axis=0)
    >>> int(np.argmax(weights))
    0
    """

    _parameter_constraints: dict = {
        "n_components": [StrictInterval(Integral, 1, None, closed="left"), None],
        "init": [StrOptions({"auto", "identity", "pca", "random"}), np.ndarray],
        "max_iter": [StrictInterval(Integral, 0, None, closed="left")],
        "tol": [StrictInterval(Real, 0, None, closed="left")],
        "verbose": ["verbose"],
        "random_state": ["random_state"],
    }

    def __init__(self, n_components=None, init="auto", max_iter=1000, tol=1e-6, verbose=0,
                 random_state=None):
        self.n_components = n_components
        self.init = init
        self.max_iter = max_iter
        self.tol = tol
        self.verbose = verbose
        self.random_state = random_state

    @_fit_context(prefer_skip_nested_validation=True)
    @transactional_fit
    def fit(self, X, y):
        """Fit MLKR on real-valued targets.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)
            Real-valued targets.

        Returns
        -------
        self : object
            The fitted estimator.
        """
        X, y = validate_data(self, X, y, dtype=np.float64, y_numeric=True, ensure_min_samples=2)
        n, d = X.shape
        dim = check_n_components(self.n_components, d)
        L0 = self._initial(X, dim, check_random_state(self.random_state))
        Xt, yt = torch.tensor(X), torch.tensor(y, dtype=torch.float64)
        with thread_limits(flops_per_step=4.0 * n * n * dim):
            def fun(flat):
                L = torch.tensor(flat.reshape(dim, d), requires_grad=True)
                value = mlkr_loss(L, Xt, yt, backward=True)
                if not np.isfinite(value):
                    raise FloatingPointError(f"MLKR: non-finite loss ({value}); the fit is "
                                             "discarded. Scale the input.")
                if self.verbose:
                    print(f"MLKR loss {value:.6g}")
                return value, L.grad.numpy().ravel()

            self.initial_loss_ = fun(L0.ravel())[0]
            L, self.n_iter_, self.loss_ = L0, 0, self.initial_loss_
            if self.max_iter:
                result = minimize(fun, L0.ravel(), jac=True, method="L-BFGS-B",
                                  options={"maxiter": self.max_iter, "ftol": self.tol,
                                           "gtol": 0.0})
                # n_iter_ >= 1: a start already optimal took one (checking) iteration
                L, self.n_iter_ = result.x.reshape(dim, d), max(int(result.nit), 1)
                self.loss_ = float(result.fun)
                if result.status == 1:
                    warn_user(f"MLKR did not converge in max_iter={self.max_iter} L-BFGS "
                              "iterations; raise max_iter.", ConvergenceWarning)
        self.components_ = L
        return self

    def _initial(self, X, dim, rng):
        d = X.shape[1]
        init = self.init
        if isinstance(init, np.ndarray):
            if init.shape != (dim, d):
                raise ValueError(f"init must have shape (n_components, n_features) = ({dim}, "
                                 f"{d}); got {init.shape}.")
            return np.asarray(init, dtype=np.float64).copy()
        if init == "auto":
            init = "identity" if dim == d else "pca"
        if init == "identity":
            return np.eye(dim, d)
        if init == "random":
            return rng.randn(dim, d) / np.sqrt(d)
        return PCA(n_components=dim, random_state=rng).fit(X).components_

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.required = True
        return tags


def mlkr_loss(L, X, y, backward=False):
    """MLKR's leave-one-out squared error under ``L`` (float64 tensors).

    With ``backward=True`` the gradient is accumulated into ``L.grad`` block
    by block of rows (each block's graph freed before the next).
    """
    n = X.shape[0]
    block = max(1, BLOCK_ELEMENTS // n)
    total = 0.0
    for s in range(0, n, block):
        rows = torch.arange(s, min(s + block, n))
        Z = X @ L.T
        sq = (Z * Z).sum(1)
        D = (sq[rows, None] - 2.0 * Z[rows] @ Z.T + sq[None, :]).clamp(min=0.0)  # (b, n)
        D = D.index_put((torch.arange(len(rows)), rows), torch.tensor(float("inf"),
                                                                      dtype=D.dtype))
        y_hat = torch.softmax(-D, dim=1) @ y
        loss = ((y_hat - y[rows]) ** 2).sum()
        if backward:
            loss.backward()
        total += float(loss.detach())
    return total
