"""Machinery shared by the supervised linear learners :class:`~skdml.ECAML` and :class:`~skdml.JRD`.

A learner here fits ``L`` (``components_``, shape (n_components, n_features))
by minimising a torch objective ``f(L, extra parameters; X_batch, y_batch)``.
This module owns everything that does not depend on the objective:

* input checks (supervised, at least two classes, two samples per class);
* the optional PCA reduction of the input (:func:`skdml.base.reduce_input`),
  centring and scaling of the data the objective sees;
* the initialisations (``"pca"``, ``"lda"``, ``"identity"``, ``"random"`` or
  an array, as in scikit-learn's NCA);
* the two solvers:

  - ``"batch"``: pymanopt's Riemannian conjugate gradient on the product
    manifold (Stiefel or Euclidean for ``L``, Euclidean for the extra
    parameters), over a *fixed* set of class-balanced batches drawn once with
    the fit's ``random_state``, so that the cost is deterministic (CG and its
    line search need that);
  - ``"minibatch"``: Adam over fresh class-balanced ``P x K`` batches
    (:class:`skdml._sampling.ClassBalancedBatchSampler`) every epoch, with a QR
    retraction of ``L`` back onto the Stiefel manifold after each step;

* folding the reduction back into ``components_`` and the per-iteration
  ``loss_history_``.

The data the objective sees are ``X_t = P (x - mean) / c`` where ``P`` is the
optional PCA projection and ``c`` the root mean squared norm of the centred
training data (so ``mean ||x_t||^2 = 1``). ``components_ = L P``; the
embedding of the objective, ``L x_t = (components_ (x - mean)) / c``, differs
from :meth:`transform` only by a translation and a positive scalar, so it has
the same nearest neighbours. With ``manifold="stiefel"`` ``components_`` has
orthonormal rows.
"""

from __future__ import annotations

import time
import warnings
from numbers import Integral, Real

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.base import _fit_context
from sklearn.discriminant_analysis import LinearDiscriminantAnalysis
from sklearn.exceptions import ConvergenceWarning
from sklearn.preprocessing import LabelEncoder
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import validate_data

from ._sampling import ClassBalancedBatchSampler
from ._utils import torch_seed, thread_limits as torch_threads
from .base import BaseMahalanobis, check_n_components, reduce_input

__all__ = ["LinearMetricLearner", "check_supervised_input", "orthonormal_rows", "qr_retraction"]

#: Epochs without improvement (by more than ``tol``) before the minibatch solver stops.
N_ITER_NO_CHANGE = 10
#: With early stopping, the patience is at least this many optimisation steps (a small data set
#: has few batches per epoch, and its held-out score, on few samples, is noisy).
MIN_STEPS_NO_CHANGE = 300
#: k of the k-NN accuracies averaged by the early-stopping validation score.
VALIDATION_KS = (1, 10)
#: torch intra-op threads of a fit (see ``fit``).
N_THREADS = 1
#: dtype of the optimisation (float32 measured as accurate as float64 here, and faster).
DTYPE = torch.float32


def check_supervised_input(estimator, X, y):
    """Validate ``(X, y)`` for a supervised metric learner; return ``X, y_encoded, classes``.

    Raises a clear ``ValueError`` for NaN/inf, empty input, a single class or
    a class with a single sample (no positive pair can be formed from it).
    """
    X, y = validate_data(estimator, X, y, dtype=[np.float64, np.float32], ensure_min_samples=2,
                         y_numeric=False)
    check_classification_targets(y)
    encoder = LabelEncoder()
    y_enc = encoder.fit_transform(y)
    classes = encoder.classes_
    if len(classes) < 2:
        raise ValueError(
            f"{type(estimator).__name__} is supervised and needs at least 2 classes; "
            f"y holds only 1 class ({classes[0]!r})."
        )
    counts = np.bincount(y_enc)
    if counts.min() < 2:
        lonely = classes[counts < 2]
        raise ValueError(
            f"{type(estimator).__name__} needs at least 2 samples in every class (a class with "
            f"one sample has no positive pair); class(es) {list(lonely[:5])} have only 1 sample."
        )
    return X, y_enc.astype(np.int64), classes


def orthonormal_rows(candidates, n_rows, random_state):
    """Gram-Schmidt over candidate rows, completed by random rows, to ``n_rows`` orthonormal rows.

    Rows (nearly) in the span of the accepted ones are skipped, so the result
    keeps the order of preference of ``candidates``.
    """
    candidates = np.asarray(candidates, dtype=np.float64).reshape(-1, np.shape(candidates)[-1])
    dim = candidates.shape[1]
    basis = np.zeros((0, dim))
    pool = [candidates]
    rng = check_random_state(random_state)
    for attempt in range(4):
        for row in np.concatenate(pool):
            if basis.shape[0] == n_rows:
                return basis
            norm0 = np.linalg.norm(row)
            if norm0 == 0:
                continue
            for _ in range(2):  # twice is enough (Kahan)
                row = row - basis.T @ (basis @ row)
            norm = np.linalg.norm(row)
            if norm > 1e-8 * max(norm0, 1.0):
                basis = np.vstack([basis, row / norm])
        pool = [rng.standard_normal((n_rows, dim))]
    return basis


def qr_retraction(L):
    """Map ``L`` (k, r) to the nearest-by-QR matrix with orthonormal rows (signs fixed)."""
    Q, R = torch.linalg.qr(L.T)
    signs = torch.sign(torch.diagonal(R))
    signs = torch.where(signs == 0, torch.ones_like(signs), signs)
    return (Q * signs).T


def _polar(A):
    """Nearest matrix with orthonormal rows (polar factor), via torch (one thread in ``fit``)."""
    U, _, Vt = torch.linalg.svd(torch.as_tensor(A, dtype=torch.float64), full_matrices=False)
    return (U @ Vt).numpy()


class LinearMetricLearner(BaseMahalanobis):
    """Base of ECAML and JRD: fits ``components_`` by minimising a torch objective.

    Subclasses implement ``_make_objective(n_classes, n_components, dim)``,
    returning an object with ``parameters`` (list of leaf tensors, the first
    the ``(n_components, r)`` matrix ``L``, the others Euclidean extras),
    ``init_extras(X_t, y)`` (sets the extras from the initial ``L``) and
    ``__call__(X_batch, y_batch)`` (the scalar objective), plus
    ``_store_extras(objective, mean, scale)`` for extra fitted attributes.
    """

    _parameter_constraints: dict = {
        "n_components": [Interval(Integral, 1, None, closed="left"), None],
        "init": [StrOptions({"pca", "lda", "identity", "random"}), np.ndarray],
        "manifold": [StrOptions({"stiefel", "euclidean"})],
        "solver": [StrOptions({"batch", "minibatch"})],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "tol": [Interval(Real, 0, None, closed="left")],
        "learning_rate": [Interval(Real, 0, None, closed="neither")],
        "n_classes_per_batch": [Interval(Integral, 2, None, closed="left")],
        "n_samples_per_class": [Interval(Integral, 2, None, closed="left")],
        "n_reduce": [Interval(Integral, 1, None, closed="left"), StrOptions({"auto"}), None],
        "early_stopping": ["boolean", StrOptions({"auto"})],
        "validation_fraction": [Interval(Real, 0, 1, closed="neither")],
        "verbose": ["verbose"],
        "random_state": ["random_state"],
    }

    # ------------------------------------------------------------------ fit
    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y):
        """Fit the metric on labelled data.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Training data.
        y : array-like of shape (n_samples,)
            Class labels (at least 2 classes, at least 2 samples per class).

        Returns
        -------
        self : object
            The fitted estimator.
        """
        X, y, classes = check_supervised_input(self, X, y)
        rng = check_random_state(self.random_state)
        for stale in ("validation_scores_", "best_validation_score_", "best_iteration_"):
            self.__dict__.pop(stale, None)
        n_samples, n_features = X.shape
        init = self.init
        if isinstance(init, np.ndarray):
            init = np.asarray(init, dtype=np.float64)
            if init.ndim != 2 or init.shape[1] != n_features:
                raise ValueError(
                    f"The init array must have shape (n_components, n_features) = "
                    f"(n_components, {n_features}); got shape {init.shape}."
                )
            if self.n_components is not None and init.shape[0] != self.n_components:
                raise ValueError(
                    f"The init array has {init.shape[0]} rows but n_components="
                    f"{self.n_components}; they must agree."
                )
            if not np.all(np.isfinite(init)):
                raise ValueError("The init array contains NaN or infinity.")
            n_components = check_n_components(init.shape[0], n_features)
        else:
            n_components = check_n_components(self.n_components, n_features)

        # 1. optional PCA reduction ("auto": lossless reduction to the sample span)
        n_reduce = self.n_reduce
        if n_reduce == "auto":
            n_reduce = n_samples if n_features > n_samples >= n_components else None
        elif n_reduce is not None and n_reduce < n_components:
            raise ValueError(
                f"n_reduce={n_reduce} is smaller than n_components={n_components}: the input "
                "cannot be reduced below the embedding dimension."
            )
        mean = X.mean(axis=0, dtype=np.float64)
        X_red, projection = reduce_input(X, n_reduce, rng)
        if projection is None:
            X_c = np.asarray(X, dtype=np.float64) - mean
        else:
            X_c = np.asarray(X_red, dtype=np.float64)  # PCA output is centred
            if X_c.shape[1] < n_components:
                raise ValueError(
                    f"n_components={n_components} exceeds the {X_c.shape[1]} dimensions left "
                    "after the PCA reduction (at most n_samples); lower n_components."
                )
        scale = float(np.sqrt(np.mean(np.sum(X_c**2, axis=1))))
        if not np.isfinite(scale) or scale <= 0:
            scale = 1.0
        X_t = X_c / scale

        if self.manifold == "stiefel" and n_components >= X_t.shape[1]:
            warnings.warn(
                f"{type(self).__name__}: with manifold='stiefel' and n_components="
                f"{n_components} equal to the input dimension, L is orthogonal and the learned "
                "distance is the Euclidean one whatever the objective; choose n_components < "
                "n_features or manifold='euclidean'.", UserWarning)

        n_classes = len(classes)
        P = min(self.n_classes_per_batch, n_classes)
        K = self.n_samples_per_class
        # One intra-op thread: the batches are small (P*K rows), and on a loaded 2-core machine
        # two threads were measured 30x slower per step (spin-waiting) than one.
        with torch_threads(N_THREADS), torch.random.fork_rng(devices=[]):
            # 2. initial L in the reduced space
            L0 = self._initial_components(init, X_t, y, n_components, projection, rng)
            torch.manual_seed(torch_seed(rng))
            objective = self._make_objective(n_classes, n_components, X_t.shape[1])
            X_tensor = torch.as_tensor(X_t, dtype=DTYPE)
            y_tensor = torch.as_tensor(y, dtype=torch.int64)
            with torch.no_grad():
                objective.parameters[0].copy_(torch.as_tensor(L0, dtype=DTYPE))
            objective.init_extras(X_tensor, y_tensor)
            start = [p.detach().clone() for p in objective.parameters]
            if self._uses_early_stopping(y):
                # a) choose the number of epochs on a stratified hold-out
                refit_seed = rng.randint(np.iinfo(np.int32).max)  # drawn first: reproducible
                train_idx, val_idx = self._validation_split(y, rng)
                validation = (X_tensor[train_idx], X_tensor[val_idx], y[train_idx], y[val_idx])
                sampler = ClassBalancedBatchSampler(y[train_idx], P, K, rng)
                converged = self._solve_minibatch(objective, X_tensor[train_idx],
                                                  y_tensor[train_idx], sampler, validation)
                # b) refit on all the data for that many epochs, from the same start (tiny
                # classes, e.g. 7 faces a person, cannot spare their held-out samples)
                with torch.no_grad():
                    for p, p0 in zip(objective.parameters, start):
                        p.copy_(p0)
                sampler = ClassBalancedBatchSampler(y, P, K, np.random.RandomState(refit_seed))
                self._solve_minibatch(objective, X_tensor, y_tensor, sampler,
                                      n_epochs=self.best_iteration_)
            else:
                sampler = ClassBalancedBatchSampler(y, P, K, rng)
                if self.solver == "batch":
                    converged = self._solve_batch(objective, X_tensor, y_tensor, sampler)
                else:
                    converged = self._solve_minibatch(objective, X_tensor, y_tensor, sampler)
            L = objective.parameters[0].detach().to(torch.float64).numpy()
            if self.manifold == "stiefel":  # remove float32 round-off of the constraint
                L = _polar(L)
            self.components_ = L if projection is None else L @ projection.astype(np.float64)
            self.classes_ = classes
            self._store_extras(objective, mean, scale)

        if not converged:
            warnings.warn(
                f"{type(self).__name__} ({self.solver} solver) did not converge within "
                f"max_iter={self.max_iter} iterations; increase max_iter or tol.",
                ConvergenceWarning,
            )
        return self

    def _uses_early_stopping(self, y):
        """Whether this fit holds out a validation set (``early_stopping``, minibatch only).

        ``"auto"`` enables it when a class has at least 3 samples (one can be held
        out while 2 remain to form a positive pair).
        """
        if self.solver != "minibatch" or self.early_stopping is False:
            return False
        if self.early_stopping == "auto":
            return bool(np.bincount(y).max() >= 3)
        return True

    def _validation_split(self, y, rng):
        """Stratified hold-out: ``validation_fraction`` of each class with >= 3 samples."""
        train, val = [], []
        for c in np.unique(y):
            idx = rng.permutation(np.flatnonzero(y == c))
            n_val = min(max(1, int(round(self.validation_fraction * len(idx)))), len(idx) - 2)
            n_val = max(n_val, 0)
            val.append(idx[:n_val])
            train.append(idx[n_val:])
        train, val = np.sort(np.concatenate(train)), np.sort(np.concatenate(val))
        if len(val) == 0:
            raise ValueError("early_stopping=True needs at least one class with 3 or more "
                             "samples to hold out a validation set.")
        return train, val

    @staticmethod
    def _validation_score(L, X_train, X_val, y_train, y_val):
        """Mean k-NN accuracy (k in ``VALIDATION_KS``) of the held-out samples under ``L``.

        Averaging the 1-NN and 10-NN accuracies (the issue's two criteria) gives a
        smoother signal than the 1-NN accuracy alone, which saturates early on small
        data sets while the 10-NN accuracy still improves.
        """
        n_classes = int(max(y_train.max(), y_val.max())) + 1
        y_train_t = torch.as_tensor(y_train, dtype=torch.int64)
        ks = [min(k, len(y_train)) for k in VALIDATION_KS]
        correct = np.zeros(len(ks))
        with torch.no_grad():
            Z_train, Z_val = X_train @ L.T, X_val @ L.T
            for start in range(0, len(y_val), 1024):
                chunk = Z_val[start:start + 1024]
                y_chunk = torch.as_tensor(y_val[start:start + 1024], dtype=torch.int64)
                order = torch.cdist(chunk, Z_train).topk(max(ks), dim=1, largest=False).indices
                labels = y_train_t[order]  # (chunk, k_max), nearest first
                for i, k in enumerate(ks):
                    votes = F.one_hot(labels[:, :k], n_classes).sum(dim=1)
                    correct[i] += float((votes.argmax(dim=1) == y_chunk).sum())
        return float(np.mean(correct / len(y_val)))

    # ----------------------------------------------------------------- init
    def _initial_components(self, init, X_t, y, n_components, projection, rng):
        dim = X_t.shape[1]
        if isinstance(init, np.ndarray):
            L0 = init if projection is None else init @ projection.T.astype(np.float64)
            return _polar(L0) if self.manifold == "stiefel" else L0
        if init == "identity":
            return np.eye(n_components, dim)
        if init == "random":
            L0 = rng.standard_normal((n_components, dim))
            if self.manifold == "stiefel":
                return _polar(L0)
            return L0 / np.sqrt(dim)
        pca_rows = self._pca_rows(X_t, n_components, projection)
        if init == "pca":
            return orthonormal_rows(pca_rows, n_components, rng)
        # "lda": discriminant directions first, completed by principal ones
        n_lda = min(n_components, len(np.unique(y)) - 1, dim)
        # the SVD solver never forms a (d, d) matrix: fine for 4096 pixels
        lda = LinearDiscriminantAnalysis(n_components=n_lda, solver="svd")
        lda.fit(X_t, y)
        lda_rows = lda.scalings_.T[:n_lda]
        return orthonormal_rows(np.vstack([lda_rows, pca_rows]), n_components, rng)

    @staticmethod
    def _pca_rows(X_t, n_components, projection):
        dim = X_t.shape[1]
        if projection is not None:  # already in decreasing-variance PCA coordinates
            return np.eye(n_components, dim)
        # principal axes of the centred data: eigenvectors of the (d, d) scatter matrix
        # (much cheaper than an SVD of the (n, d) data when n >> d)
        n_samples = X_t.shape[0]
        # (torch: under fit's one-thread limit; multi-threaded BLAS was measured 20-40x
        # slower on a loaded 2-core machine)
        X_t = torch.as_tensor(X_t, dtype=torch.float64)
        if dim <= n_samples:
            _, eigvec = torch.linalg.eigh(X_t.T @ X_t)
            return eigvec.flip(1)[:, :n_components].T.numpy()
        _, _, Vt = torch.linalg.svd(X_t, full_matrices=False)
        return Vt[:n_components].numpy()

    # -------------------------------------------------------------- solvers
    def _solve_batch(self, objective, X, y, sampler):
        """pymanopt conjugate gradient over a fixed set of batches; return ``converged``."""
        import pymanopt
        from pymanopt.manifolds import Euclidean, Product, Stiefel
        from pymanopt.optimizers import ConjugateGradient

        batches = [torch.as_tensor(idx, dtype=torch.int64) for idx in sampler]
        batches = [(X[idx], y[idx]) for idx in batches]
        params = objective.parameters
        k, r = params[0].shape
        factors = [Stiefel(r, k) if self.manifold == "stiefel" else Euclidean(r, k)]
        factors += [Euclidean(*p.shape) for p in params[1:]]
        manifold = Product(factors) if len(factors) > 1 else factors[0]
        cache = {"key": None}

        def evaluate(arrays):
            key = [np.array(a, copy=True) for a in arrays]
            if cache["key"] is not None and all(
                    np.array_equal(a, b) for a, b in zip(key, cache["key"])):
                return cache["value"], cache["grads"]
            with torch.no_grad():
                params[0].copy_(torch.as_tensor(arrays[0].T, dtype=DTYPE))
                for p, a in zip(params[1:], arrays[1:]):
                    p.copy_(torch.as_tensor(a, dtype=DTYPE))
            for p in params:
                p.grad = None
            total = 0.0
            for Xb, yb in batches:  # backward per batch: memory of one batch only
                value = objective(Xb, yb) / len(batches)
                value.backward()
                total += float(value.detach())
            grads = [params[0].grad.T] + [p.grad for p in params[1:]]
            grads = [g.detach().to(torch.float64).numpy().copy() for g in grads]
            cache.update(key=key, value=total, grads=grads)
            return total, grads

        if len(factors) > 1:
            @pymanopt.function.numpy(manifold)
            def cost(*arrays):
                return evaluate(arrays)[0]

            @pymanopt.function.numpy(manifold)
            def gradient(*arrays):
                return evaluate(arrays)[1]
        else:
            @pymanopt.function.numpy(manifold)
            def cost(array):
                return evaluate([array])[0]

            @pymanopt.function.numpy(manifold)
            def gradient(array):
                return evaluate([array])[1][0]

        problem = pymanopt.Problem(manifold, cost, euclidean_gradient=gradient)
        optimizer = ConjugateGradient(
            max_iterations=self.max_iter + 1,  # pymanopt counts the starting point as iteration 1
            min_gradient_norm=self.tol, min_step_size=1e-12,
            verbosity=2 if self.verbose else 0, log_verbosity=1,
        )
        start = [params[0].detach().to(torch.float64).numpy().T.copy()]
        start += [p.detach().to(torch.float64).numpy().copy() for p in params[1:]]
        result = optimizer.run(problem, initial_point=start if len(start) > 1 else start[0])
        point = result.point if len(factors) > 1 else [result.point]
        evaluate(list(point))  # leave the parameters at the optimum
        self.loss_history_ = np.asarray(result.log["iterations"]["cost"], dtype=np.float64)
        self.n_iter_ = max(int(result.iterations) - 1, 1)
        return "max iterations" not in result.stopping_criterion

    def _solve_minibatch(self, objective, X, y, sampler, validation=None, n_epochs=None):
        """Adam over class-balanced batches + QR retraction; return ``converged``.

        With ``validation`` (early stopping), the epochs are judged by the mean
        1-NN/10-NN accuracy of the held-out samples, training stops when it has
        not improved by more than ``tol`` for ``max(N_ITER_NO_CHANGE,
        MIN_STEPS_NO_CHANGE / batches per epoch)`` epochs, and the best epoch (the
        latest among equal scores) is stored in ``best_iteration_``. With
        ``n_epochs``, exactly that many epochs are run (the refit).
        """
        params = objective.parameters
        best_score, val_scores = -np.inf, []
        optimizer = torch.optim.Adam(params, lr=self.learning_rate)
        stiefel = self.manifold == "stiefel"
        history, best, no_change = [], np.inf, 0
        patience = N_ITER_NO_CHANGE
        if validation is not None:
            patience = max(N_ITER_NO_CHANGE, -(-MIN_STEPS_NO_CHANGE // len(sampler)))
        converged = n_epochs is not None
        if self.verbose:
            what = " (refit on all the data)" if n_epochs is not None else ""
            print(f"[{type(self).__name__}] {'Epoch':>6} {'Objective':>14} {'Time(s)':>9}{what}")
        start = time.perf_counter()
        for epoch in range(self.max_iter if n_epochs is None else n_epochs):
            total = 0.0
            for idx in sampler:
                idx = torch.as_tensor(idx, dtype=torch.int64)
                optimizer.zero_grad(set_to_none=True)
                value = objective(X[idx], y[idx])
                value.backward()
                optimizer.step()
                if stiefel:
                    with torch.no_grad():
                        params[0].copy_(qr_retraction(params[0]))
                total += float(value.detach())
            history.append(total / len(sampler))
            if self.verbose:
                print(f"[{type(self).__name__}] {epoch + 1:>6d} {history[-1]:>14.6e} "
                      f"{time.perf_counter() - start:>9.2f}", flush=True)
            if n_epochs is not None:
                continue
            if validation is not None:
                val_scores.append(self._validation_score(params[0].detach(), *validation))
                if self.verbose:
                    print(f"[{type(self).__name__}] {'':>6} validation 1/10-NN accuracy "
                          f"{val_scores[-1]:.4f}", flush=True)
                if val_scores[-1] > best_score + self.tol:
                    no_change = 0
                else:
                    no_change += 1
                if val_scores[-1] >= best_score:  # on a tie keep the later (trained longer)
                    best_score = val_scores[-1]
                    self.best_iteration_ = epoch + 1
            elif history[-1] > best - self.tol:
                no_change += 1
            else:
                no_change = 0
            best = min(best, history[-1])
            if no_change >= patience:
                converged = True
                break
        if validation is not None:
            self.validation_scores_ = np.asarray(val_scores)
            self.best_validation_score_ = best_score
        self.loss_history_ = np.asarray(history)
        self.n_iter_ = len(history)
        return converged

    # ---------------------------------------------------------------- hooks
    def _make_objective(self, n_classes, n_components, dim):  # pragma: no cover - abstract
        raise NotImplementedError

    def _store_extras(self, objective, mean, scale):
        """Store extra fitted attributes (default: none)."""

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.required = True
        tags.input_tags.allow_nan = False
        return tags


class ObjectiveBase:
    """Owns the leaf tensors of an objective; ``parameters[0]`` is ``L`` (k, r)."""

    def __init__(self, n_components, dim):
        self.L = torch.zeros(n_components, dim, dtype=DTYPE, requires_grad=True)

    @property
    def parameters(self):
        return [self.L]

    def init_extras(self, X, y):
        """Initialise extra parameters from the data and the initial ``L`` (default: none)."""

    def embed(self, X):
        return X @ self.L.T
