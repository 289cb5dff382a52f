"""SUML: unsupervised metric learning with synthetic examples (Dutta et al., AAAI 2020)."""

from __future__ import annotations

import copy
import numbers

import numpy as np
from sklearn.base import _fit_context
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import StrOptions
from sklearn.utils.validation import validate_data

from .._training import SOLVERS, NonFiniteLossError, run_manopt
from .._training._progress import IterationBar
from .._utils import thread_limits, transactional_fit, warn_user
from .._utils._params import StrictInterval
from ._base import (BaseMahalanobis, check_n_components, warn_if_orthogonal_is_euclidean,
                    warn_if_outlying_rows)
from ._preprocessing import InputSpace, check_n_reduce
from ._suml_objective import SUMLObjective, sample_triplets

#: Stop when the Riemannian gradient norm falls below this (a stationary point).
GRADIENT_TOL = 1e-8

__all__ = ["SUML"]


#: Parameters that ``partial_fit`` cannot change once started: the model's shape and the
#: set it lies on.
_FROZEN = ("n_components", "n_reduce", "init", "dtype", "manifold")


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

    Read more in the :doc:`User Guide </suml>`.

    Parameters
    ----------
    n_components : int, default=None
        Embedding dimension ``l``. ``None`` means ``min(n_features, n_samples,
        128)`` (an evaluation costs O(n_samples x n_dims^2) in the reduced
        dimension ``n_dims >= n_components``).
    angle : float, default=40.0
        The paper's alpha: angle of the angular constraint, in degrees
        (0 < angle < 90).
    ortho_weight : float, default=2.0
        The paper's ``lambda``: weight of ``||L^T L - I||_F^2``. It only matters
        for ``manifold="euclidean"`` (on Stiefel the term is zero). Our entropy
        term is the *mean* over triplets (the paper's is the sum), so the
        paper's ``lambda = 0.5`` is ``0.5 / n_triplets`` here (about ``2e-4``):
        so weak a penalty lets ``L`` lose its orthonormality, and k-NN accuracy
        then falls far below PCA's on AT&T faces and COIL-20. The default was
        chosen on the Table 1 protocol (see the :doc:`SUML report </reports/suml>`).
    n_triplets : int >= 3, default=3000
        Random triplets drawn per fit (per mini-batch for the stochastic form).
        The paper uses "about 10^3" per mini-batch. 3000 matched 10^4's k-NN
        accuracy within seed noise at about a third of the fit time (see
        :doc:`linear study </reports/linear_study>`); the cost of an evaluation grows with the
        number of distinct points the triplets touch, so they are drawn among
        ``n_triplets`` random samples of larger data (as Algorithm 1 draws
        them within a mini-batch): on USPS (6000 samples) that fit 2.5x
        faster with the same k-NN accuracy.
    probability : {"sigmoid", "softmax"}, default="sigmoid"
        ``"sigmoid"``: ``p_c = 1 / (1 + exp(l_c))``, the paper's formula as
        written (the five values do not sum to 1); ``"softmax"``: the
        normalised form ``p = softmax(-l)`` over the five cases. The sigmoid
        form stays at or above PCA's k-NN accuracy on more data sets and
        varies less between seeds; softmax gains more on AT&T faces (see
        the :doc:`SUML report </reports/suml>` for the benchmark behind the default).
    manifold : {"euclidean", "stiefel"}, default="euclidean"
        Search space of ``L``: free with the ``ortho_weight`` penalty (the
        paper's setting), or exact orthonormal columns. ``S`` is always
        Euclidean. See the :doc:`SUML report </reports/suml>` for the benchmark behind the default.
    solver : {"conjugate_gradient", "steepest_descent", "trust_regions"}, \
            default="conjugate_gradient"
        pymanopt optimiser (trust regions uses a finite-difference Hessian).
    max_iter : int, default=300
        Optimiser iterations at most (per mini-batch for the stochastic form).
        ``0`` returns the initialisation (PCA for ``init="pca"``).
    tol : float, default=0.05
        Stop at the end of the fast descent: when, after a window of
        ``n_iter_no_change`` iterations in which the cost fell by more than
        ``tol`` times its starting value, a window falls by less; after the
        first two windows when neither fell that fast (a ``tol`` larger than
        any window's fall: no fast descent to wait for); or when the
        Riemannian gradient norm falls below ``GRADIENT_TOL`` (1e-8). Conjugate
        directions restart every ``n_iter_no_change`` iterations. The slow
        tail of the descent lowers k-NN accuracy (:doc:`/suml`).
    n_iter_no_change : int, default=10
        The window of ``tol``.
    batch_size : int, default=None
        ``None``: full-batch SUML, Eq. (1). An int: stochastic SUML
        (Algorithm 1): one pass over a random permutation of the data in
        mini-batches of ``batch_size`` samples (``array_split`` of the
        permutation into ``ceil(n / batch_size)`` parts, fewer where a part
        would hold under 3 samples, so that every sample is used); each
        mini-batch draws
        ``n_triplets`` triplets among its samples and runs up to ``max_iter``
        iterations warm-started from the previous ``(L, S)``, with the ``tol``
        stop of a full fit (the paper's Algorithm 1 runs a fixed ``maxiter``;
        the slow tail lowers k-NN accuracy here too).
    n_reduce : "auto", int or None, default="auto"
        PCA reduction of the input before optimising (the cost is
        ``O(N d^2)`` per evaluation), folded into ``components_`` so that
        :meth:`transform` stays one linear map of the raw input. ``"auto"``
        reduces to ``max(n_components, 256)`` dimensions when the input has
        more; an int reduces to that many dimensions (as in ECAML and JRD: at
        least ``n_components``, which defaults to at most ``n_reduce``);
        ``None`` never reduces.
    init : {"pca", "random"}, default="pca"
        ``"pca"``: ``L`` starts at the leading principal directions and ``S``
        at ``[I/2; I/2]`` (synthetic points are midpoints). ``"random"``:
        random orthonormal ``L`` and Gaussian ``S`` (the paper).
    dtype : {"float32", "float64"}, default="float32"
        Precision of the optimisation (``components_`` is always float64).
    verbose : int, default=0
        ``1`` shows a progress bar with an ETA; ``2`` also pymanopt's
        per-iteration table (cost, gradient norm).
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
        sample to the mean, after dividing by the largest absolute input
        value) before optimising, so that ``angle``, ``ortho_weight`` and the
        softplus margins mean the same on every data set. A uniform scale does
        not change neighbours; it is not folded into ``components_`` (which
        keeps orthonormal rows on Stiefel).
    n_iter_ : int
        Total optimiser iterations (summed over mini-batches).
    n_cost_evaluations_ : int
        Objective evaluations (forward passes), line-search trial points included.
    n_grad_evaluations_ : int
        Gradient evaluations; trial points rejected by the line search need none.
    history_ : list of dict
        ``{"iteration", "loss", "gradient_norm"}`` at the start and after
        every iteration of each optimiser run (the iteration counted within
        the run), plus ``"batch"`` (the mini-batch or ``partial_fit`` call) in
        the stochastic form (``partial_fit`` after a full-batch ``fit`` appends
        such records to the fit's, which have no ``"batch"``). For
        ``solver="trust_regions"``, which keeps no per-iteration log, the first
        and last costs of each run. Empty with ``max_iter=0`` (no run: the
        start is returned).
    n_features_in_ : int
    feature_names_in_ : ndarray of shape (`n_features_in_`,)
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

    Eq. (1) does not single out a metric: ``S`` is unconstrained, and ``S``
    alone, with ``L`` frozen, takes the entropy close to zero whatever ``L``
    is (the PCA start, the minor components, a random orthonormal map), far
    below where a fit stops. The ``L`` returned is therefore set by the
    descent, not by a minimum of the objective: from the PCA start, ``L``
    moves in the first iterations, while ``S`` is still near its start, and
    the objective on new triplets cannot tell whether that move made a better
    metric than the start. On AT&T faces, COIL-20 and wine the move lowers
    the weight of the two leading principal directions and mixes in
    directions that PCA discards: k-NN accuracy gains on the faces, loses a
    little on COIL-20 and more on wine. On USPS, digits, breast cancer and
    iris ``L`` stays in the principal subspace and slightly raises the
    leading direction's weight. ``max_iter=0`` returns the PCA start. The
    measurements: ``python benchmarks/bench_suml.py --only diagnosis``.

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
    >>> suml = SUML(n_components=8, n_triplets=2000, random_state=0)
    >>> suml.fit(X[:1000]).transform(X[1000:]).shape
    (797, 8)
    >>> suml.components_.shape
    (8, 64)

    The entropy objective falls from its start (the PCA initialisation):

    >>> bool(suml.history_[-1]["loss"] < suml.history_[0]["loss"] - 0.05)
    True
    >>> pipe = make_pipeline(SUML(n_components=8, random_state=0), KNeighborsClassifier(5))
    >>> pipe.fit(X[:1000], y[:1000]).predict(X[1000:1005]).shape
    (5,)
    """

    _parameter_constraints: dict = {
        "n_components": [StrictInterval(numbers.Integral, 1, None, closed="left"), None],
        "angle": [StrictInterval(numbers.Real, 0, 90, closed="neither")],
        "ortho_weight": [StrictInterval(numbers.Real, 0, None, closed="left")],
        "n_triplets": [StrictInterval(numbers.Integral, 3, None, closed="left")],  # 3 rows a triplet
        "probability": [StrOptions({"sigmoid", "softmax"})],
        "manifold": [StrOptions({"stiefel", "euclidean"})],
        "solver": [StrOptions(set(SOLVERS))],
        "max_iter": [StrictInterval(numbers.Integral, 0, None, closed="left")],
        "tol": [StrictInterval(numbers.Real, 0, None, closed="left")],
        "n_iter_no_change": [StrictInterval(numbers.Integral, 1, None, closed="left")],
        "batch_size": [StrictInterval(numbers.Integral, 3, None, closed="left"), None],
        "n_reduce": [StrOptions({"auto"}), StrictInterval(numbers.Integral, 1, None, closed="left"),
                     None],
        "init": [StrOptions({"pca", "random"})],
        "dtype": [StrOptions({"float32", "float64"})],
        "verbose": ["verbose"],
        "random_state": ["random_state"],
    }

    def __init__(self, n_components=None, *, angle=40.0, ortho_weight=2.0, n_triplets=3000,
                 probability="sigmoid", manifold="euclidean", solver="conjugate_gradient",
                 max_iter=300, tol=0.05, n_iter_no_change=10, batch_size=None, n_reduce="auto", init="pca",
                 dtype="float32", verbose=0, random_state=None):
        self.n_components = n_components
        self.angle = angle
        self.ortho_weight = ortho_weight
        self.n_triplets = n_triplets
        self.probability = probability
        self.manifold = manifold
        self.solver = solver
        self.max_iter = max_iter
        self.tol = tol
        self.n_iter_no_change = n_iter_no_change
        self.batch_size = batch_size
        self.n_reduce = n_reduce
        self.init = init
        self.dtype = dtype
        self.verbose = verbose
        self.random_state = random_state

    # ------------------------------------------------------------------ API
    @_fit_context(prefer_skip_nested_validation=True)
    @transactional_fit
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
        state = self._setup(X, rng)
        if self.batch_size is None:
            converged = self._run(state, state["X"], rng)
            if not converged:
                warn_user(
                    f"SUML stopped at max_iter={self.max_iter} iterations before its cost "
                    f"stopped falling (by more than tol={self.tol} of the start's over "
                    f"{self.n_iter_no_change} iterations); increase max_iter for a more "
                    "converged metric.",
                    ConvergenceWarning)
        else:
            order = rng.permutation(state["X"].shape[0])
            n = state["X"].shape[0]
            # as many batches as batch_size gives, but never one below 3 samples (a triplet):
            # every sample is used, once (3 of batch_size 3 over 7 samples: 3, 2, 2 dropped 4)
            n_batches = max(1, min(int(np.ceil(n / self.batch_size)), n // 3))
            for b, batch in enumerate(np.array_split(order, n_batches)):
                self._run(state, state["X"][batch], rng, batch_index=b)
        self._publish(state)
        return self

    @transactional_fit
    def partial_fit(self, X, y=None):
        """One stochastic SUML step (Algorithm 1) on a mini-batch, warm-started.

        The first call fits the working space (reduction, scale) on its batch
        and initialises ``(L, S)``; every call then draws ``n_triplets``
        triplets from ``X`` and runs up to ``max_iter`` iterations from the
        current ``(L, S)``, with the ``tol`` stop of a full fit. The parameters
        are validated at every call; those that fix the shape of the model or
        the set it lies on (``n_components``, ``n_reduce``, ``init``, ``dtype``,
        ``manifold``) cannot change between calls: a Stiefel run from a point
        off the manifold returned non-orthonormal rows. No ``ConvergenceWarning``
        is raised: a bounded number of iterations per mini-batch is the
        algorithm.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            A mini-batch (at least 3 samples, not all equal on the first call).
        y : Ignored
            Accepted for API compatibility.

        Returns
        -------
        self : SUML
            The updated estimator.
        """
        self._validate_params()
        first = not hasattr(self, "_state")
        X = self._validate_input(X, reset=first)
        if first:
            state = self._setup(X, check_random_state(self.random_state))
            Xr = state["X"]
        else:  # a copy of what a step changes: an interrupted step leaves the model as it was
            state = dict(self._state, rng=copy.deepcopy(self._state["rng"]),
                         history=list(self._state["history"]))
            frozen = {k: getattr(self, k) for k in _FROZEN}
            if frozen != state["frozen"]:
                changed = sorted(k for k in frozen if frozen[k] != state["frozen"][k])
                raise ValueError(
                    f"partial_fit cannot change {changed} of a started model (they fix its "
                    "shape, or the set it lies on); call fit to start afresh.")
            with np.errstate(over="ignore"):
                Xr = state["space"].transform(X).astype(state["dtype"], copy=False)
            if not np.isfinite(Xr).all():
                raise ValueError(
                    "This batch overflows the working scale set by the first partial_fit "
                    f"batch ({np.dtype(state['dtype']).name}): it lies on a scale far from "
                    "the first batch's. Rescale it like the first batch, or call fit to "
                    "start afresh on data of this scale.")
        self._run(state, Xr, state["rng"], batch_index=state["runs"])
        self._publish(state)
        return self

    # -------------------------------------------------------------- helpers
    def _validate_input(self, X, reset):
        return validate_data(self, X, reset=reset, dtype=[np.float64, np.float32],
                             ensure_min_samples=3)

    def _setup(self, X, rng):
        """The working space and the initial ``(L, S)``; returns the fit's state."""
        n_samples, n_features = X.shape
        n_components = check_n_components(self.n_components, n_features, n_samples)
        if self.n_reduce is None:
            target = None
        elif self.n_reduce == "auto":
            target = max(n_components, 256)
        else:
            if self.n_components is None:  # a reduction to n_reduce leaves that many directions
                n_components = min(n_components, int(self.n_reduce))
            target = check_n_reduce(self.n_reduce, n_components)
        warn_if_outlying_rows(X, "SUML")
        # the optimisation stays in the span of the data (at most n_samples dimensions)
        space, Xr = InputSpace.fit(X, target, rng)
        if space.dim < n_components:
            raise ValueError(
                f"n_components={n_components} exceeds the {space.dim} dimensions the data span "
                f"({n_samples} samples); lower n_components.")
        warn_if_orthogonal_is_euclidean("SUML", self.manifold, n_components, space.dim)
        dtype = np.dtype(self.dtype)
        d = space.dim
        if self.init == "pca":
            if space.projection is not None:
                L0 = np.eye(d, n_components)  # reduced coordinates are already PCA-ordered
            else:
                _, eigvec = np.linalg.eigh(Xr.T @ Xr)
                L0 = eigvec[:, ::-1][:, :n_components].copy()
            S0 = np.vstack([np.eye(d), np.eye(d)]) / 2.0
        else:
            L0, _ = np.linalg.qr(rng.standard_normal((d, n_components)))
            S0 = rng.standard_normal((2 * d, d)) / np.sqrt(2 * d)
        frozen = {k: getattr(self, k) for k in _FROZEN}
        return {"space": space, "X": Xr.astype(dtype, copy=False), "dtype": dtype, "rng": rng,
                "L": L0.astype(dtype), "S": S0.astype(dtype), "history": [], "n_iter": 0,
                "runs": 0, "n_cost": 0, "n_grad": 0, "frozen": frozen}

    def _run(self, state, Xr, rng, batch_index=None):
        """Run the optimiser from the state's ``(L, S)`` on triplets of ``Xr``; return ``converged``."""
        from pymanopt.manifolds import Euclidean, Product, Stiefel

        dtype = state["dtype"]
        d, n_components = state["L"].shape
        state["runs"] += 1
        if self.max_iter == 0:
            return True
        triplets = sample_triplets(Xr.shape[0], self.n_triplets, rng)
        if Xr.shape[0] > self.n_triplets:
            # among n_triplets samples at most (as Algorithm 1 draws them within a mini-batch):
            # an evaluation costs O(distinct points x d^2), and 3000 triplets over 10000
            # samples touch about 7600 of them where a pool of 3000 holds them to 2850
            pool = rng.choice(Xr.shape[0], self.n_triplets, replace=False)
            triplets = pool[sample_triplets(len(pool), self.n_triplets, rng)]
        objective = SUMLObjective(Xr, triplets, angle=self.angle, ortho_weight=self.ortho_weight,
                                  probability=self.probability)
        L_space = Stiefel(d, n_components) if self.manifold == "stiefel" else \
            Euclidean(d, n_components)
        manifold = Product([L_space, Euclidean(2 * d, d)])

        def gradient(L, S):
            _, grad_L, grad_S = objective.cost_grad(L, S)
            return grad_L, grad_S

        hessian = None
        if self.solver == "trust_regions":
            eps = float(np.sqrt(np.finfo(dtype).eps))

            def hessian(L, S, dL, dS):
                # Finite difference of the analytic Euclidean gradient along (dL, dS).
                norm = float(np.sqrt(np.sum(dL * dL) + np.sum(dS * dS)))
                if norm == 0.0:
                    return np.zeros_like(L), np.zeros_like(S)
                h = eps * max(1.0, float(np.sqrt(np.sum(L * L) + np.sum(S * S)))) / norm
                _, gL0, gS0 = objective.cost_grad(L, S)
                _, gL1, gS1 = objective.cost_grad(L + h * dL, S + h * dS)
                return (gL1 - gL0) / h, (gS1 - gS0) / h

        point = [state["L"], state["S"]]
        # dense products of N_u x d x d per evaluation: the thread policy decides
        flops = 4.0 * objective.X_u.shape[0] * d * d
        n_iter, history, converged, descended, windows = 0, [], False, False, 0
        cost = start_cost = float(objective.cost(*point))
        # one bar over every window of the run (each window's own was 10 steps); tol and the
        # gradient's tolerance end most runs early: its total and ETA are upper bounds
        desc = "SUML" if batch_index is None else f"SUML batch {batch_index}"
        with IterationBar(self.verbose, self.max_iter, desc) as progress:
            while n_iter < self.max_iter and not converged:
                window = min(self.n_iter_no_change, self.max_iter - n_iter)
                with thread_limits(flops_per_step=flops):
                    run = run_manopt(manifold, objective.cost, gradient, point,
                                     euclidean_hessian=hessian, solver=self.solver,
                                     max_iter=window, tol=GRADIENT_TOL, verbose=self.verbose,
                                     desc="SUML", bar=progress.bar)
                point = list(run.point)
                new_cost = float(objective.cost(*point))
                history += [dict(r, iteration=r["iteration"] + n_iter) for r in run.history
                            if not (history and r["iteration"] == 0)]
                n_iter += run.n_iter  # 0 when the optimiser stopped at its start
                fast = cost - new_cost > self.tol * abs(start_cost)
                # a slow window ends the run once the cost has descended fast (a slow start is
                # not the end), or after two windows that never did (a tol larger than any
                # window's fall: it ran to max_iter and warned, the larger tol the longer)
                windows += 1
                converged = run.converged or (not fast and (descended or windows >= 2))
                if window < self.n_iter_no_change and not run.converged:
                    converged = False  # max_iter ended a window before tol could judge it
                descended = descended or fast
                cost = new_cost
                progress.to(n_iter)  # windows that stopped early: the bar shows the iterations
                if run.n_iter == 0:  # no step from here: another window would take none either
                    break
        run.converged, run.n_iter, run.history = converged, n_iter, history
        L, S = point
        if not (np.isfinite(start_cost) and np.isfinite(cost)
                and np.isfinite(L).all() and np.isfinite(S).all()):
            raise NonFiniteLossError(
                f"SUML's cost became non-finite (start {start_cost}, end {cost}); the model "
                "is left as it was before this call. Scale the input to a moderate range.")
        state["L"], state["S"] = np.asarray(L, dtype=dtype), np.asarray(S, dtype=dtype)
        state["n_iter"] += run.n_iter
        history = run.history or [
            {"iteration": 0, "loss": start_cost, "gradient_norm": np.nan},
            {"iteration": run.n_iter, "loss": float(objective.cost(state["L"], state["S"])),
             "gradient_norm": np.nan}]
        if batch_index is not None:
            history = [dict(record, batch=batch_index) for record in history]
        state["history"].extend(history)
        state["n_cost"] += objective.n_evaluations
        state["n_grad"] += objective.n_gradients
        return run.converged

    def _publish(self, state):
        """Set the fitted attributes from the state (only once a run has finished)."""
        space = state["space"]
        # the training data are not kept (partial_fit transforms its own batches): a fitted
        # SUML's size does not grow with n_samples, and a saved model holds no training data
        state.pop("X", None)
        self._state = state
        self.components_ = space.fold(state["L"].astype(np.float64).T)
        self.synthesis_ = state["S"].astype(np.float64)
        self.projection_ = space.projection
        self.scale_ = space.scale
        self.n_iter_ = state["n_iter"]
        self.history_ = list(state["history"])
        self.n_cost_evaluations_ = state["n_cost"]
        self.n_grad_evaluations_ = state["n_grad"]

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.required = False
        return tags
