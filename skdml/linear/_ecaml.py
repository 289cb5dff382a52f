"""ECAML: a linear metric learned with a metric loss + Energy Confusion (Chen & Deng, AAAI 2019)."""

from __future__ import annotations

from sklearn.utils._param_validation import StrOptions

from .._utils._params import NestedParamsMixin, non_negative_real
from ..losses import LOSSES, MetricObjective, build_loss, get_regularizer
from ._validation import fill_validation_params_doc
from ._supervised import (
    LinearMetricLearner,
    LinearObjective,
)

__all__ = ["ECAML"]

#: The paper's lambda per loss (ECAML Tables 4-5, CUB and CARS).
PAPER_EC_WEIGHTS = {"triplet": 0.02, "npair": 0.3, "binomial": 0.13}
#: ``regularizer_weight="auto"`` for a callable loss.
DEFAULT_EC_WEIGHT = 0.1
#: The pair and triplet losses of ECAML (AM-Softmax is JRD's).
ECAML_LOSSES = sorted(set(LOSSES) - {"amsoftmax"})
#: ``loss="auto"``: the loss for each task (``validation_split``). LMNN asks for what k-NN
#: rewards, each sample's nearest neighbours in its own class; the binomial deviance on
#: cosines was the retrieval default (see the linear study).
AUTO_LOSS = {"stratified": "lmnn", "class_disjoint": "binomial"}
#: ``loss="auto"`` chosen on the hold-out (k-NN with early stopping; unseen classes from
#: ``MIN_HELD_OUT_CLASSES_TO_CHOOSE`` held-out classes): ``fit`` trains each of these on the
#: same hold-out from the same start, the task's own loss (``AUTO_LOSS``) first, and keeps
#: the one with the best held-out score (for k-NN, LMNN won on AT&T, COIL-20 and USPS, the
#: binomial loss on scikit-learn's digits at k=1).
AUTO_LOSS_CANDIDATES = ("lmnn", "binomial")
#: ``n_classes_per_batch="auto"`` and ``n_samples_per_class="auto"`` per resolved loss: LMNN
#: chooses its target neighbours among the positives of a batch, so it takes up to 32 of a
#: class (K never exceeds the largest class), closer to a sample's true nearest neighbours.
AUTO_BATCH_PLANS = {"lmnn": (8, 32)}
DEFAULT_BATCH_PLAN = (16, 8)


class _ECAMLObjective(LinearObjective):
    def __init__(self, n_components, dim, objective):
        super().__init__(n_components, dim)
        self.objective = objective


@fill_validation_params_doc
class ECAML(NestedParamsMixin, LinearMetricLearner):
    r"""Energy Confused Adversarial Metric Learning, linear version.

    Learns a linear map ``L`` (``components_``) by minimising (ECAML Eq. 7/11)

    .. math::

        \ell(X L^\top, y) + \lambda \operatorname{mean}_{I \neq J} \log\bigl(1 + \mathbb{E}\,
        \|z_I - z_J\|^2\bigr)

    over class-balanced batches, where :math:`\ell` is a metric loss (triplet
    Eq. 8, N-pair Eq. 9, binomial deviance Eq. 10, or any callable) and the
    Energy Confusion (EC) term pulls the classes of the batch *together*,
    against over-fitting the seen classes (the paper's regularisation for
    zero-shot retrieval). ``L`` lies on the Stiefel manifold (orthonormal rows)
    or in Euclidean space.

    **Two tasks, one switch.** By default the metric is fitted for k-NN
    classification of the classes it is trained on (a ``Pipeline`` with
    :class:`~sklearn.neighbors.KNeighborsClassifier`): LMNN loss, early
    stopping on held-out samples of every class, and the PCA start kept
    unless learning beats it there. For retrieval or clustering of classes
    never seen in training, pass ``validation_split="class_disjoint"``:
    the binomial loss (or, from 10 held-out classes, the better of it and
    LMNN on them), early stopping on held-out *classes*, and the start kept
    unless learning beats it significantly on them.

    Read more in the :doc:`User Guide </linear>`.

    Parameters
    ----------
    n_components : int, default=None
        Embedding dimension. ``None`` means ``min(n_features, n_samples,
        128)``, and at most an int ``n_reduce`` (or the number of rows of an
        ``init`` array): a step costs
        O(n_features x n_components), and 128 is the deep learner's default.
    loss : "auto", str or callable, default="auto"
        The metric loss: ``"lmnn"``, ``"binomial"``, ``"triplet"``, ``"npair"``
        or ``"multisimilarity"``, resolved by :func:`skdml.losses.get_loss`, or
        any callable ``loss(embeddings, labels) -> scalar tensor`` (e.g. a
        pytorch-metric-learning loss). ``"auto"`` follows the task
        (``validation_split``). For k-NN on the training classes it chooses,
        on the held-out samples, between ``"lmnn"``
        (:class:`~skdml.losses.LMNNLoss`, which asks for what k-NN rewards:
        each sample's nearest neighbours in its own class) and ``"binomial"``:
        both train from the same start on the same hold-out, the better one
        is refitted (``loss_``, ``candidate_scores_``), like
        :class:`~sklearn.linear_model.LogisticRegressionCV` choosing ``C``;
        without early stopping it is ``"lmnn"``. For unseen classes
        (``validation_split="class_disjoint"``) it is ``"binomial"`` (the
        paper's binomial deviance on cosines), unless the hold-out has at
        least 10 classes (50 training classes or more): then the same two
        train on the held-out classes and the better Recall@1 and MAP@R among
        them wins, if it beats the start significantly (on Omniglot's unseen
        characters LMNN won, by 10 points of Recall@1 on the test
        characters; fewer held-out classes chose badly). ``"triplet"`` and
        ``"binomial"`` (the paper's losses) work on unit-normalised
        embeddings, ``"npair"`` on raw dot products, ``"lmnn"`` on squared
        Euclidean distances. Parameters a callable owns (e.g. proxies) are
        not trained.
    loss_params : dict, default=None
        Keyword arguments for the named loss (e.g. ``{"margin": 0.2}``);
        ``loss="auto"`` takes none (name the loss to pass its parameters).
        One key at a time, checked against the loss: ``set_params(loss__margin=0.2)``.
    regularizer_weight : float or "auto", default="auto"
        The weight :math:`\lambda` of the EC term; 0 gives the plain metric
        loss (the papers' ablation). ``"auto"`` takes the paper's values
        (0.02 triplet, 0.3 N-pair, 0.13 binomial; 0.1 for the losses the paper
        does not use, LMNN included, and for a callable). EC is
        averaged (not summed) over the ordered class pairs of a batch and the
        losses over their tuples, so the weight does not depend on the batch
        size; the paper's sums weight EC differently, so tune it
        (``benchmarks/bench_linear.py`` plots the accuracy against it). The
        same weight means the same in :class:`~skdml.DeepMetricTransformer`
        with ``regularizer="ec"`` (both use :class:`skdml.losses.MetricObjective`).
    ec_log : bool, default=True
        Use :math:`\log(1 + EC)` (Eq. 11) instead of EC (Eq. 3); also
        ``set_params(regularizer__log=...)``, as in the deep learner.
    init : {"pca", "lda", "identity", "random"} or ndarray, default="pca"
        Initial ``L``. ``"pca"``: leading principal axes; ``"lda"``: the
        discriminant directions completed by principal axes; ``"identity"``:
        the first ``n_components`` axes of the space it trains in (the input
        axes, or with ``n_reduce`` the leading principal axes, where it is the
        same start as ``"pca"``); ``"random"``: a random
        (orthonormalised on the Stiefel manifold) matrix; or an array of shape
        (n_components, n_features), projected on the manifold.
    manifold : {"euclidean", "stiefel"}, default="euclidean"
        Where ``L`` lives. ``"stiefel"`` (orthonormal rows) fixes the scale
        and only rotates/selects directions; ``"euclidean"`` can also weight
        them, which gave better k-NN accuracy on AT&T and USPS and equal on
        COIL-20 (:doc:`linear learners report </reports/linear>`), hence the
        default. EC is taken on the normalised embedding for the normalised
        losses, so it cannot shrink ``L`` to 0 there. With ``"stiefel"``, set
        ``n_components`` below ``n_features``: a square orthogonal ``L`` keeps
        every distance and learns nothing (the fit warns).
    solver : {"adam", "conjugate_gradient"}, default="adam"
        ``"adam"``: Adam on fresh class-balanced ``P x K`` batches each
        epoch, with a QR retraction onto the manifold. ``"conjugate_gradient"``: pymanopt's
        Riemannian conjugate gradient on the mean objective over a fixed set
        of class-balanced batches drawn once. The default was chosen from
        measurements (``benchmarks/bench_linear.py``, :doc:`linear learners report </reports/linear>`).
    max_iter : int, default=300
        Epochs (Adam) or conjugate-gradient iterations. With
        early stopping, the most epochs of the validation run. ``0`` returns
        the initialisation (to measure what learning adds).
    tol : float, default=1e-4
        Minibatch: stop when the epoch objective (or, with early stopping, the
        validation score) has not improved by more than ``tol`` for
        ``n_iter_no_change`` epochs. Batch: stop when the Riemannian gradient
        norm falls below ``tol``.
    learning_rate : float or "auto", default="auto"
        Adam's learning rate (Adam solver only). ``"auto"``:
        ``0.05 / n_batches`` (``n_batches`` batches an epoch), at most 0.01,
        so that an epoch moves ``L`` as far on a small data set as on a large
        one: 1e-3 on USPS (50 batches an epoch, where larger rates over-fit
        within the first epoch), 0.01 on AT&T (2 batches an epoch, where
        1e-3 had not converged after 300 epochs). See the
        :doc:`linear study </reports/linear_study>`.
    n_classes_per_batch : int or "auto", default="auto"
        ``P``, classes per batch (capped at the number of classes).
        ``"auto"``: 8 with the LMNN loss, 16 otherwise.
    n_samples_per_class : int or "auto", default="auto"
        ``K``, samples per class and batch (drawn with replacement from
        smaller classes; never more than the largest class holds).
        ``"auto"``: 32 with the LMNN loss, which picks each sample's target
        neighbours among the positives of its batch (more of them come
        closer to its true nearest neighbours), 8 otherwise.
    n_reduce : int, "auto" or None, default=None
        PCA reduction of the input before optimising
        (a PCA fitted in ``fit``), folded into ``components_``: an int
        reduces to that many dimensions; ``"auto"`` reduces (losslessly) to
        ``n_samples`` dimensions when ``n_features > n_samples``; ``None``
        never reduces. The solvers cost O(batch x n_features x n_components)
        per step, so high-dimensional input (e.g. 4096 pixels) needs no
        reduction; measured on AT&T, the randomised PCA of ``"auto"`` cost
        more than the whole optimisation.
    {validation_params}
    n_iter_no_change : int, default=10
        Epochs without an improvement larger than ``tol`` before stopping
        (with early stopping: at least enough epochs for 300 steps).
    verbose : int, default=0
        ``1`` shows a progress bar with an ETA and the per-epoch table
        (pymanopt's table too for the batch solver at ``2``).
    random_state : int, RandomState instance or None, default=None
        Seeds the initialisation, the batches and torch.
    callbacks : list of skdml.callbacks.Callback, default=None
        Called at the start, after every step, after every epoch and at the end
        of the Adam solver's training run (with early stopping, each run that
        chooses the model: one per candidate loss with ``loss="auto"``); a
        callback can log or stop training
        (``info.stop()``). See :mod:`skdml.callbacks`. Not used by
        ``solver="conjugate_gradient"``.

    Attributes
    ----------
    components_ : ndarray of shape (n_components, n_features)
        The learned linear map ``L``; ``transform(X) = X @ components_.T``.
    classes_ : ndarray of shape (n_classes,)
        The training classes.
    loss_ : str or callable
        The loss the returned model was trained with (``loss="auto"``
        resolved or chosen).
    candidate_scores_ : dict
        With ``loss="auto"`` and early stopping: the best held-out score of
        each candidate loss (``"lmnn"``, ``"binomial"``), each trained on the
        same hold-out from the same start; the best one that beats the start
        is refitted on all the data (stratified) or kept (class-disjoint).
    n_iter_ : int
        Epochs or iterations run (with early stopping: the validation run's
        epochs, or the refit's after stratified validation; the returned
        model's epoch is ``best_iteration_``, 0 when the start was kept).
    history_ : list of dict
        Minibatch: one record per epoch, ``{"epoch", "loss", "metric_loss",
        "regularizer", "seconds"}`` (means over the epoch's batches), plus
        ``"validation_score"`` (the held-out score, see ``validation_split``)
        in the validation run and ``"refit": True`` in the refit. Batch: one record
        per iteration, ``{"iteration", "loss", "gradient_norm"}``, after a record
        of the start (iteration 0): ``n_iter_ + 1`` records (none for ``max_iter=0``).
    best_validation_score_ : float
        The best held-out score (only when early stopping is used; above 1
        where the start classified a stratified hold-out perfectly, see
        ``early_stopping``).
    best_iteration_ : int
        The epoch count of the best validation score (0: the start was kept,
        also where ``early_stopping="auto"`` kept it because unseen classes
        were asked for and 2 or 3 classes allow no class-disjoint hold-out:
        see ``early_stopping``).
    validation_split_ : {"class_disjoint", "stratified"}
        How the validation set was drawn (only when early stopping is used).
    standardize_ : bool
        Whether the learner worked on standardised features (``standardize``
        resolved); the division is folded into ``components_``.
    n_features_in_ : int
        Number of features seen during fit.
    feature_names_in_ : ndarray of shape (`n_features_in_`,)
        Names of features seen during fit (only when ``X`` has string column names).

    See Also
    --------
    JRD : the AM-Softmax + joint representation diversification learner.
    sklearn.neighbors.NeighborhoodComponentsAnalysis : supervised linear metric learning.

    Notes
    -----
    The objective sees the training data centred and scaled to unit root
    mean squared norm (a translation and a positive scalar, which leave the
    neighbours unchanged), so the raw dot products of the N-pair loss live on
    a fixed scale with a Stiefel ``L``. EC is taken on the same representation
    the loss uses: unit-normalised embeddings for ``"triplet"`` and
    ``"binomial"``, raw embeddings for ``"npair"`` and callables.

    References
    ----------
    B. Chen and W. Deng. Energy Confused Adversarial Metric Learning for
    Zero-Shot Image Retrieval and Clustering. AAAI 2019.

    Examples
    --------
    Only two of these 20 features carry the class; the other 18 are louder
    noise, which PCA (the start, ``max_iter=0``) keeps and the learned metric
    discards (4 components: with 2, a start of pure noise, 2 or 3 seeds in 10
    stop on the hold-out before learning starts):

    >>> import numpy as np
    >>> from sklearn.neighbors import KNeighborsClassifier
    >>> from sklearn.pipeline import make_pipeline
    >>> from skdml import ECAML
    >>> rng = np.random.RandomState(0)
    >>> y = rng.randint(0, 4, 300)
    >>> signal = 3.0 * np.array([[0, 0], [0, 1], [1, 0], [1, 1]])[y] + 0.5 * rng.randn(300, 2)
    >>> X = np.hstack([signal, 4.0 * rng.randn(300, 18)])
    >>> def fit(metric):  # a 3-NN pipeline on the first 200 samples
    ...     return make_pipeline(metric, KNeighborsClassifier(3)).fit(X[:200], y[:200])
    >>> start = fit(ECAML(n_components=4, max_iter=0, random_state=0)).score(X[200:], y[200:])
    >>> pipe = fit(ECAML(n_components=4, random_state=0))
    >>> bool(pipe.score(X[200:], y[200:]) > start + 0.3)
    True
    >>> pipe[0].transform(X).shape, pipe[0].n_iter_ > 0
    ((300, 4), True)
    """

    #: ``set_params(loss__margin=...)``, ``regularizer__log``: the deep learner's nested names
    _nested_params = {"loss": "loss_params", "loss_params": "loss_params",
                      "regularizer": {"log": "ec_log"}}

    #: What learns in one dimension (the 1-d warning of ``fit``).
    _raw_distance_advice = "a loss on raw distances (loss=\"lmnn\")"

    _parameter_constraints: dict = {
        **LinearMetricLearner._parameter_constraints,
        "loss": [StrOptions({"auto", *ECAML_LOSSES}), callable],
        "loss_params": [dict, None],
        "regularizer_weight": [non_negative_real(), StrOptions({"auto"})],
        "ec_log": ["boolean"],
    }

    def __init__(self, n_components=None, *, loss="auto", loss_params=None,
                 regularizer_weight="auto", ec_log=True, init="pca", manifold="euclidean",
                 solver="adam", max_iter=300, tol=1e-4, learning_rate="auto",
                 n_classes_per_batch="auto", n_samples_per_class="auto", n_reduce=None,
                 standardize="auto", early_stopping="auto", validation_fraction=None,
                 validation_split="stratified", n_iter_no_change=10, verbose=0,
                 random_state=None, callbacks=None):
        self.n_components = n_components
        self.loss = loss
        self.loss_params = loss_params
        self.regularizer_weight = regularizer_weight
        self.ec_log = ec_log
        self.init = init
        self.manifold = manifold
        self.solver = solver
        self.max_iter = max_iter
        self.tol = tol
        self.learning_rate = learning_rate
        self.n_classes_per_batch = n_classes_per_batch
        self.n_samples_per_class = n_samples_per_class
        self.n_reduce = n_reduce
        self.standardize = standardize
        self.early_stopping = early_stopping
        self.validation_fraction = validation_fraction
        self.validation_split = validation_split
        self.n_iter_no_change = n_iter_no_change
        self.verbose = verbose
        self.random_state = random_state
        self.callbacks = callbacks

    def _resolved_loss(self):
        """The loss name (or callable) when no choice is made on a hold-out."""
        if isinstance(self.loss, str) and self.loss == "auto":
            return AUTO_LOSS[self.validation_split]
        return self.loss

    def _candidates(self, y):
        """``loss="auto"`` with early stopping: the losses to choose among on the hold-out."""
        if isinstance(self.loss, str) and self.loss == "auto" and self._chooses_on_hold_out(y):
            own = AUTO_LOSS[self.validation_split]  # first: it holds the start on ties
            return [own] + [loss for loss in AUTO_LOSS_CANDIDATES if loss != own]
        return [self._resolved_loss()]

    def _auto_batch_plan_of(self, candidate):
        loss = self._resolved_loss() if candidate is None else candidate
        return AUTO_BATCH_PLANS.get(loss, DEFAULT_BATCH_PLAN) if isinstance(loss, str) \
            else DEFAULT_BATCH_PLAN

    def _store_candidate(self, candidate):
        self.loss_ = self._resolved_loss() if candidate is None else candidate

    def _resolved_ec_weight(self, loss=None):
        """The EC weight of ``loss`` (``None``: the resolved loss); "auto": the paper's."""
        if self.regularizer_weight != "auto":
            return float(self.regularizer_weight)
        loss = self._resolved_loss() if loss is None else loss
        return PAPER_EC_WEIGHTS.get(loss, DEFAULT_EC_WEIGHT) if isinstance(
            loss, str) else DEFAULT_EC_WEIGHT

    def _make_objective(self, n_classes, n_components, dim, candidate=None):
        return _ECAMLObjective(n_components, dim, self._build_objective(candidate))

    def _build_objective(self, candidate=None):
        """The :class:`~skdml.losses.MetricObjective`: the loss plus weighted EC."""
        if self.loss_params and isinstance(self.loss, str) and self.loss == "auto":
            raise ValueError(
                "loss_params needs a named loss: loss='auto' chooses the loss on held-out "
                "data (for k-NN: 'lmnn' or 'binomial'). Name it (e.g. loss='lmnn') to pass "
                "its parameters.")
        loss = self._resolved_loss() if candidate is None else candidate
        return MetricObjective(build_loss(loss, self.loss_params),
                               get_regularizer("ec", log=self.ec_log),
                               self._resolved_ec_weight(loss))
