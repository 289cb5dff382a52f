"""JRD: a linear metric learned with AM-Softmax + Joint Representation Diversification."""

from __future__ import annotations

from numbers import Real

import torch
import torch.nn.functional as F
from sklearn.utils._param_validation import StrOptions

from .._utils._params import NestedParamsMixin, StrictInterval, non_negative_real
from ..losses import LMNNLoss, MetricObjective, build_loss, get_regularizer
from ._validation import fill_validation_params_doc
from ._supervised import (
    DTYPE,
    LinearMetricLearner,
    LinearObjective,
)

__all__ = ["JRD"]

#: ``neighbor_weight="auto"`` with early stopping: ``fit`` trains the paper's objective
#: (weight 0) and the one with the neighbour term (weight 1, the two parts weighted equally)
#: on the same hold-out from the same start and keeps the one with the best held-out score:
#: k-NN accuracy for k-NN (``benchmarks/studies/bench_jrd_closed_set.py``), retrieval among
#: the held-out classes for unseen classes (``bench_omniglot.py --linear-only``).
AUTO_NEIGHBOR_CANDIDATES = (0.0, 1.0)
#: ``neighbor_weight="auto"`` without a choice on a hold-out, per task (``validation_split``).
AUTO_NEIGHBOR_WEIGHT = {"stratified": 1.0, "class_disjoint": 0.0}
#: ``n_classes_per_batch="auto"`` and ``n_samples_per_class="auto"``: with the neighbour term,
#: ECAML's LMNN plan (target neighbours are chosen among the positives of a batch); without, 16 x 8.
NEIGHBOR_BATCH_PLAN = (8, 32)
DEFAULT_BATCH_PLAN = (16, 8)


class _JRDObjective(LinearObjective):
    def __init__(self, n_components, dim, objective, neighbor_weight=0.0):
        super().__init__(n_components, dim)
        self.objective = objective
        self.am = objective.loss
        self.bias = torch.zeros(n_components, dtype=DTYPE, requires_grad=True)
        self.neighbor_weight = float(neighbor_weight)
        self.neighbor_loss = LMNNLoss() if self.neighbor_weight > 0 else None

    @property
    def parameters(self):
        return [self.L, self.bias, self.am.proxies]

    def init_extras(self, X, y):
        # proxies start at the normalised class means of the initial embedding; a class with
        # no sample here (held out of a class-disjoint validation run) at a random direction,
        # which tells the run nothing of the held-out samples
        with torch.no_grad():
            E = self.embed(X)
            one_hot = F.one_hot(y, self.am.n_classes).to(E.dtype)
            counts = one_hot.sum(dim=0)
            means = (one_hot.T @ E) / counts.clamp(min=1)[:, None]
            absent = counts == 0
            if absent.any():
                means[absent] = torch.randn(int(absent.sum()), E.shape[1], dtype=E.dtype)
            self.am.proxies.copy_(F.normalize(means, dim=1))

    def embed(self, X):
        return F.normalize(X @ self.L.T + self.bias, dim=1)

    @property
    def reads_directions_only(self):
        return self.neighbor_loss is None  # the neighbour term reads transform's raw map

    def __call__(self, X, y):
        # JRS over (input, embedding, class level), AM-Softmax on the embedding
        total, terms = self.objective(self.embed(X), y, layers=[X])
        if self.neighbor_loss is not None:
            # LMNN on the linear map that transform returns, the geometry k-NN searches
            neighbor = self.neighbor_loss(X @ self.L.T, y)
            terms["neighbor_loss"] = neighbor
            total = total + self.neighbor_weight * neighbor
        return total, terms


@fill_validation_params_doc
class JRD(NestedParamsMixin, LinearMetricLearner):
    r"""Distance metric learning with Joint Representation Diversification, linear version.

    The embedding is :math:`\hat x = (W^\top x + b) / \|W^\top x + b\|` and the
    class level the cosines :math:`x^+ = (\hat w_c^\top \hat x)_c` to the
    normalised, learned class proxies. The objective (JRD Eq. 11) is

    .. math::

        L_{AMS}(\hat x, y) + \lambda\, \frac{1}{N_{pairs}} \sum_{y_i \neq y_j}
        k_{in}(x_i, x_j)\, k_{emb}(\hat x_i, \hat x_j)\, k_{cls}(x^+_i, x^+_j)

    over class-balanced batches: the additive-margin softmax (scale ``s``,
    margin ``m``) plus ``regularizer_weight`` times the joint representation similarity
    (JRS) of pairs of different classes over the (input, embedding,
    class-level) representations, with self-adaptive Gaussian-mixture
    kernels (:class:`skdml.losses.JRSRegularizer`). Penalising the joint
    similarity keeps the representations of different classes *diverse*
    without forcing them apart in every layer.

    ``components_`` is :math:`W^\top` and :meth:`transform` returns the linear
    map ``X @ components_.T``, as for every Mahalanobis learner. The bias and
    the normalisation of the trained embedding are in ``bias_``; the trained
    embedding is ``normalize(transform(X) + bias_)``.

    **k-NN on the training classes (the default task).** The objective above
    shapes the *cosine* geometry of ``normalize(XW + b)`` around one proxy a
    class, while a :class:`~sklearn.neighbors.KNeighborsClassifier` after
    :meth:`transform` searches the *Euclidean* geometry of ``XW``. This
    library's interpretation for that task (``validation_split="stratified"``)
    adds ``neighbor_weight`` times the LMNN loss
    (:class:`~skdml.losses.LMNNLoss`) on ``XW`` itself, which asks for what
    k-NN rewards there, and by default chooses on held-out training samples
    between the paper's objective and this one, the way
    :class:`~sklearn.linear_model.LogisticRegressionCV` chooses ``C``
    (``neighbor_weight_``, ``candidate_scores_``). For classes never seen in
    training (``validation_split="class_disjoint"``) the objective is the
    paper's, or, from 10 held-out classes, the better of the two on them.

    Read more in the :doc:`User Guide </linear>`.

    Parameters
    ----------
    n_components : int, default=None
        Embedding dimension. ``None`` means ``min(n_features, n_samples,
        128)``, and at most an int ``n_reduce`` (or the number of rows of an
        ``init`` array): a step costs
        O(n_features x n_components), and 128 is the deep learner's default.
    regularizer_weight : float, default=1.0
        Weight of the JRS regulariser (the paper's alpha = 1 on CUB and
        CARS); 0 gives plain AM-Softmax (the papers' ablation). The same weight
        means the same in :class:`~skdml.DeepMetricTransformer` with
        ``regularizer="jrs"``.
    neighbor_weight : float or "auto", default="auto"
        Weight of the neighbour term, the LMNN loss (3 target neighbours,
        margin 1, push weight 0.5) on the linear map ``XW`` that
        :meth:`transform` returns; 0 gives the paper's objective. ``"auto"``
        follows the task (``validation_split``). For k-NN on the training
        classes with early stopping, both 0 and 1 train from the same start on
        the same hold-out and the one with the better held-out k-NN score is
        refitted (0 on equal scores and purities, and when neither beats the
        start); measured on held-out training samples of AT&T, COIL-20 and
        USPS, the term raised the 10-NN accuracy most (see
        ``benchmarks/studies/bench_jrd_closed_set.py``), while on scikit-learn's
        wine, whose features LMNN weighs poorly, the paper's objective was
        better; without early stopping it is 1. For unseen classes
        (``validation_split="class_disjoint"``) it is 0, unless the hold-out
        has at least 10 classes (50 training classes or more): then 0 and 1
        train on the held-out classes and the better retrieval among them
        wins, if it beats the start significantly (on Omniglot's unseen
        characters the term won, by 7 points of Recall@1 on the test
        characters).
    margin : float, default=0.1
        AM-Softmax additive margin ``m`` in [0, 1) (on cosines, a margin of 1
        or more can never be met; the deep learner's ``AMSoftmaxLoss`` allows
        it); also set by ``set_params(loss__margin=...)``, as in the deep learner.
    scale : float, default=20.0
        AM-Softmax scale ``s`` (fixed to 20 in the paper); also
        ``loss__scale``.
    init : {"pca", "lda", "identity", "random"} or ndarray, default="pca"
        Initial ``W^T``, as for :class:`~skdml.ECAML`. The proxies start at the
        normalised class means of the initial embedding, the bias at 0.
    manifold : {"euclidean", "stiefel"}, default="euclidean"
        Where ``W^T`` lives; the proxies and the bias are always Euclidean.
        Euclidean was as good or better in ``benchmarks/bench_linear.py``.
    solver : {"adam", "conjugate_gradient"}, default="adam"
        ``"adam"``: Adam on fresh class-balanced ``P x K`` batches each
        epoch with a QR retraction; ``"conjugate_gradient"``: pymanopt's Riemannian
        conjugate gradient over a fixed set of class-balanced batches drawn
        once; its line search needs the cost's own gradient, so there the
        JRS bandwidths :math:`\tau_l` are differentiated too (Adam holds
        them constant, as the paper does). Proxies and bias are learned by
        both.
    max_iter : int, default=300
        Epochs (Adam) or conjugate-gradient iterations. With
        early stopping, the most epochs of the validation run. ``0`` returns
        the initialisation.
    tol : float, default=1e-4
        Minibatch: stop when the epoch objective (or, with early stopping, the
        validation score) has not improved by more than ``tol`` for
        ``n_iter_no_change`` epochs. Batch: stop when the Riemannian gradient
        norm falls below ``tol``.
    learning_rate : float or "auto", default="auto"
        Adam's learning rate (Adam solver only). ``"auto"``:
        ``0.015 / n_batches`` (``n_batches`` batches an epoch), at most 0.01,
        so that an epoch moves ``L`` as far on a small data set as on a large
        one: 3e-4 on USPS (50 batches an epoch, where larger rates over-fit
        within the first epoch), 0.0075 on AT&T (2 batches an epoch, where
        3e-4 had not converged after 300 epochs). See the
        :doc:`linear study </reports/linear_study>`.
    n_classes_per_batch : int or "auto", default="auto"
        ``P``, classes per batch (capped at the number of classes);
        ``"auto"``: 8 with the neighbour term, 16 without.
    n_samples_per_class : int or "auto", default="auto"
        ``K``, samples per class and batch (drawn with replacement from
        smaller classes; never more than the largest class holds);
        ``"auto"``: 32 with the neighbour term, which picks each sample's
        target neighbours among the positives of its batch (as
        :class:`~skdml.ECAML` with the LMNN loss), 8 without.
    n_reduce : int, "auto" or None, default=None
        PCA reduction of the input, folded into ``components_``, as for
        :class:`~skdml.ECAML` (int: that many dimensions; ``"auto"``: lossless
        reduction to ``n_samples`` dimensions when ``n_features > n_samples``;
        ``None``: none). The JRS input layer is this (reduced,) centred and
        scaled input.
    {validation_params}
    n_iter_no_change : int, default=10
        Epochs without an improvement larger than ``tol`` before stopping
        (with early stopping: at least enough epochs for 300 steps).
    verbose : int, default=0
        ``1`` shows a progress bar with an ETA and the per-epoch table.
    random_state : int, RandomState instance or None, default=None
        Seeds the initialisation, the batches and torch.
    callbacks : list of skdml.callbacks.Callback, default=None
        Called at the start, after every step, after every epoch and at the end
        of each of the Adam solver's training runs (with a hold-out, one per
        candidate ``neighbor_weight``, named by ``info.run``); a callback can log or stop training
        (``info.stop()``). See :mod:`skdml.callbacks`. Not used by
        ``solver="conjugate_gradient"``.

    Attributes
    ----------
    components_ : ndarray of shape (n_components, n_features)
        The learned linear map :math:`W^\top`.
    bias_ : ndarray of shape (n_components,)
        The bias ``b`` in input coordinates: the trained embedding is
        ``normalize(X @ components_.T + bias_)``.
    proxies_ : ndarray of shape (n_classes, n_components)
        The normalised class proxies.
    classes_ : ndarray of shape (n_classes,)
        The training classes, in the order of ``proxies_``.
    neighbor_weight_ : float
        The weight of the neighbour term the returned model was trained with
        (``neighbor_weight="auto"`` resolved or chosen).
    candidate_scores_ : dict
        With ``neighbor_weight="auto"`` and early stopping: the best held-out
        score of each candidate weight (``0.0``, ``1.0``), each trained on the
        same hold-out of the training data from the same start; the best one
        that beats the start is refitted on all the data (stratified) or kept
        (class-disjoint).
    n_iter_ : int
        Epochs or iterations run (with early stopping: the validation run's
        epochs, or the refit's after stratified validation; the returned
        model's epoch is ``best_iteration_``, 0 when the start was kept).
    history_ : list of dict
        Per epoch (Adam) or iteration (conjugate gradient), as for :class:`~skdml.ECAML`,
        plus ``"neighbor_loss"`` (the neighbour term) when ``neighbor_weight_ > 0``.
    best_validation_score_ : float
        The best held-out score (see ``validation_split``; only with early
        stopping; above 1 where the start classified a stratified hold-out
        perfectly, see ``early_stopping``).
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
    ECAML : metric loss + Energy Confusion.

    References
    ----------
    X. Chu, Y. Lin, Y. Wang, X. Wang, H. Yu, X. Gao and Q. Tong. Distance
    Metric Learning with Joint Representation Diversification. ICML 2020.

    Examples
    --------
    Only two of these 20 features carry the class; the other 18 are louder
    noise, which PCA (the start, ``max_iter=0``) keeps and the learned metric
    discards:

    >>> import numpy as np
    >>> from sklearn.neighbors import KNeighborsClassifier
    >>> from sklearn.pipeline import make_pipeline
    >>> from skdml import JRD
    >>> rng = np.random.RandomState(0)
    >>> y = rng.randint(0, 4, 300)
    >>> signal = 3.0 * np.array([[0, 0], [0, 1], [1, 0], [1, 1]])[y] + 0.5 * rng.randn(300, 2)
    >>> X = np.hstack([signal, 4.0 * rng.randn(300, 18)])
    >>> def accuracy(metric):  # 3-NN accuracy on held-out samples
    ...     pipe = make_pipeline(metric, KNeighborsClassifier(3)).fit(X[:200], y[:200])
    ...     return pipe.score(X[200:], y[200:])
    >>> start = accuracy(JRD(max_iter=0, random_state=0))
    >>> learned = accuracy(JRD(random_state=0))
    >>> bool(learned > start + 0.3)
    True
    >>> est = JRD(n_components=2, random_state=0).fit(X, y)
    >>> est.transform(X).shape, len(est.history_) > 0
    ((300, 2), True)
    """

    _epoch_learning_rate = 0.015  # "auto": 3e-4 at USPS's 50 batches an epoch

    #: ``set_params(loss__margin=...)``: the AM-Softmax options are the margin and scale parameters
    _nested_params = {"loss": {"margin": "margin", "scale": "scale"}}

    #: What learns in one dimension (the 1-d warning of ``fit``).
    _raw_distance_advice = "the neighbour term on the raw map (neighbor_weight > 0)"

    _parameter_constraints: dict = {
        **LinearMetricLearner._parameter_constraints,
        "regularizer_weight": [non_negative_real()],
        "neighbor_weight": [non_negative_real(), StrOptions({"auto"})],
        "margin": [StrictInterval(Real, 0, 1, closed="left")],
        "scale": [StrictInterval(Real, 0, None, closed="neither")],
    }

    def __init__(self, n_components=None, *, regularizer_weight=1.0, neighbor_weight="auto",
                 margin=0.1, scale=20.0, init="pca",
                 manifold="euclidean", solver="adam", max_iter=300, tol=1e-4,
                 learning_rate="auto", n_classes_per_batch="auto", n_samples_per_class="auto",
                 n_reduce=None, standardize="auto", early_stopping="auto",
                 validation_fraction=None,
                 validation_split="stratified", n_iter_no_change=10, verbose=0,
                 random_state=None, callbacks=None):
        self.n_components = n_components
        self.regularizer_weight = regularizer_weight
        self.neighbor_weight = neighbor_weight
        self.margin = margin
        self.scale = scale
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

    def _resolved_neighbor_weight(self, candidate=None):
        """The neighbour weight of ``candidate`` (``None``: without a choice on a hold-out)."""
        if candidate is not None:
            return float(candidate)
        if self.neighbor_weight == "auto":
            return AUTO_NEIGHBOR_WEIGHT[self.validation_split]
        return float(self.neighbor_weight)

    def _candidates(self, y):
        """``neighbor_weight="auto"`` chosen on the hold-out: the weights to choose among."""
        if self.neighbor_weight == "auto" and self._chooses_on_hold_out(y):
            return list(AUTO_NEIGHBOR_CANDIDATES)
        return [self._resolved_neighbor_weight()]

    def _auto_batch_plan_of(self, candidate):
        return NEIGHBOR_BATCH_PLAN if self._resolved_neighbor_weight(candidate) > 0 \
            else DEFAULT_BATCH_PLAN

    def _store_candidate(self, candidate):
        self.neighbor_weight_ = self._resolved_neighbor_weight(candidate)

    def _make_objective(self, n_classes, n_components, dim, candidate=None):
        objective = self._build_objective(n_classes, n_components)
        objective.loss.to(DTYPE)
        return _JRDObjective(n_components, dim, objective,
                             self._resolved_neighbor_weight(candidate))

    def _build_objective(self, n_classes, n_components):
        """The :class:`~skdml.losses.MetricObjective`: AM-Softmax plus weighted JRS."""
        loss = build_loss("amsoftmax", {"scale": float(self.scale), "margin": float(self.margin)},
                          n_classes=n_classes, embedding_dim=n_components)
        # the conjugate gradient's line search compares costs along its gradient, which must
        # then be the cost's own: the bandwidth tau is differentiated too (the paper, and
        # the Adam steps, hold it constant)
        jrs = get_regularizer("jrs", detach_tau=self.solver != "conjugate_gradient")
        return MetricObjective(loss, jrs, float(self.regularizer_weight))

    def _store_extras(self, objective, space):
        # trained embedding: normalize(L P (x / m - mu) / s + b), proportional to
        # normalize(components_ x - m components_ mu + m s b)
        b = objective.bias.detach().to(torch.float64).numpy()
        self.bias_ = space.peak * (space.scale * b - self.components_ @ space.mean)
        proxies = objective.am.proxies.detach().to(torch.float64)
        self.proxies_ = F.normalize(proxies, dim=1).numpy()
