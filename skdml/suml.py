"""SUML: unsupervised metric learning with synthetic examples (Dutta et al., AAAI 2020)."""

from __future__ import annotations

import numbers
import sys
import warnings

import numpy as np
from sklearn.base import _fit_context
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import validate_data

from threadpoolctl import threadpool_limits

from skdml._suml_cost import SUMLObjective, sample_triplets
from skdml._utils import thread_budget
from skdml.base import BaseMahalanobis, check_n_components, reduce_input

__all__ = ["SUML"]

#: Below this many multiply-adds per dense product (N_u * d * d), use one BLAS thread.
_SMALL_GEMM = 1_000_000_000

_SOLVERS = ("conjugate_gradient", "steepest_descent", "trust_regions")


class SUML(BaseMahalanobis):
    """Synthetic Unsupervised pseudo Metric Learning (SUML), full-batch and stochastic.

    Learns a linear embedding ``x -> L^T x`` from **unlabeled** data. Random
    triplets ``(a, p, n)`` are drawn; for each one, the five hypothetical label
    cases of the paper generate synthetic triplets or pairs ``s = S^T c`` from
    concatenations ``c`` of the triplet's points, with a synthesis map ``S``
    trained adversarially to the metric. ``(L, S)`` minimise the entropy of the
    case probabilities plus ``ortho_weight * ||L^T L - I||_F^2`` (Eq. 1) with a
    pymanopt Riemannian optimiser on the product manifold
    (Stiefel or Euclidean for ``L``) x (Euclidean for ``S``).

    Parameters
    ----------
    n_components : int, default=None
        Embedding dimension ``l``. ``None`` means ``n_features``.
    alpha : float, default=40.0
        Angle of the angular constraint, in degrees (0 < alpha < 90).
    ortho_weight : float, default=2.0
        The paper's ``lambda``: weight of ``||L^T L - I||_F^2``. It only matters
        for ``manifold="euclidean"`` (on Stiefel the term is zero). Our entropy
        term is the *mean* over triplets (the paper's is the sum), so the
        paper's ``lambda = 0.5`` has no direct equivalent here; the default was
        chosen on the Table 1 protocol (see ``doc/suml.md``).
    n_triplets : int, default=10000
        Random triplets drawn per fit (per mini-batch for the stochastic form).
    probability : {"softmax", "sigmoid"}, default="softmax"
        ``"sigmoid"``: ``p_c = 1 / (1 + exp(l_c))``, the paper's formula as
        written (the five values do not sum to 1); ``"softmax"``: the
        normalised form ``p = softmax(-l)`` over the five cases (see
        ``doc/suml.md`` for the benchmark behind the default).
    manifold : {"euclidean", "stiefel"}, default="euclidean"
        Search space of ``L``: free with the ``ortho_weight`` penalty (the
        paper's setting), or exact orthonormal columns. ``S`` is always
        Euclidean. See ``doc/suml.md`` for the benchmark behind the default.
    solver : {"conjugate_gradient", "steepest_descent", "trust_regions"}, \
            default="conjugate_gradient"
        pymanopt optimiser (trust regions uses a finite-difference Hessian).
    max_iter : int, default=30
        Optimiser iterations (per mini-batch for the stochastic form).
    tol : float, default=1e-6
        Stop when the Riemannian gradient norm falls below ``tol``.
    batch_size : int, default=None
        ``None``: full-batch SUML, Eq. (1). An int: stochastic SUML
        (Algorithm 1): one pass over a random permutation of the data in
        mini-batches of ``batch_size`` samples; each mini-batch draws
        ``n_triplets`` triplets among its samples and runs ``max_iter``
        iterations warm-started from the previous ``(L, S)``.
    n_reduce : "auto", int or None, default="auto"
        PCA reduction of the input before optimising (the cost is
        ``O(N d^2)`` per evaluation), folded into ``components_`` so that
        :meth:`transform` stays one linear map of the raw input. ``"auto"``
        reduces to ``max(n_components, 256)`` dimensions when the input has
        more; an int reduces to ``max(n_components, n_reduce)``; ``None`` never
        reduces.
    init : {"pca", "random"}, default="pca"
        ``"pca"``: ``L`` starts at the leading principal directions and ``S``
        at ``[I/2; I/2]`` (synthetic points are midpoints). ``"random"``:
        random orthonormal ``L`` and Gaussian ``S`` (the paper).
    dtype : {"float32", "float64"}, default="float32"
        Precision of the optimisation (``components_`` is always float64).
    verbose : int, default=0
        ``>= 1`` prints pymanopt's per-iteration table (cost, gradient norm).
    random_state : int, RandomState instance or None, default=None
        Seeds the triplets, mini-batches, the PCA and the random init.

    Attributes
    ----------
    components_ : ndarray of shape (n_components, n_features)
        The learned linear map (``L^T`` composed with the PCA reduction).
    synthesis_ : ndarray of shape (2 * n_dims, n_dims)
        The synthesis map ``S`` in the (reduced, rescaled) optimisation space.
    projection_ : ndarray of shape (n_dims, n_features) or None
        The PCA reduction (``None`` when no reduction was done).
    scale_ : float
        The data were divided by ``scale_`` (root mean squared distance of a
        sample to the mean) before optimising, so that ``alpha``,
        ``ortho_weight`` and the softplus margins mean the same on every data
        set. A uniform scale does not change neighbours; it is not folded into
        ``components_`` (which keeps orthonormal rows on Stiefel).
    n_iter_ : int
        Total optimiser iterations (summed over mini-batches).
    n_cost_evaluations_ : int
        Objective evaluations (forward passes), line-search trial points included.
    n_grad_evaluations_ : int
        Gradient evaluations; trial points rejected by the line search need none.
    cost_history_ : ndarray of shape (n_iter_ + n_runs,)
        Objective at the start and after every iteration (concatenated across
        mini-batches, each of which starts with its initial cost). For
        ``solver="trust_regions"``, which keeps no per-iteration log, only the
        first and last costs of each run.
    n_features_in_ : int
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Defined only when ``X`` has string feature names.

    See Also
    --------
    sklearn.neighbors.NeighborhoodComponentsAnalysis : supervised linear metric learning.

    Notes
    -----
    Only differences between synthetic points enter the objective and every
    case's concatenations share their first block, so the objective does not
    depend on the upper half ``S1`` of ``S`` (its gradient is exactly zero, as
    in the paper's gradient formulas); ``S1`` stays at its initial value.
    ``partial_fit`` fits the PCA reduction and the scale on its first call and
    keeps them.

    References
    ----------
    U. K. Dutta, M. Harandi and C. C. Sekhar. Unsupervised Metric Learning
    with Synthetic Examples. AAAI 2020.

    Examples
    --------
    >>> from sklearn.datasets import load_digits
    >>> from sklearn.pipeline import make_pipeline
    >>> from sklearn.neighbors import KNeighborsClassifier
    >>> from skdml import SUML
    >>> X, y = load_digits(return_X_y=True)
    >>> suml = SUML(n_components=16, n_triplets=1000, max_iter=40, random_state=0)
    >>> suml.fit(X[:1000]).transform(X[1000:]).shape
    (797, 16)
    >>> suml.components_.shape
    (16, 64)
    >>> pipe = make_pipeline(SUML(n_components=16, n_triplets=1000, max_iter=40,
    ...                           random_state=0), KNeighborsClassifier(1))
    >>> bool(pipe.fit(X[:1000], y[:1000]).score(X[1000:], y[1000:]) > 0.9)
    True
    """

    _parameter_constraints: dict = {
        "n_components": [Interval(numbers.Integral, 1, None, closed="left"), None],
        "alpha": [Interval(numbers.Real, 0, 90, closed="neither")],
        "ortho_weight": [Interval(numbers.Real, 0, None, closed="left")],
        "n_triplets": [Interval(numbers.Integral, 1, None, closed="left")],
        "probability": [StrOptions({"sigmoid", "softmax"})],
        "manifold": [StrOptions({"stiefel", "euclidean"})],
        "solver": [StrOptions(set(_SOLVERS))],
        "max_iter": [Interval(numbers.Integral, 1, None, closed="left")],
        "tol": [Interval(numbers.Real, 0, None, closed="left")],
        "batch_size": [Interval(numbers.Integral, 3, None, closed="left"), None],
        "n_reduce": [StrOptions({"auto"}), Interval(numbers.Integral, 1, None, closed="left"),
                     None],
        "init": [StrOptions({"pca", "random"})],
        "dtype": [StrOptions({"float32", "float64"})],
        "verbose": ["verbose"],
        "random_state": ["random_state"],
    }

    def __init__(self, n_components=None, *, alpha=40.0, ortho_weight=2.0, n_triplets=10000,
                 probability="softmax", manifold="euclidean", solver="conjugate_gradient",
                 max_iter=30, tol=1e-6, batch_size=None, n_reduce="auto", init="pca",
                 dtype="float32", verbose=0, random_state=None):
        self.n_components = n_components
        self.alpha = alpha
        self.ortho_weight = ortho_weight
        self.n_triplets = n_triplets
        self.probability = probability
        self.manifold = manifold
        self.solver = solver
        self.max_iter = max_iter
        self.tol = tol
        self.batch_size = batch_size
        self.n_reduce = n_reduce
        self.init = init
        self.dtype = dtype
        self.verbose = verbose
        self.random_state = random_state

    # ------------------------------------------------------------------ API
    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None):
        """Fit the metric on ``X`` (labels are not used).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Training data.
        y : Ignored
            Accepted for pipeline compatibility.

        Returns
        -------
        self : SUML
            The fitted estimator.
        """
        X = self._validate_input(X, reset=True)
        rng = check_random_state(self.random_state)
        Xr = self._setup(X, rng)
        self.n_iter_ = 0
        self._costs = []
        if self.batch_size is None:
            result = self._run(Xr, rng)
            if "max iterations" in result.stopping_criterion:
                warnings.warn(
                    f"SUML stopped at max_iter={self.max_iter} iterations before reaching "
                    f"tol={self.tol}; increase max_iter for a more converged metric.",
                    ConvergenceWarning,
                )
        else:
            order = rng.permutation(Xr.shape[0])
            n_batches = max(1, int(np.ceil(Xr.shape[0] / self.batch_size)))
            for batch in np.array_split(order, n_batches):
                if batch.shape[0] >= 3:
                    self._run(Xr[batch], rng)
        self._finish()
        return self

    def partial_fit(self, X, y=None):
        """One stochastic SUML step (Algorithm 1) on a mini-batch, warm-started.

        The first call fits the PCA reduction and the scale on its batch and
        initialises ``(L, S)``; every call then draws ``n_triplets`` triplets
        from ``X`` and runs ``max_iter`` iterations from the current
        ``(L, S)``. No ``ConvergenceWarning`` is raised: a fixed number of
        iterations per mini-batch is the algorithm.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            A mini-batch (at least 3 samples).
        y : Ignored
            Accepted for API compatibility.

        Returns
        -------
        self : SUML
            The updated estimator.
        """
        first = not hasattr(self, "_L")
        if first:
            self._validate_params()
        X = self._validate_input(X, reset=first)
        if first:
            Xr = self._setup(X, check_random_state(self.random_state))
            self.n_iter_ = 0
            self._costs = []
        else:
            Xr = self._reduce(X)
        self._run(Xr, self._partial_rng)
        self._finish()
        return self

    # -------------------------------------------------------------- helpers
    def _validate_input(self, X, reset):
        X = validate_data(self, X, reset=reset, dtype=[np.float64, np.float32],
                          ensure_min_samples=3)
        if X.shape[1] < 1:
            raise ValueError("SUML needs at least one feature.")
        return X

    def _setup(self, X, rng):
        """Reduce, rescale and initialise ``(L, S)``; returns the working data."""
        n_samples, n_features = X.shape
        self._partial_rng = rng  # later partial_fit calls keep drawing from it
        n_components = check_n_components(self.n_components, n_features)
        self._dtype = np.dtype(self.dtype)
        self.n_cost_evaluations_ = 0
        self.n_grad_evaluations_ = 0
        X64 = np.asarray(X, dtype=np.float64)
        if self.n_reduce is None:
            target = None
        elif self.n_reduce == "auto":
            target = max(n_components, 256)
        else:
            target = max(n_components, int(self.n_reduce))
        Xr, projection = reduce_input(X64, target, random_state=rng)
        if projection is not None and projection.shape[0] < n_components:
            # Fewer samples than n_components: PCA cannot keep enough directions.
            Xr, projection = X64, None
        self.projection_ = projection
        self._mean = X64.mean(axis=0)
        Xc = X64 - self._mean if projection is None else Xr
        scale = float(np.sqrt(np.mean(np.sum(Xc * Xc, axis=1))))
        self.scale_ = scale if scale > 0 and np.isfinite(scale) else 1.0
        Xr = self._reduce(X64)
        d = Xr.shape[1]
        if self.init == "pca":
            if projection is not None:
                L0 = np.eye(d, n_components)  # reduced coordinates are already PCA-ordered
            else:
                _, eigvec = np.linalg.eigh(Xr.T @ Xr)
                L0 = eigvec[:, ::-1][:, :n_components].copy()
            S0 = np.vstack([np.eye(d), np.eye(d)]) / 2.0
        else:
            L0, _ = np.linalg.qr(rng.standard_normal((d, n_components)))
            S0 = rng.standard_normal((2 * d, d)) / np.sqrt(2 * d)
        self._L = L0.astype(self._dtype)
        self._S = S0.astype(self._dtype)
        return Xr

    def _reduce(self, X):
        """Map raw input to the (centred, reduced, rescaled) optimisation space."""
        Xc = np.asarray(X, dtype=np.float64) - self._mean
        if self.projection_ is not None:
            Xc = Xc @ self.projection_.T
        return (Xc / self.scale_).astype(self._dtype, copy=False)

    def _run(self, Xr, rng):
        """Run the optimiser from the current ``(L, S)`` on triplets of ``Xr``."""
        import pymanopt
        from pymanopt.manifolds import Euclidean, Product, Stiefel

        d, n_components = self._L.shape
        triplets = sample_triplets(Xr.shape[0], self.n_triplets, rng)
        objective = SUMLObjective(Xr, triplets, alpha=self.alpha, ortho_weight=self.ortho_weight,
                                  probability=self.probability)
        if self.manifold == "stiefel":
            L_space = Stiefel(d, n_components)
        else:
            L_space = Euclidean(d, n_components)
        manifold = Product([L_space, Euclidean(2 * d, d)])

        @pymanopt.function.numpy(manifold)
        def cost(L, S):
            return objective.cost(L, S)  # no gradient: line-search trial points

        @pymanopt.function.numpy(manifold)
        def euclidean_gradient(L, S):
            _, grad_L, grad_S = objective.cost_grad(L, S)
            return grad_L, grad_S

        hessian = None
        if self.solver == "trust_regions":
            eps = float(np.sqrt(np.finfo(self._dtype).eps))

            @pymanopt.function.numpy(manifold)
            def hessian(L, S, dL, dS):
                # Finite difference of the analytic Euclidean gradient along (dL, dS).
                norm = float(np.sqrt(np.sum(dL * dL) + np.sum(dS * dS)))
                if norm == 0.0:
                    return np.zeros_like(L), np.zeros_like(S)
                h = eps * max(1.0, float(np.sqrt(np.sum(L * L) + np.sum(S * S)))) / norm
                _, gL0, gS0 = objective.cost_grad(L, S)
                _, gL1, gS1 = objective.cost_grad(L + h * dL, S + h * dS)
                return (gL1 - gL0) / h, (gS1 - gS0) / h

        problem = pymanopt.Problem(manifold, cost, euclidean_gradient=euclidean_gradient,
                                   euclidean_hessian=hessian)
        optimizer_cls = {
            "conjugate_gradient": pymanopt.optimizers.ConjugateGradient,
            "steepest_descent": pymanopt.optimizers.SteepestDescent,
            "trust_regions": pymanopt.optimizers.TrustRegions,
        }[self.solver]
        # pymanopt's CG counts its starting point as iteration 1 (it checks the
        # stopping criteria before stepping); SD and TR count steps taken.
        offset = 1 if self.solver == "conjugate_gradient" else 0
        optimizer = optimizer_cls(max_iterations=self.max_iter + offset, min_gradient_norm=self.tol,
                                  verbosity=2 if self.verbose else 0, log_verbosity=1)
        if self.verbose:
            sys.stdout.flush()
        initial = [self._L, self._S]
        n_u = objective.X_u.shape[0]
        # BLAS threads: small products are faster (and far faster on a loaded machine)
        # on one thread; large ones get this process's budget (joblib-worker aware).
        n_threads = 1 if n_u * d * d < _SMALL_GEMM else thread_budget()
        with threadpool_limits(limits=n_threads, user_api="blas"):
            result = optimizer.run(problem, initial_point=initial)
        L, S = result.point
        self._L = np.asarray(L, dtype=self._dtype)
        self._S = np.asarray(S, dtype=self._dtype)
        self.n_iter_ += int(result.iterations) - offset
        logged = result.log.get("iterations") or {}
        # CG logs the cost before each step and at its final point; SD logs it before
        # each step; TR keeps no per-iteration log (then: first and last cost only).
        costs = [float(c) for c in logged.get("cost", [])]
        if not costs:
            costs = [objective.cost(*initial)]
        if offset == 0:
            costs.append(objective.cost(self._L, self._S))
        self._costs.extend(costs)
        self.n_cost_evaluations_ += objective.n_evaluations
        self.n_grad_evaluations_ += objective.n_gradients
        return result

    def _finish(self):
        L = self._L.astype(np.float64)
        self.components_ = L.T if self.projection_ is None else L.T @ self.projection_
        self.synthesis_ = self._S.astype(np.float64)
        self.cost_history_ = np.asarray(self._costs, dtype=np.float64)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.required = False
        return tags
