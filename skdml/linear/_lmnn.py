"""Large Margin Nearest Neighbor (Weinberger & Saul, JMLR 2009), full-batch with L-BFGS."""

from __future__ import annotations

from numbers import Integral, Real

import numpy as np
import torch
from sklearn.base import _fit_context
from sklearn.exceptions import ConvergenceWarning
from sklearn.neighbors import NearestNeighbors
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import StrOptions

from .._training._lbfgs import run_lbfgs
from .._training._progress import IterationBar
from .._utils import thread_limits, transactional_fit, warn_user
from .._utils._params import StrictInterval, non_negative_real, positive_int
from ._base import BaseMahalanobis, check_n_components, check_not_constant
from ._classic import check_classic_input, feature_scales, initial_map, spread_units

__all__ = ["LMNN", "lmnn_loss_grad", "target_neighbors"]

#: Distances of one block of rows (block x n_samples = 2**22, 32 MiB in float64). Memory per
#: block: that, plus about 200 bytes per impostor candidate (a dozen index and value
#: temporaries; at most block x n_samples of them): measured 240-290 MB of peak for
#: n_samples of 8,000-16,000 with classes that overlap, bounded in n.
BLOCK_ELEMENTS = 2 ** 22


class LMNN(BaseMahalanobis):
    r"""Large Margin Nearest Neighbor (LMNN) metric learning.

    Each sample's ``n_neighbors`` *target neighbours* are its nearest
    samples of the same class in the input space, chosen once (Weinberger &
    Saul 2009). LMNN minimises

    .. math::

        \varepsilon(L) = (1 - \mu) \sum_{i, j \in T(i)} d_{ij}
            + \mu \sum_{i, j \in T(i)} \sum_{l:\, y_l \neq y_i}
              [1 + d_{ij} - d_{il}]_+ ,

    with :math:`d_{ij} = \|L(x_i - x_j)\|^2`: targets are pulled in and
    *impostors* (samples of other classes inside the margin) pushed out.
    The exact loss and gradient over all samples are evaluated in blocks of
    rows (torch, no n x n x k tensor) and minimised by L-BFGS.

    Parameters
    ----------
    n_components : int, default=None
        Embedding dimension; ``None``: ``n_features``.
    n_neighbors : int, default=3
        Target neighbours per sample (fewer in a class too small for them).
    push_weight : float in (0, 1], default=0.5
        :math:`\mu`, the weight of the push term (metric-learn's
        ``regularization`` is :math:`1 - \mu`). ``0`` is refused: the pull
        term alone is least for the zero map.
    init : {"auto", "identity", "pca", "lda", "random"} or ndarray, default="auto"
        The start ``L``: ``"auto"`` is the identity when ``n_components``
        equals ``n_features`` (the paper's Euclidean start), PCA below (the
        identity's first rows when PCA has fewer directions: ``n_components
        >= n_samples``); ``"lda"`` the discriminant directions of
        :class:`~sklearn.discriminant_analysis.LinearDiscriminantAnalysis`, at
        most ``n_classes - 1`` of them, so ``n_components`` must be set that
        low (as in metric-learn; ECAML and JRD complete them with principal
        axes); ``"random"`` a Gaussian matrix;
        an array of shape (n_components, n_features), finite and of full
        row rank, is used as given.
    max_iter : int, default=200
        L-BFGS iterations at most; ``0`` returns the start.
    tol : float, default=1e-3
        L-BFGS stops when the relative decrease of the loss is below ``tol``
        (``0``: ``max_iter`` iterations, asked for, so no ``ConvergenceWarning``).
        On AT&T and COIL-20 (PCA-100, one split), 1e-3 ended at the k-NN
        accuracy (k=1 and 10) of 1e-5 in half the time, within 3% of its loss;
        1e-5 ran into ``max_iter`` on AT&T.
    verbose : int, default=0
        ``1`` shows a progress bar over ``max_iter`` iterations, labelled "(at
        most)" (``tol`` usually ends the fit earlier); ``2`` also prints the loss at
        every L-BFGS iteration
        (metric-learn's lines at its ``verbose=True``).
    random_state : int, RandomState instance or None, default=None
        Draws ``init="random"``.

    Attributes
    ----------
    components_ : ndarray of shape (n_components, n_features)
    target_neighbors_ : ndarray of shape (n_samples, min(n_neighbors, largest class - 1))
        The training samples' target neighbours (-1: none, in a small class).
    n_iter_ : int
        L-BFGS iterations run.
    objective_ : float
        The final loss.
    initial_objective_ : float
        The loss at the start ``L``.
    classes_ : ndarray of shape (n_classes,)
    n_features_in_ : int
    feature_names_in_ : ndarray of shape (`n_features_in_`,)
        Defined when ``X`` has feature names that are all strings.

    See Also
    --------
    skdml.linear.ECAML : ``loss="lmnn"`` trains LMNN's loss on minibatches, with
        target neighbours chosen in the embedding.

    Notes
    -----
    metric-learn 0.7.0 runs gradient descent from ``learn_rate=1e-7``
    with a step that adapts by 1% an iteration; on the same objective
    L-BFGS reaches a lower loss in far fewer evaluations (compared in
    ``tests/linear/test_lmnn.py``).

    Features in other units (spreads ``2**10`` or more apart: raw wine's
    proline and hue) are optimised in common units: L-BFGS runs on ``X / s``,
    with ``s`` each feature's spread over the median one's, as powers of two.
    The loss, the target neighbours and the learned ``L`` mean what they did;
    only the optimiser's path changes. In the input's units its
    relative-decrease test stopped on the plateau a tiny feature leaves (a loss
    of 2323 where 305 was reachable; raw wine 310 where 260 was). Such fits
    can need more than ``max_iter=200`` iterations (raw breast cancer: 555),
    and then say so; standardising ``X`` first is still the better habit.

    References
    ----------
    K. Q. Weinberger and L. K. Saul. Distance Metric Learning for Large
    Margin Nearest Neighbor Classification. JMLR 10, 2009.

    Examples
    --------
    >>> from sklearn.datasets import load_iris
    >>> from skdml.linear import LMNN
    >>> X, y = load_iris(return_X_y=True)
    >>> lmnn = LMNN(n_neighbors=3, max_iter=30).fit(X, y)
    >>> lmnn.transform(X).shape, bool(lmnn.objective_ < lmnn.initial_objective_)
    ((150, 4), True)
    """

    _parameter_constraints: dict = {
        "n_components": [positive_int(), None],
        "n_neighbors": [positive_int()],
        "push_weight": [StrictInterval(Real, 0, 1, closed="right")],
        "init": [StrOptions({"auto", "identity", "pca", "lda", "random"}), np.ndarray],
        "max_iter": [StrictInterval(Integral, 0, None, closed="left")],
        "tol": [non_negative_real()],
        "verbose": ["verbose"],
        "random_state": ["random_state"],
    }

    def __init__(self, n_components=None, n_neighbors=3, push_weight=0.5, init="auto",
                 max_iter=200, tol=1e-3, verbose=0, random_state=None):
        self.n_components = n_components
        self.n_neighbors = n_neighbors
        self.push_weight = push_weight
        self.init = init
        self.max_iter = max_iter
        self.tol = tol
        self.verbose = verbose
        self.random_state = random_state

    @_fit_context(prefer_skip_nested_validation=True)
    @transactional_fit
    def fit(self, X, y):
        """Fit LMNN on labelled data.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)
            Class labels (at least 2 classes).

        Returns
        -------
        self : object
            The fitted estimator.
        """
        X, y, self.classes_ = check_classic_input(self, X, y)
        if np.bincount(y).max() < 2:
            raise ValueError("LMNN needs a class with at least 2 samples: with every class a "
                             "single sample there is no target neighbour to pull.")
        n, d = X.shape
        check_not_constant(X, "LMNN")
        dim = check_n_components(self.n_components, d)
        # the loss and the target neighbours read differences of samples only: centred, the
        # distances' expansion |z_i|^2 - 2 z_i.z_j + |z_j|^2 does not cancel an offset (at
        # 1e6, errors of 5e-5 in the loss and 7e-5 in its gradient; at 1e7, 1e-2)
        X = X - X.mean(axis=0)
        L0 = initial_map(self.init, X, dim, check_random_state(self.random_state), y)
        targets = target_neighbors(X, y, self.n_neighbors)
        s = unit_scales(X)
        X, L0 = X / s, L0 * s  # L' = L diag(s) on X / s: the same Z, loss and targets
        with thread_limits(flops_per_step=4.0 * n * n * (dim + self.n_neighbors)):
            Xt = torch.as_tensor(X, dtype=torch.float64)  # centred above: our own copy
            yt = torch.as_tensor(y)
            tt = torch.as_tensor(targets)

            def fun(flat):
                value, grad = lmnn_loss_grad(torch.as_tensor(flat.reshape(dim, d)), Xt, yt, tt,
                                             self.push_weight)
                if not np.isfinite(value):
                    raise FloatingPointError(f"LMNN: non-finite loss ({value}); the fit is "
                                             "discarded. Scale the input.")
                return value, grad.numpy().ravel()

            self.initial_objective_ = fun(L0.ravel())[0]
            if self.max_iter == 0:
                L, self.n_iter_ = L0, 0
            else:
                with IterationBar(self.verbose, self.max_iter, "LMNN") as bar:
                    run = run_lbfgs(fun, L0.ravel(), max_iter=self.max_iter, tol=self.tol,
                                    bar=bar, label="LMNN")
                L, self.n_iter_ = run.x.reshape(dim, d), run.n_iter
                if run.cut_short:
                    warn_user(f"LMNN did not converge in max_iter={self.max_iter} L-BFGS "
                              "iterations; raise max_iter.", ConvergenceWarning)
        self.objective_ = float(fun(L.ravel())[0]) if self.max_iter else self.initial_objective_
        self.components_ = L / s
        # (a given start may be optimal already: a refit from a solution moves little)
        if self.max_iter and not isinstance(self.init, np.ndarray) and (
                self.initial_objective_ - self.objective_ <= self.tol * abs(self.initial_objective_)):
            warn_user("LMNN barely moved from its start: its loss fell by less than tol. "
                      "The hinge's unit margin is far from the scale of X (every impostor "
                      "active or none): standardise X (e.g. StandardScaler) before LMNN.")
        self.target_neighbors_ = targets
        return self

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.required = True  # fit(X, None): scikit-learn's "requires y" error
        return tags


def unit_scales(X):
    """Divisors (powers of two) bringing features of other units to the median one's.

    L-BFGS's relative-decrease test fired on the plateau left by a feature 1e6 times
    smaller than another (loss 2323 after 7 iterations, where 305 was reachable, and a
    k-NN accuracy below the Euclidean one's), so where the features' spreads lie
    :data:`~skdml.linear._classic.SPREAD_RATIO` or more apart
    (:func:`~skdml.linear._classic.spread_units`), the optimiser runs on ``X / s``: each
    feature at the scale of the median spread (the lower median: one feature's own), by
    powers of two (exact), the overall scale (the hinge's unit margin) kept. Columns
    constant up to round-off keep 1 (divided up to unit size, their noise drew weights of
    1e15). Otherwise (one unit) all ones.

    Examples
    --------
    >>> unit_scales(np.array([[0.0, 0.0, 5.0], [1.0, 30.0, 5.0], [2.0, 60.0, 5.0]]))
    array([1., 1., 1.])
    >>> unit_scales(np.array([[0.0, 0.0, 0.0], [2e-3, 2.0, 2e3], [4e-3, 4.0, 4e3]]))
    array([9.765625e-04, 1.000000e+00, 1.024000e+03])
    """
    spread, real, mixed = spread_units(X)
    s = np.ones(X.shape[1])
    if mixed:
        median = np.sort(spread[real])[(int(real.sum()) - 1) // 2]
        s[real] = feature_scales(spread[real]) / feature_scales(np.array([median]))
    return s


def target_neighbors(X, y, n_neighbors):
    """Each sample's ``n_neighbors`` nearest same-class samples (Euclidean); -1 pads small classes.

    Examples
    --------
    >>> target_neighbors(np.array([[0.0], [1.0], [3.0], [10.0]]), np.array([0, 0, 0, 1]), 1)
    array([[ 1],
           [ 0],
           [ 1],
           [-1]])
    """
    # at most (largest class - 1) columns: n_neighbors=10**12 asked for a 291 TiB table
    largest = int(np.bincount(np.unique(y, return_inverse=True)[1]).max(initial=1))
    n_neighbors = min(n_neighbors, max(largest - 1, 0))
    targets = np.full((len(X), n_neighbors), -1, dtype=np.int64)
    for c in np.unique(y):
        members = np.flatnonzero(y == c)
        k = min(n_neighbors, len(members) - 1)
        if k > 0:
            nn = NearestNeighbors(n_neighbors=k).fit(X[members]).kneighbors(
                return_distance=False)
            targets[members, :k] = members[nn]
    return targets


def lmnn_loss_grad(L, X, y, targets, push_weight):
    """LMNN's loss and its exact gradient with respect to ``L`` (float64 tensors).

    The gradient is ``2 L X^T C X`` with ``C`` the Laplacian of the pair
    weights (pull and active hinge terms), accumulated block by block of
    rows. Only impostor candidates (another class within a sample's largest
    target distance plus the margin) enter the hinge terms: the others are
    exactly zero.

    Returns
    -------
    loss : float
    grad : Tensor of the shape of ``L``
    """
    with torch.no_grad():
        Z = X @ L.T
        sq = (Z * Z).sum(1)
        valid = targets >= 0
        t = targets.clamp(min=0)
        d_target = ((Z[:, None, :] - Z[t]) ** 2).sum(-1) * valid  # (n, k)
        n, k = targets.shape
        mu = push_weight
        loss = (1.0 - mu) * float(d_target.sum())
        # pair weights W (only as products with X): W X, W^T X, row and column sums
        WX = torch.zeros_like(X)
        WtX = torch.zeros_like(X)
        r = torch.zeros(n, dtype=X.dtype)
        c = torch.zeros(n, dtype=X.dtype)
        # pull (+ active hinge counts) on (i, target)
        pull_w = torch.full((n, k), 1.0 - mu, dtype=X.dtype) * valid
        block = max(1, BLOCK_ELEMENTS // max(n, 1))
        for s in range(0, n, block):
            rows = torch.arange(s, min(s + block, n))
            D = (sq[rows, None] - 2.0 * Z[rows] @ Z.T + sq[None, :]).clamp(min=0)
            # impostor candidates: another class inside the largest target distance + 1 (a
            # hinge is positive only there); the hinges are evaluated on them alone
            radius = 1.0 + (d_target[rows] * valid[rows]).amax(dim=1)
            bi, li = ((D < radius[:, None]) & (y[None, :] != y[rows, None])).nonzero(
                as_tuple=True)
            ii = rows[bi]
            hinge = 1.0 + d_target[ii] - D[bi, li][:, None]  # (m, k)
            active = (hinge > 0) & valid[ii]
            loss += mu * float((hinge * active).sum())
            activef = active.to(X.dtype)
            pull_w.index_add_(0, ii, mu * activef)
            count = mu * activef.sum(1)  # weight -mu per active (i, j, l) on the pair (i, l)
            push = torch.sparse_coo_tensor(torch.stack([bi, li]), count, (len(rows), n),
                                           check_invariants=False)  # valid by construction
            WX[rows] -= torch.sparse.mm(push, X)
            WtX -= torch.sparse.mm(push.t(), X[rows])
            r.index_add_(0, ii, -count)
            c.index_add_(0, li, -count)
        # the (i, target) weights, scattered
        rows = torch.arange(n)[:, None].expand(n, k)
        WX += (pull_w[:, :, None] * X[t]).sum(1)
        WtX.index_add_(0, t.reshape(-1), (pull_w.reshape(-1, 1) * X[rows.reshape(-1)]))
        r += pull_w.sum(1)
        c.index_add_(0, t.reshape(-1), pull_w.reshape(-1))
        CX = (r + c)[:, None] * X - WX - WtX
        grad = 2.0 * (Z.T @ CX)
    return loss, grad
