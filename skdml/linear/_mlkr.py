"""Metric Learning for Kernel Regression (Weinberger & Tesauro, AISTATS 2007)."""

from __future__ import annotations

from numbers import Integral

import numpy as np
from sklearn.base import _fit_context
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import StrOptions
from sklearn.utils.validation import validate_data

from .._training._lbfgs import run_lbfgs
from .._training._progress import IterationBar
from .._utils import flatten_label_column, thread_limits, transactional_fit, warn_user
from .._utils._params import StrictInterval, non_negative_real, positive_int
from ._base import (BaseMahalanobis, check_n_components, check_not_constant,
                    warn_if_outlying_rows)
from ._classic import initial_map

__all__ = ["MLKR", "mlkr_loss"]

#: Rows of the kernel matrix held at once (memory: block x n_samples).
BLOCK_ELEMENTS = 2 ** 22
#: Rows of the kernel matrix whose elementwise steps run together, sized for the cache.
TILE_ELEMENTS = 2 ** 15


class MLKR(BaseMahalanobis):
    r"""Metric Learning for Kernel Regression (MLKR).

    Learns ``L`` so that Nadaraya-Watson regression with a Gaussian kernel
    in the embedding predicts the targets well: it minimises the
    leave-one-out squared error

    .. math::

        \sum_i (y_i - \hat y_i)^2, \qquad
        \hat y_i = \frac{\sum_{j \neq i} y_j\, e^{-\|L(x_i - x_j)\|^2}}
                        {\sum_{j \neq i} e^{-\|L(x_i - x_j)\|^2}},

    by L-BFGS with the closed-form gradient (:func:`mlkr_loss`; rows in
    blocks, so memory is O(block x n_samples), not O(n_samples^2)).

    Parameters
    ----------
    n_components : int, default=None
        Embedding dimension; ``None``: ``n_features``.
    init : {"auto", "identity", "pca", "random"} or ndarray, default="auto"
        The start: ``"auto"`` is the identity when ``n_components`` equals
        ``n_features``, PCA below (the identity's first rows when PCA has
        fewer directions: ``n_components >= n_samples``); or an array of shape
        (n_components, n_features), finite and of full row rank. The kernel
        width is that of ``L``: scale the input (e.g. ``StandardScaler``) so
        that the start is sensible.
    max_iter : int, default=1000
        L-BFGS iterations at most; ``0`` returns the start.
    tol : float, default=1e-6
        L-BFGS stops when the relative decrease of the loss is below ``tol``
        (``0``: ``max_iter`` iterations, asked for, so no ``ConvergenceWarning``).
    verbose : int, default=0
        ``1`` shows a progress bar over ``max_iter`` iterations, labelled "(at
        most)" (``tol`` usually ends the fit earlier); ``2`` also prints the loss at
        every evaluation
        (metric-learn's lines at its ``verbose=True``).
    random_state : int, RandomState instance or None, default=None
        Draws ``init="random"``.

    Attributes
    ----------
    components_ : ndarray of shape (n_components, n_features)
    n_iter_ : int
    objective_ : float
        The final leave-one-out squared error.
    initial_objective_ : float
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
    >>> bool(mlkr.objective_ < 0.5 * mlkr.initial_objective_)
    True
    >>> weights = np.linalg.norm(mlkr.components_, axis=0)
    >>> int(np.argmax(weights))
    0
    """

    _parameter_constraints: dict = {
        "n_components": [positive_int(), None],
        "init": [StrOptions({"auto", "identity", "pca", "random"}), np.ndarray],
        "max_iter": [StrictInterval(Integral, 0, None, closed="left")],
        "tol": [non_negative_real()],
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
        y = flatten_label_column(y)
        labels = None if y is None else np.asarray(y)
        if labels is not None and (labels.dtype.kind in "US" or (
                labels.dtype.kind == "O"
                and any(isinstance(v, (str, bytes)) for v in labels.ravel().tolist()))):
            # before validate_data: its y_numeric conversion of a pandas column of strings
            # (or categories) failed with numpy's "could not convert string to float"
            raise ValueError(f"MLKR regresses numeric targets; y holds strings (dtype "
                             f"{labels.dtype}: class labels? use LMNN, LFDA or ECAML).")
        X, y = validate_data(self, X, y, dtype=np.float64, y_numeric=True, ensure_min_samples=2)
        if y.dtype.kind not in "iufb":
            raise ValueError(f"MLKR regresses numeric targets; y has dtype {y.dtype} (class "
                             "labels? use LMNN, LFDA or ECAML).")
        if y.dtype.kind in "iu" and y.size:
            # the loss reads differences of targets only (each is predicted by a weighted
            # mean of the others): taken exactly in integers first, 10**18 + k kept k
            y = (y.astype(object) - int(y.min())).astype(np.float64)
        y = y.astype(np.float64)  # bool targets too (numpy refuses their differences)
        n, d = X.shape
        check_not_constant(X, "MLKR")
        warn_if_outlying_rows(X, "MLKR")
        with np.errstate(over="ignore", invalid="ignore"):
            finite_y = np.isfinite(np.ptp(y) ** 2 * n)  # a bound on the summed squared errors
        if not finite_y:
            raise ValueError("MLKR: the targets y are too large for their squared errors to "
                             "be finite in float64; rescale y.")
        if not np.ptp(y) > 0:
            warn_user("MLKR: y is constant, so every metric predicts it exactly (zero loss): "
                      "the start is returned. MLKR learns from targets that vary.")
        # centred: an offset (y + 1e12) would take the targets' low digits in the products
        y = y - np.median(y)
        dim = check_n_components(self.n_components, d)
        # the loss reads differences of samples only: centred, the distances' expansion
        # |z_i|^2 - 2 z_i.z_j + |z_j|^2 does not cancel an offset (at 1e6, gradient errors of
        # 6e-3 relative and an early stop)
        X = X - X.mean(axis=0)
        L0 = initial_map(self.init, X, dim, check_random_state(self.random_state))
        with thread_limits(flops_per_step=4.0 * n * n * dim):
            last = {}  # the latest evaluation: L-BFGS-B starts by re-evaluating the start

            def fun(flat):
                key = flat.tobytes()
                if key not in last:
                    value, grad = mlkr_loss(flat.reshape(dim, d), X, y, return_gradient=True)
                    if not np.isfinite(value):
                        raise FloatingPointError(f"MLKR: non-finite loss ({value}); the fit is "
                                                 "discarded. Scale the input.")
                    bar.line(f"MLKR loss {value:.6g}")
                    last.clear()
                    last[key] = value, grad.ravel()
                value, grad = last[key]
                return value, grad.copy()

            bar = IterationBar(self.verbose, self.max_iter, "MLKR")
            with bar:
                self.initial_objective_ = fun(L0.ravel())[0]
                L, self.n_iter_, self.objective_ = L0, 0, self.initial_objective_
                if self.max_iter:
                    run = run_lbfgs(fun, L0.ravel(), max_iter=self.max_iter, tol=self.tol,
                                    bar=bar)
            if self.max_iter:
                L, self.n_iter_ = run.x.reshape(dim, d), run.n_iter
                self.objective_ = run.value
                if run.cut_short:
                    warn_user(f"MLKR did not converge in max_iter={self.max_iter} L-BFGS "
                              "iterations; raise max_iter.", ConvergenceWarning)
                flat = self.initial_objective_ - self.objective_ <= self.tol * abs(self.initial_objective_)
                if flat and np.ptp(y) > 0 and not isinstance(self.init, np.ndarray):
                    warn_user("MLKR barely moved from its start: its loss fell by less than "
                              "tol. At this scale of X the Gaussian kernel is flat (every "
                              "weight 0 or every weight equal): standardise X (e.g. "
                              "StandardScaler) before MLKR.")
        self.components_ = L
        return self

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.required = True
        return tags


def mlkr_loss(L, X, y, return_gradient=False):
    r"""MLKR's leave-one-out squared error under ``L``, and its gradient.

    Rows are processed in blocks (memory O(block x n_samples)), and their
    elementwise steps in cache-sized tiles of rows; the softmax's row sums are
    folded into the per-row factors instead of dividing the matrix. With
    ``P`` the row-softmax of ``-D`` (``D`` the squared embedded distances,
    the diagonal excluded), ``e = P y - y`` and
    ``W_ij = e_i P_ij (y_j - \hat y_i)``, the gradient is
    ``4 L X^T (W + W^T - diag(1^T W)) X`` (Weinberger & Tesauro, eq. 7;
    the rows of ``W`` sum to zero).

    Parameters
    ----------
    L : ndarray of shape (n_components, n_features)
    X : ndarray of shape (n_samples, n_features)
    y : ndarray of shape (n_samples,)
    return_gradient : bool, default=False

    Returns
    -------
    loss : float
    grad : ndarray of shape (n_components, n_features)
        Only with ``return_gradient=True``.

    Examples
    --------
    >>> X, y = np.array([[0.0], [1.0], [3.0]]), np.array([0.0, 1.0, 3.0])
    >>> round(mlkr_loss(np.eye(1), X, y), 4)  # each target predicted from the other two
    5.7638
    """
    n, d = X.shape
    m = L.shape[0]
    Z = X @ L.T
    sq = np.einsum("ij,ij->i", Z, Z)
    # the gradient's n x n products are taken against X (K = X^T W X, then L K) when
    # that is the narrower side, else against Z (Z^T W and W Z)
    via_x = d <= 2 * m
    block = max(1, BLOCK_ELEMENTS // n)
    tile = max(1, TILE_ELEMENTS // n)
    total = 0.0
    col = np.zeros(n)
    acc = np.zeros((d, d) if via_x else (m, n))
    WZ = None if via_x else np.empty((n, m))
    root2_Z = np.sqrt(2.0) * Z
    for s in range(0, n, block):
        rows = slice(s, min(s + block, n))
        # 2 <z_i, z_j> (a symmetric product when one block holds every row): -D / 2 up
        # to a constant of each row, which cancels in the softmax
        K = root2_Z[rows] @ root2_Z.T
        for t in range(0, rows.stop - s, tile):  # the elementwise steps, tile by tile
            S = K[t:t + tile]
            r = np.arange(len(S))
            S -= sq[None, :]
            S[r, r + s + t] = -np.inf
            S -= S.max(axis=1, keepdims=True)
            E = np.exp(S, out=S)  # P = E / its row sums, never formed
            sums = E.sum(axis=1)
            y_hat = (E @ y) / sums
            e = y_hat - y[s + t:s + t + len(S)]
            total += float(e @ e)
            if return_gradient:  # W_ij = e_i P_ij (y_j - y_hat_i), in place of E
                c = e / sums
                factor = np.multiply.outer(c, y)
                factor -= (c * y_hat)[:, None]
                E *= factor
                col += E.sum(axis=0)
        if not return_gradient:
            continue
        W = K
        if via_x:
            acc += X[rows].T @ (W @ X)
        else:
            acc += Z[rows].T @ W
            WZ[rows] = W @ Z
    if not return_gradient:
        return total
    if via_x:  # L X^T (W + W^T - diag(col)) X
        grad = L @ (acc + acc.T - (X * col[:, None]).T @ X)
    else:  # Z^T (W + W^T - diag(col)) X
        grad = (acc + WZ.T - (Z * col[:, None]).T) @ X
    return total, 4.0 * grad
