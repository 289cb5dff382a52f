"""The core shared by the supervised linear learners :class:`~skdml.ECAML` and :class:`~skdml.JRD`.

A learner here fits ``L`` (``components_``) by minimising a torch objective
``f(L, extra parameters; X_batch, y_batch)`` in the working space of
:mod:`skdml.linear._preprocessing`. This module owns everything that does not
depend on the objective: the supervised input checks, the initialisation and
the two solvers, both from the shared training machinery:

- ``"adam"``: Adam over class-balanced ``P x K`` batches, through
  :func:`skdml._training.train_epochs`, with a QR retraction onto the Stiefel
  manifold after each step (``manifold="stiefel"``) and early stopping on a
  held-out k-NN score, followed by a refit on all the data;
- ``"conjugate_gradient"``: Riemannian conjugate gradient on the product manifold through
  :func:`skdml._training.run_manopt`, over a fixed set of class-balanced
  batches drawn once (its line search needs a deterministic cost).
"""

from __future__ import annotations

import math
from numbers import Integral, Real

import numpy as np
import torch
from sklearn.base import _fit_context
from sklearn.exceptions import ConvergenceWarning
from sklearn.preprocessing import LabelEncoder
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import StrOptions
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import validate_data

from .._training import (ClassBalancedBatchSampler, EarlyStopping, NonFiniteLossError, Progress,
                         Trainable, Validation, n_held_out_classes, run_manopt, train_epochs,
                         validation_holdout)
from .._utils import (check_label_input, check_orderable_labels, plain_labels, thread_limits,
                      torch_fit_modes, torch_rng_scope, torch_seed, transactional_fit,
                      warn_user)
from .._utils._params import StrictInterval, non_negative_real, positive_int
from ..callbacks import CallbackStateMixin, UserCallbacks, check_callbacks
from ._base import (BaseMahalanobis, check_init_array, check_n_components, warn_if_outlying_rows,
                    warn_if_orthogonal_is_euclidean)
from ._preprocessing import (InputSpace, check_n_reduce, initial_components, polar,
                             qr_retraction, standardizing_pays)
from ._validation import (choose_run, improves, knn_purity, knn_sample_scores,
                          too_few_classes_to_hold_out, unseen_query_scores, warn_start_kept)

__all__ = ["LinearMetricLearner", "LinearObjective", "check_supervised_input"]

#: With early stopping, the patience is at least this many optimisation steps (a small data
#: set has few batches per epoch, and its held-out score, on few samples, is noisy).
MIN_STEPS_NO_CHANGE = 300
#: Unseen classes: ``"auto"`` chooses its objective on the held-out classes only when at least
#: this many are held out. A held-out class's queries are alike, so the choice measures about
#: as many independent things as there are classes: with 2-4 (8-20 training classes) it picked
#: the wrong objective and lost up to 8 points of Recall@1 to its start on unseen classes
#: (``bench_stress.py``, ``bench_linear_unseen.py``); with 27-31 (Omniglot, 136-156 classes)
#: it chose well (``bench_omniglot.py --linear-only``). 10 lies between the two, as a round
#: number of independent classes to compare two objectives on.
MIN_HELD_OUT_CLASSES_TO_CHOOSE = 10
#: The largest rate ``learning_rate="auto"`` gives (data sets of one or two batches an epoch).
MAX_AUTO_LR = 0.01
#: dtype of the optimisation (float32 measured as accurate as float64 here, and faster).
DTYPE = torch.float32

def check_supervised_input(estimator, X, y):
    """Validate ``(X, y)`` for a supervised metric learner; return ``X, y_encoded, classes``.

    Raises a clear ``ValueError`` for NaN/inf, empty input, a single class or
    a class with a single sample (no positive pair can be formed from it).
    """
    X, y = validate_data(estimator, X, check_label_input(y), dtype=[np.float64, np.float32],
                         ensure_min_samples=2, y_numeric=False)
    y = check_orderable_labels(y)
    check_classification_targets(y)
    encoder = LabelEncoder()
    y_enc = encoder.fit_transform(y)
    classes = encoder.classes_
    name = type(estimator).__name__
    if len(classes) < 2:
        raise ValueError(f"{name} is supervised and needs at least 2 classes; "
                         f"y holds only 1 class ({plain_labels(classes[:1])[0]!r}).")
    counts = np.bincount(y_enc)
    if counts.min() < 2:
        lonely = classes[counts < 2]
        raise ValueError(
            f"{name} needs at least 2 samples in every class (a class with one sample has no "
            f"positive pair); class(es) {plain_labels(lonely[:5])} have only 1 sample.")
    return X, y_enc.astype(np.int64), classes


class LinearObjective:
    """The parameters and objective of a linear learner; ``parameters[0]`` is ``L`` (k, r).

    Subclasses set ``self.objective`` (a :class:`~skdml.losses.MetricObjective`)
    and may add parameters (``parameters``), initialise them from the data
    (``init_extras``) and change the embedding (``embed``).
    """

    def __init__(self, n_components, dim):
        self.L = torch.zeros(n_components, dim, dtype=DTYPE, requires_grad=True)
        self.objective = None

    @property
    def parameters(self):
        return [self.L]

    def init_extras(self, X, y):
        """Initialise extra parameters from the data and the initial ``L`` (default: none)."""

    def embed(self, X):
        return X @ self.L.T

    @property
    def reads_directions_only(self):
        """Whether the objective reads unit embeddings only (a 1-d one is then +1 or -1)."""
        loss = getattr(self.objective, "loss", None)
        return bool(getattr(loss, "normalize_embeddings", False))

    def __call__(self, X, y):
        """``(total, terms)`` of a batch."""
        return self.objective(self.embed(X), y)


class _LinearTrainable(Trainable):
    """Adapts a :class:`LinearObjective` on in-memory data to :func:`train_epochs`."""

    def __init__(self, objective, X, y, stiefel):
        self.objective, self.X, self.y, self.stiefel = objective, X, y, stiefel

    def batch_loss(self, idx):
        idx = torch.as_tensor(idx, dtype=torch.int64)
        return self.objective(self.X[idx], self.y[idx])

    def after_step(self):
        if self.stiefel:
            with torch.no_grad():
                self.objective.L.copy_(qr_retraction(self.objective.L))

    def state_dict(self):
        return [p.detach().clone() for p in self.objective.parameters]

    def load_state_dict(self, state):
        with torch.no_grad():
            for p, value in zip(self.objective.parameters, state):
                p.copy_(value)


def _check_start_spreads(X, L0, init):
    """Refuse a user's start that maps ``X`` onto fewer spread directions than it has rows.

    An output direction constant over the data (an ``init`` reading constant
    features, say) gets no gradient from any distance loss, so it never moves.
    """
    Z = (X - X.mean(axis=0)) @ L0.T
    rank = np.linalg.matrix_rank(Z)
    if rank < min(L0.shape[0], X.shape[0] - 1):
        what = "init='identity'" if isinstance(init, str) else "The init array"
        raise ValueError(
            f"{what} maps X onto {rank} directions with any spread, for {L0.shape[0]} "
            "components (it reads features that are constant, or dependent): the others stay "
            "constant, as no gradient moves them. Use init='pca' or fewer components.")


class LinearMetricLearner(CallbackStateMixin, BaseMahalanobis):
    """Base of ECAML and JRD: fits ``components_`` by minimising a torch objective.

    Subclasses implement ``_make_objective(n_classes, n_components, dim, candidate)``
    returning a :class:`LinearObjective`, and may implement
    ``_store_extras(objective, space)`` for extra fitted attributes, ``_candidates(y)``
    for settings to choose among on the hold-out (e.g. ECAML's ``loss="auto"``) and
    ``_store_candidate(candidate)`` to record the choice.
    """

    _parameter_constraints: dict = {
        "n_components": [positive_int(), None],
        "init": [StrOptions({"pca", "lda", "identity", "random"}), np.ndarray],
        "manifold": [StrOptions({"stiefel", "euclidean"})],
        "solver": [StrOptions({"adam", "conjugate_gradient"})],
        "max_iter": [StrictInterval(Integral, 0, None, closed="left")],
        "tol": [non_negative_real()],
        "learning_rate": [StrictInterval(Real, 0, None, closed="neither"), StrOptions({"auto"})],
        "n_classes_per_batch": [StrictInterval(Integral, 2, None, closed="left"),
                                StrOptions({"auto"})],
        "n_samples_per_class": [StrictInterval(Integral, 2, None, closed="left"),
                                StrOptions({"auto"})],
        "n_reduce": [positive_int(), StrOptions({"auto"}), None],
        "standardize": ["boolean", StrOptions({"auto"})],
        "early_stopping": ["boolean", StrOptions({"auto"})],
        "validation_fraction": [StrictInterval(Real, 0, 1, closed="neither"), None],
        "validation_split": [StrOptions({"stratified", "class_disjoint"})],
        "n_iter_no_change": [positive_int()],
        "verbose": ["verbose"],
        "random_state": ["random_state"],
        "callbacks": [None, list, tuple],
    }

    # ------------------------------------------------------------------ fit
    @_fit_context(prefer_skip_nested_validation=True)
    @transactional_fit
    @torch_fit_modes()
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
        warn_if_outlying_rows(X, type(self).__name__)
        check_callbacks(self.callbacks)
        if self.callbacks and self.solver == "conjugate_gradient":
            raise ValueError("callbacks are called by the Adam solver's training loop; "
                             "solver='conjugate_gradient' runs pymanopt and calls none. Use "
                             "solver='adam' or drop callbacks.")
        rng = check_random_state(self.random_state)
        n_samples, n_features = X.shape
        n_components = self._check_init(n_features, n_samples)
        n_reduce = self.n_reduce
        if n_reduce == "auto":
            n_reduce = n_samples if n_features > n_samples >= n_components else None
        elif n_reduce is not None:
            n_reduce = check_n_reduce(n_reduce, n_components)
        standardize = self.standardize
        if standardize == "auto":
            standardize = standardizing_pays(X, y)
        space, X_t = InputSpace.fit(X, n_reduce, rng, standardize=bool(standardize))
        if space.dim < n_components:
            raise ValueError(
                f"n_components={n_components} exceeds the {space.dim} dimensions left after the "
                "PCA reduction (at most n_samples); lower n_components.")
        warn_if_orthogonal_is_euclidean(type(self).__name__, self.manifold, n_components,
                                        space.dim)
        candidates = self._candidates(y)
        P, K = self._batch_plan(len(classes), candidates[0])
        flops = 6.0 * P * K * space.dim * n_components
        with thread_limits(flops_per_step=flops), torch_rng_scope():
            L0 = initial_components(self.init, X_t, y, n_components, space, self.manifold, rng)
            if isinstance(self.init, np.ndarray) or self.init == "identity":
                _check_start_spreads(X_t, L0, self.init)
            torch.manual_seed(torch_seed(rng))
            X_tensor = torch.as_tensor(X_t, dtype=DTYPE)
            y_tensor = torch.as_tensor(y, dtype=torch.int64)

            label_starts = {}  # init="lda" fitted on a validation run's training rows

            def fresh_objective(candidate, rows=None):
                """A new objective of ``candidate`` at its start, read from ``rows`` only.

                ``rows``: a validation run's training rows (``None``: all). Whatever of the
                start reads labels (an ``"lda"`` start, JRD's class proxies) reads theirs
                only: the held-out labels would make the start's held-out score, and the
                choice to keep it, optimistic.
                """
                start = L0
                if rows is not None and isinstance(self.init, str) and self.init == "lda":
                    if not label_starts:
                        label_starts["lda"] = initial_components(
                            self.init, X_t[rows], y[rows], n_components, space, self.manifold,
                            rng)
                    start = label_starts["lda"]
                objective = self._make_objective(len(classes), n_components, space.dim,
                                                 candidate)
                with torch.no_grad():
                    objective.L.copy_(torch.as_tensor(start, dtype=DTYPE))
                read = slice(None) if rows is None else torch.as_tensor(rows, dtype=torch.int64)
                objective.init_extras(X_tensor[read], y_tensor[read])
                return objective

            candidate = candidates[0]
            if self.max_iter == 0:  # the starting point itself, e.g. to measure a gain
                objective = fresh_objective(candidate)
                fitted = {"n_iter_": 0, "history_": []}
                converged = True
            elif self.solver == "conjugate_gradient":
                objective = fresh_objective(candidate)
                sampler = ClassBalancedBatchSampler(y, P, K, rng)
                fitted, converged = self._solve_batch(objective, X_tensor, y_tensor, sampler)
            else:
                objective, candidate, fitted, converged = self._solve_minibatch(
                    fresh_objective, candidates, X_tensor, y, len(classes), rng)
            L = objective.L.detach().to(torch.float64).numpy()
            if self.manifold == "stiefel":  # remove float32 round-off of the constraint
                L = polar(L)
        # a fit that fails above leaves the estimator as it was: attributes are set only here
        for stale in ("best_iteration_", "best_validation_score_", "validation_split_",
                      "candidate_scores_"):
            self.__dict__.pop(stale, None)
        self.components_ = space.fold(L)
        self.classes_ = classes
        self.standardize_ = bool(standardize)
        self._store_candidate(candidate)
        for key, value in fitted.items():
            setattr(self, key, value)
        self._store_extras(objective, space)
        if n_components == 1 and objective.reads_directions_only and self.max_iter:
            # scikit-learn's common checks fit n_components=1: warned, not refused
            warn_user(
                f"{type(self).__name__}: n_components=1 with a loss on unit embeddings (each "
                "sample +1 or -1, whose gradient in L is 0): the map stays at its start. Use "
                f"n_components >= 2, or {self._raw_distance_advice}.")
        if self.max_iter and self._unseen_gain_unmeasurable(y):  # the start, as the solver kept
            warn_start_kept(type(self).__name__, len(classes))
        if not converged:
            warn_user(
                f"{type(self).__name__} ({self.solver} solver) did not converge within "
                f"max_iter={self.max_iter} iterations; increase max_iter or tol.",
                ConvergenceWarning)
        return self

    def _check_init(self, n_features, n_samples):
        """Check an ``init`` array against the data; return ``n_components``."""
        init = self.init
        if not isinstance(init, np.ndarray):
            n_components = check_n_components(self.n_components, n_features, n_samples)
            if self.n_components is None and isinstance(self.n_reduce, Integral):
                # a reduction to n_reduce dimensions leaves at most that many directions
                n_components = min(n_components, int(self.n_reduce))
            return n_components
        init = check_init_array(init, n_features, self.n_components)
        return check_n_components(init.shape[0], n_features)

    def _chooses_on_hold_out(self, y):
        """Whether ``"auto"`` settings are chosen on the hold-out (else the task's own is used).

        For k-NN, whenever early stopping holds samples out; for unseen classes, only when
        the hold-out has :data:`MIN_HELD_OUT_CLASSES_TO_CHOOSE` classes or more.
        """
        if not self._use_early_stopping(y):
            return False
        if self.validation_split == "class_disjoint":
            return n_held_out_classes(len(np.unique(y)), self.validation_fraction) >= \
                MIN_HELD_OUT_CLASSES_TO_CHOOSE
        return True

    def _use_early_stopping(self, y):
        """Minibatch only; ``"auto"``: on when the hold-out is possible: some class has at
        least 3 samples (stratified), or at least 4 classes (class-disjoint: 2 held out, 2 to
        train; with fewer, :meth:`_unseen_gain_unmeasurable` keeps the start)."""
        if self.solver != "adam" or self.early_stopping is False:
            return False
        if self.early_stopping == "auto":
            if self.validation_split == "class_disjoint":
                # the default fraction's hold-out: one of the user's that leaves too few
                # training classes is refused by the hold-out, as with early_stopping=True
                return not too_few_classes_to_hold_out(y)
            return bool(np.bincount(y).max() >= 3)
        return True

    def _unseen_gain_unmeasurable(self, y):
        """Whether unseen classes are asked for and :func:`too_few_classes_to_hold_out`: then
        ``early_stopping="auto"`` keeps the start (``early_stopping=False`` still trains)."""
        return (self.solver == "adam" and self.early_stopping == "auto"
                and self.validation_split == "class_disjoint" and too_few_classes_to_hold_out(y))

    #: ``learning_rate="auto"``: this rate times the batches of an epoch (set by subclasses).
    _epoch_learning_rate = 0.05

    def _learning_rate(self, n_batches):
        """The Adam rate; ``"auto"``: ``_epoch_learning_rate / n_batches``, at most ``MAX_AUTO_LR``.

        The same progress per epoch whatever the data size: a small data set
        (AT&T, 2 batches an epoch) takes larger steps than USPS (50 batches).
        """
        if self.learning_rate != "auto":
            return float(self.learning_rate)
        return min(MAX_AUTO_LR, self._epoch_learning_rate / max(n_batches, 1))

    def _optimizer(self, objective, n_batches):
        return torch.optim.Adam(objective.parameters, lr=self._learning_rate(n_batches))

    def _user_callbacks(self, run="fit"):
        """The user's ``callbacks``, as one callback of the training loop (``run``: its name)."""
        return UserCallbacks(self, check_callbacks(self.callbacks), run)

    #: ``n_classes_per_batch="auto"`` and ``n_samples_per_class="auto"`` (set by subclasses).
    _auto_batch_plan = (16, 8)

    def _candidates(self, y):
        """The settings ``fit`` chooses among on the hold-out (default: the one setting)."""
        return [None]

    def _batch_plan(self, n_classes, candidate=None):
        """``(P, K)``: classes per batch (at most ``n_classes``) and samples per class."""
        auto_P, auto_K = self._auto_batch_plan_of(candidate)
        P = auto_P if self.n_classes_per_batch == "auto" else self.n_classes_per_batch
        K = auto_K if self.n_samples_per_class == "auto" else self.n_samples_per_class
        return min(P, n_classes), K

    def _auto_batch_plan_of(self, candidate):
        """The ``"auto"`` batch plan of a candidate setting (default: ``_auto_batch_plan``)."""
        return self._auto_batch_plan

    def _solve_minibatch(self, fresh_objective, candidates, X, y, n_classes, rng):
        """Adam over class-balanced batches (+ early stopping and refit).

        ``fresh_objective(candidate, rows)`` returns a new objective at the initial point,
        what of it reads labels read from ``rows`` (the hold-out's training rows). With
        early stopping, every candidate trains on the same hold-out from the same
        start; the one with the best held-out score that beats the start is
        refitted (stratified) or kept (class-disjoint), else the start itself.
        Returns ``(objective, candidate, fitted, converged)``.
        """
        stiefel, name = self.manifold == "stiefel", type(self).__name__
        y_tensor = torch.as_tensor(y, dtype=torch.int64)
        if self._unseen_gain_unmeasurable(y):  # keep the start: see _unseen_gain_unmeasurable
            return fresh_objective(candidates[0]), candidates[0], {
                "n_iter_": 0, "history_": [], "best_iteration_": 0}, True
        if not self._use_early_stopping(y):
            candidate = candidates[0]
            objective = fresh_objective(candidate)
            sampler = ClassBalancedBatchSampler(y, *self._batch_plan(n_classes, candidate), rng)
            stopper = EarlyStopping(monitor="loss", greater_is_better=False,
                                    n_iter_no_change=self.n_iter_no_change, tol=self.tol)
            result = train_epochs(_LinearTrainable(objective, X, y_tensor, stiefel),
                                  self._optimizer(objective, len(sampler)), lambda epoch: sampler,
                                  max_iter=self.max_iter,
                                  callbacks=[stopper, Progress(self.verbose, name),
                                             self._user_callbacks()])
            return objective, candidate, {"n_iter_": result.n_iter, "history_": result.history}, \
                result.stop_reason != "max_iter"
        # a) each candidate chooses its number of epochs on one hold-out; epoch 0 (the start)
        # is a candidate too
        refit_seed = rng.randint(np.iinfo(np.int32).max)  # drawn first: reproducible
        train, val, split = validation_holdout(y, self.validation_fraction,
                                               self.validation_split, rng)
        runs = [self._validation_run(fresh_objective(candidate, train), candidate, X, y, train,
                                     val, split, n_classes, rng) for candidate in candidates]
        run = choose_run(runs)
        objective, candidate, best = run["objective"], run["candidate"], run["best"]
        # class-disjoint: keep the validated model (the best epoch of its run), not a refit on
        # all the classes, whose epoch count did not carry over (AT&T faces, digits)
        keep_validated = split == "class_disjoint"
        refit_history = []
        if not keep_validated:  # (a run that kept its start has put it back already)
            with torch.no_grad():
                for p, p0 in zip(objective.parameters, run["start"]):
                    p.copy_(p0)
        if best > 0 and not keep_validated:
            # b) refit on all the data for that many epochs of as many steps, from the same
            # start (tiny classes, e.g. 7 faces a person, cannot spare their held-out samples)
            n_batches = run["n_batches"]  # the refit steps at the rate the epochs were counted at
            sampler = ClassBalancedBatchSampler(y, *self._batch_plan(n_classes, candidate),
                                                np.random.RandomState(refit_seed),
                                                n_batches=n_batches)
            refit = train_epochs(_LinearTrainable(objective, X, y_tensor, stiefel),
                                 self._optimizer(objective, n_batches), lambda epoch: sampler,
                                 max_iter=best,
                                 callbacks=[Progress(self.verbose, f"{name} (refit)")])
            refit_history = refit.history
        history = run["history"] + [dict(record, refit=True) for record in refit_history]
        # n_iter_: the epochs the returned model's run took (sklearn's meaning, >= 1 once
        # training ran); best_iteration_: the epoch of the returned model (0: the start)
        n_iter = best if refit_history else run["n_iter"]
        fitted = {"n_iter_": n_iter, "history_": history, "best_iteration_": best,
                  "best_validation_score_": run["best_score"], "validation_split_": split}
        if len(candidates) > 1:
            fitted["candidate_scores_"] = {r["candidate"]: r["best_score"] for r in runs}
        return objective, candidate, fitted, run["converged"]

    def _validation_run(self, objective, candidate, X, y, train, val, split, n_classes, rng):
        """Train ``objective`` on ``train``, scoring the start and every epoch on ``val``."""
        stiefel, name = self.manifold == "stiefel", type(self).__name__
        y_tensor = torch.as_tensor(y, dtype=torch.int64)
        X_train, X_val, y_train, y_val = X[train], X[val], y[train], y[val]
        per_query = []  # class-disjoint: the per-query scores of the start and each epoch
        saturated = False  # the start scored every held-out sample right: purity counts too
        if split == "class_disjoint":  # classes the training run never sees
            def score_fn():
                per_query.append(unseen_query_scores(objective.L.detach(), X_val, y_val))
                return float(per_query[-1].mean())  # the mean of Recall@1 and MAP@R
        else:  # the per-sample k-NN scores (their mean is the k-NN score)
            def score_fn():
                per_query.append(knn_sample_scores(objective.L.detach(), X_train, X_val,
                                                   y_train, y_val, purity=saturated))
                return float(per_query[-1].mean())
        start = [p.detach().clone() for p in objective.parameters]
        start_score = score_fn()
        if split != "class_disjoint" and start_score >= 1.0:
            # a small, easy hold-out that the start already classifies perfectly cannot show
            # a gain in accuracy (wine: the start was kept on 6 of 10 splits): each sample
            # scores its accuracy plus its neighbourhood's purity, which learning can raise
            saturated = True  # (read by score_fn from here on)
            per_query.clear()
            start_score = score_fn()
        P, K = self._batch_plan(n_classes, candidate)
        sampler = ClassBalancedBatchSampler(y_train, min(P, len(np.unique(y_train))), K, rng)
        patience = max(self.n_iter_no_change, -(-MIN_STEPS_NO_CHANGE // len(sampler)))
        stopper = EarlyStopping(n_iter_no_change=patience, tol=self.tol, restore_best=True)
        if candidate is not None and self.verbose:
            name = f"{name} ({candidate})"
        result = train_epochs(_LinearTrainable(objective, X_train, y_tensor[train], stiefel),
                              self._optimizer(objective, len(sampler)), lambda epoch: sampler,
                              max_iter=self.max_iter,
                              callbacks=[Validation(score_fn), stopper,
                                         Progress(self.verbose, name),
                                         self._user_callbacks(
                                             "on the hold-out" if candidate is None else
                                             f"candidate {candidate!r} on the hold-out")])
        best = stopper.best_epoch or result.n_iter
        if not improves(stopper.best_value, start_score, self.tol,
                        per_query[best] - per_query[0] if per_query else None):
            best = 0  # learning did not beat the start on the held-out set: keep the start
        if best == 0:
            with torch.no_grad():
                for p, p0 in zip(objective.parameters, start):
                    p.copy_(p0)
        # the tie-break between candidates of equal held-out accuracy (stratified)
        purity = knn_purity(objective.L.detach(), X_train, X_val, y_train, y_val) \
            if split == "stratified" else 0.0
        return {"objective": objective, "candidate": candidate, "start": start, "best": best,
                "purity": purity,
                "best_score": stopper.best_value if best > 0 else start_score,
                "history": result.history, "n_iter": result.n_iter,
                "n_batches": len(sampler), "stop_reason": result.stop_reason,
                # max_iter did not cut it short when the hold-out score was already flat over
                # the last n_iter_no_change epochs (the patience can be max_iter on tiny data)
                "converged": (result.stop_reason != "max_iter"
                              or stopper.no_change >= self.n_iter_no_change)}

    def _solve_batch(self, objective, X, y, sampler):
        """Riemannian conjugate gradient over a fixed set of batches; return ``(fitted, converged)``."""
        from pymanopt.manifolds import Euclidean, Product, Stiefel

        batches = [torch.as_tensor(idx, dtype=torch.int64) for idx in sampler]
        batches = [(X[idx], y[idx]) for idx in batches]
        params = objective.parameters
        k, r = params[0].shape
        factors = [Stiefel(r, k) if self.manifold == "stiefel" else Euclidean(r, k)]
        factors += [Euclidean(*p.shape) for p in params[1:]]
        manifold = Product(factors) if len(factors) > 1 else factors[0]
        cache = {"key": None}

        def evaluate(*arrays):
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
                value = objective(Xb, yb)[0] / len(batches)
                value.backward()
                total += float(value.detach())
            if not math.isfinite(total):
                raise NonFiniteLossError(
                    f"Non-finite objective ({total}) in the batch solver of "
                    f"{type(self).__name__}; the fit is discarded. Check the data and the loss.")
            grads = [params[0].grad.T] + [p.grad for p in params[1:]]
            grads = [g.detach().to(torch.float64).numpy().copy() for g in grads]
            cache.update(key=key, value=total, grads=grads)
            return total, grads

        def gradient(*arrays):
            grads = evaluate(*arrays)[1]
            return tuple(grads) if len(grads) > 1 else grads[0]

        start = [params[0].detach().to(torch.float64).numpy().T.copy()]
        start += [p.detach().to(torch.float64).numpy().copy() for p in params[1:]]
        run = run_manopt(manifold, lambda *a: evaluate(*a)[0], gradient,
                         start if len(start) > 1 else start[0], max_iter=self.max_iter,
                         tol=self.tol, min_step_size=1e-12, verbose=self.verbose,
                         desc=type(self).__name__)
        evaluate(*(run.point if len(factors) > 1 else [run.point]))  # parameters at the optimum
        return {"n_iter_": run.n_iter, "history_": run.history}, run.converged

    # ---------------------------------------------------------------- hooks
    def _make_objective(self, n_classes, n_components, dim,
                        candidate=None):  # pragma: no cover - abstract
        raise NotImplementedError

    def _store_candidate(self, candidate):
        """Store the setting the fit chose (default: nothing to store)."""

    def _store_extras(self, objective, space):
        """Store extra fitted attributes (default: none)."""

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.required = True
        tags.input_tags.allow_nan = False
        return tags
