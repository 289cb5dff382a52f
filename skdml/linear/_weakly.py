"""The weakly-supervised API: learners fitted on pairs, triplets or quadruplets.

A *tuple* is ``tuple_size`` samples: a pair ``(a, b)`` labelled similar (+1) or
dissimilar (-1); a triplet ``(a, p, n)`` saying ``a`` is closer to ``p`` than
to ``n``; a quadruplet ``(a, b, c, d)`` saying ``(a, b)`` are closer than
``(c, d)``. Tuples come either as a float array of shape
``(n_tuples, tuple_size, n_features)`` or, when the learner has a
``preprocessor`` (an array of shape ``(n_samples, n_features)``), as an
integer array of shape ``(n_tuples, tuple_size)`` of row indices into it; or,
when the ``preprocessor`` is a callable, as an array of shape
``(n_tuples, tuple_size)`` of identifiers it maps to features (called once,
on the 1-D array of all of them, it returns their features row by row, as
metric-learn's callable preprocessors do).

:class:`BasePairsLearner`, :class:`BaseTripletsLearner` and
:class:`BaseQuadrupletsLearner` validate the tuples, make the fit
transactional and implement prediction and scoring; a learner implements
``_fit_tuples(tuples, y)`` (``tuples`` always 3-D floats, ``y`` the pair labels
or ``None``) and sets ``components_``.
"""

from __future__ import annotations

import numbers
from abc import abstractmethod
from collections.abc import Mapping

import numpy as np
from sklearn.base import ClassifierMixin, _fit_context
from sklearn.utils import check_array
from sklearn.utils.validation import _get_feature_names, check_is_fitted

from .._utils import transactional_fit
from .._utils._labels import integer_objects, is_missing_label
from ._base import BaseMahalanobis, mapped_distances

__all__ = [
    "CALIBRATION_STRATEGIES",
    "BasePairsLearner",
    "BaseQuadrupletsLearner",
    "BaseTripletsLearner",
]

#: The strategies of :meth:`BasePairsLearner.calibrate_threshold`.
CALIBRATION_STRATEGIES = ("accuracy", "f_beta", "max_tpr", "max_tnr")

_WHAT = {2: "pairs", 3: "triplets", 4: "quadruplets"}


class _TupleLearner(BaseMahalanobis):
    """Tuple input (3-D features, or indices into ``preprocessor``) for a Mahalanobis learner."""

    _tuple_size = 2
    _parameter_constraints: dict = {"preprocessor": ["array-like", callable, None]}

    def _check_preprocessor(self, reset):
        if reset:
            self.__dict__.pop("feature_names_in_", None)  # a refit forgets the last one's names
            if self.preprocessor is None or callable(self.preprocessor):
                self.preprocessor_ = self.preprocessor
            else:
                # a DataFrame's columns name the features, as fit(X) with a DataFrame does
                names = _get_feature_names(self.preprocessor)
                self.preprocessor_ = check_array(self.preprocessor, dtype=np.float64,
                                                 input_name="preprocessor")
                if names is not None:
                    self.feature_names_in_ = names
        return self.preprocessor_

    def _validate_tuples(self, tuples, *, reset, size=None):
        """The tuples as a float64 array (n_tuples, size, n_features); set n_features_in_.

        ``size``: the samples per tuple (default: the learner's ``_tuple_size``).
        """
        k = self._tuple_size if size is None else size
        what = _WHAT[k]
        name = type(self).__name__
        if not reset:
            check_is_fitted(self)
        preprocessor = self._check_preprocessor(reset)
        # 3-D tuples are features even with a preprocessor (metric-learn's rule): pairs of new
        # samples can be scored by a learner fitted on indices
        features = np.ndim(tuples) == 3
        if callable(preprocessor) and not features:
            tuples = self._call_preprocessor(preprocessor, tuples, k, what)
        elif preprocessor is not None and not features:
            idx = integer_objects(np.asarray(tuples))
            if idx.ndim != 2 or idx.shape[1] != k:
                raise ValueError(
                    f"{name} has a preprocessor, so {what} are rows of {k} sample indices into "
                    f"it: an integer array of shape (n_{what}, {k}); got shape {idx.shape}.")
            whole = np.issubdtype(idx.dtype, np.integer) or (
                np.issubdtype(idx.dtype, np.floating) and np.all(np.isfinite(idx))
                and np.all(idx == np.round(idx)))
            if idx.size and not whole:
                missing = " (some are missing)" if idx.dtype == object and any(
                    is_missing_label(v) for v in idx.flat) else ""
                raise ValueError(f"{what} indices into the preprocessor must be integers; got "
                                 f"dtype {idx.dtype}{missing}.")
            n = len(preprocessor)
            if idx.size and (idx.min() < 0 or idx.max() >= n):  # before the cast: 1e20 wraps
                low, high = (v.item() if np.issubdtype(idx.dtype, np.integer) else f"{v:g}"
                             for v in (idx.min(), idx.max()))
                raise ValueError(f"{what} indices must lie in [0, {n}) (the preprocessor has {n} "
                                 f"rows); got indices from {low} to {high}.")
            idx = idx.astype(np.int64)
            if len(idx) == 0:
                raise ValueError(f"{name} needs at least 1 of the {what}; got 0.")
            tuples = preprocessor[idx]
        else:
            if np.ndim(tuples) != 3:
                raise ValueError(
                    f"{what} must be an array of shape (n_{what}, {k}, n_features) (or, with a "
                    f"preprocessor, of shape (n_{what}, {k}) of indices); got an array of "
                    f"{np.ndim(tuples)} dimension(s), shape {np.shape(tuples)}.")
            tuples = check_array(tuples, allow_nd=True, ensure_2d=False, dtype=np.float64,
                                 input_name=what)
            if tuples.shape[1] != k:
                raise ValueError(f"{what} must have shape (n_{what}, {k}, n_features); got shape "
                                 f"{tuples.shape}.")
            if tuples.shape[2] == 0:
                raise ValueError(f"{what} have 0 features; at least 1 is required.")
        if reset:
            self.n_features_in_ = tuples.shape[2]
        elif tuples.shape[2] != self.n_features_in_:
            raise ValueError(f"{what} have {tuples.shape[2]} features, but {name} was fitted "
                             f"with {self.n_features_in_} features.")
        return tuples

    def _call_preprocessor(self, preprocessor, tuples, k, what):
        """The features (n_tuples, k, n_features) a callable preprocessor gives the ids."""
        name = type(self).__name__
        ids = np.asarray(tuples)
        if ids.ndim != 2 or ids.shape[1] != k:
            raise ValueError(
                f"{name} has a callable preprocessor, so {what} are rows of {k} sample "
                f"identifiers: an array of shape (n_{what}, {k}); got shape {ids.shape}.")
        if len(ids) == 0:
            raise ValueError(f"{name} needs at least 1 of the {what}; got 0.")
        try:
            features = check_array(preprocessor(ids.ravel()), dtype=np.float64,
                                   input_name="the preprocessor's output")
        except ValueError as exc:
            raise ValueError(f"{name}: the callable preprocessor must return a finite 2-D "
                             f"array of features, one row per identifier; {exc}") from exc
        if len(features) != ids.size:
            raise ValueError(f"{name}: the callable preprocessor returned {len(features)} rows "
                             f"for {ids.size} identifiers; it must return one row each, of "
                             f"shape ({ids.size}, n_features).")
        return features.reshape(len(ids), k, features.shape[1])

    def _check_pairs(self, pairs):  # BaseMahalanobis.pair_distance: indices work too
        return self._validate_tuples(pairs, reset=False, size=2)

    def _distances(self, tuples, i, j):
        return mapped_distances(tuples[:, i], tuples[:, j], self.components_)

    @abstractmethod
    def _fit_tuples(self, tuples, y):
        """Set ``components_`` (and fitted extras) from validated tuples."""

    def fit_transform(self, X, y=None, **fit_params):
        """Not available: ``fit`` takes tuples of samples, ``transform`` takes samples.

        scikit-learn's ``fit_transform(X, y)`` is ``fit(X, y).transform(X)`` on the
        same ``X``, which has no meaning here (with a preprocessor, rows of indices
        would be embedded as if they were samples). Fit on the tuples, then
        transform the samples: ``learner.fit(tuples, y).transform(X)``.

        Raises
        ------
        TypeError
            Always.
        """
        raise TypeError(
            f"{type(self).__name__}.fit_transform is not available: fit takes "
            f"{_WHAT[self._tuple_size]} (tuples of samples) and transform takes samples. "
            f"Use {type(self).__name__}(...).fit({_WHAT[self._tuple_size]}, y).transform(X).")

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.three_d_array = True  # 2-D: indices into the preprocessor
        return tags


def _check_pair_labels(y, n_pairs):
    y = np.asarray(y)
    if y.dtype == object and all(isinstance(v, numbers.Real) and not isinstance(v, (bool, np.bool_))
                                 for v in y.ravel()):
        y = y.astype(np.float64)  # e.g. a list of Python ints that went through an object column
    if y.ndim != 1 or len(y) != n_pairs:
        raise ValueError(f"y must hold one label per pair, shape ({n_pairs},); got shape "
                         f"{y.shape}.")
    if y.dtype.kind not in "iuf" or not np.all(np.isin(y, (-1, 1))):
        values = np.unique(y)[:5] if y.dtype.kind in "iufb" else y[:5]
        raise ValueError("Pair labels must be +1 (similar) or -1 (dissimilar); got values "
                         f"{list(values)}.")
    return y.astype(np.int64)


class BasePairsLearner(ClassifierMixin, _TupleLearner):
    """Base class for metric learners fitted on labelled pairs (a pair classifier).

    ``fit(pairs, y)`` with ``pairs`` of shape (n_pairs, 2, n_features) (or
    indices into ``preprocessor``) and ``y`` in {-1, 1}; the learned distance
    classifies a pair as similar (+1) when it is at most ``threshold_``,
    calibrated on the training pairs for accuracy at the end of ``fit``
    (:meth:`calibrate_threshold` and :meth:`set_threshold` change it).
    :meth:`decision_function` is ``threshold_`` minus the distance:
    non-negative exactly where :meth:`predict` says +1 (scikit-learn's binary convention, so
    :class:`~sklearn.model_selection.FixedThresholdClassifier` and
    ``scoring="roc_auc"`` in :class:`~sklearn.model_selection.GridSearchCV`
    read it right); :meth:`pair_score` is minus the distance, as in
    metric-learn; :meth:`score` is the accuracy (scikit-learn's classifier
    default).

    Subclasses implement ``_fit_tuples(pairs, y)`` and set ``components_``.

    Examples
    --------
    >>> import numpy as np
    >>> from skdml.linear import BasePairsLearner
    >>> class FirstFeature(BasePairsLearner):
    ...     def __init__(self, preprocessor=None):
    ...         self.preprocessor = preprocessor
    ...     def _fit_tuples(self, pairs, y):
    ...         self.components_ = np.eye(pairs.shape[2])[:1]
    >>> X = np.array([[0.0, 5.0], [0.1, -5.0], [3.0, 0.0]])
    >>> pairs, y = np.array([[0, 1], [0, 2]]), np.array([1, -1])
    >>> est = FirstFeature(preprocessor=X).fit(pairs, y)
    >>> est.pair_distance(pairs).round(2), est.predict(pairs), est.score(pairs, y)
    (array([0.1, 3. ]), array([ 1, -1]), 1.0)
    """

    _tuple_size = 2

    @_fit_context(prefer_skip_nested_validation=True)
    @transactional_fit
    def fit(self, pairs, y, calibration_params=None):
        """Fit the metric on labelled pairs, then calibrate ``threshold_`` on them.

        Parameters
        ----------
        pairs : array-like of shape (n_pairs, 2, n_features) or (n_pairs, 2)
            The pairs, or indices of samples of ``preprocessor``.
        y : array-like of shape (n_pairs,)
            +1 for a similar pair, -1 for a dissimilar one.
        calibration_params : dict, default=None
            Options of :meth:`calibrate_threshold` (``strategy``,
            ``min_rate``, ``beta``); ``None``: accuracy.

        Returns
        -------
        self : object
            The fitted learner.
        """
        if calibration_params is not None and not isinstance(calibration_params, Mapping):
            raise TypeError("calibration_params must be a dict of strategy, min_rate and beta "
                            f"(or None); got {type(calibration_params).__name__} "
                            f"{calibration_params!r}.")
        params = dict(calibration_params or {})
        unknown = set(params) - {"strategy", "min_rate", "beta"}
        if unknown:
            raise ValueError(f"calibration_params takes strategy, min_rate and beta; got "
                             f"{sorted(unknown)}.")
        _check_calibration(**params)
        pairs = self._validate_tuples(pairs, reset=True)
        y = _check_pair_labels(y, len(pairs))
        self.classes_ = np.array([-1, 1])
        self._fit_tuples(pairs, y)
        self._calibrate(pairs, y, **params)
        return self

    def decision_function(self, pairs):
        """``threshold_`` minus the learned distance of each pair (higher: more similar).

        Non-negative exactly where :meth:`predict` says +1 (similar), as
        scikit-learn reads a binary classifier's decision function; a shift of
        :meth:`pair_score` (minus the distance, metric-learn's
        ``decision_function``), so rankings (ROC AUC, average precision) are
        the same.

        Parameters
        ----------
        pairs : array-like of shape (n_pairs, 2, n_features) or (n_pairs, 2)

        Returns
        -------
        scores : ndarray of shape (n_pairs,)
        """
        check_is_fitted(self)
        return self.threshold_ - self.pair_distance(pairs)

    def predict(self, pairs):
        """+1 (similar) where the learned distance is at most ``threshold_``, else -1.

        Parameters
        ----------
        pairs : array-like of shape (n_pairs, 2, n_features) or (n_pairs, 2)

        Returns
        -------
        y_pred : ndarray of shape (n_pairs,)
        """
        distances = self.pair_distance(pairs)
        return np.where(distances <= self.threshold_, 1, -1)

    def set_threshold(self, threshold):
        """Set ``threshold_``: pairs at most this far apart are predicted similar.

        Parameters
        ----------
        threshold : float
            A finite distance.

        Returns
        -------
        self : object
        """
        check_is_fitted(self)
        if isinstance(threshold, (bool, np.bool_)) or not isinstance(threshold, numbers.Real) \
                or not np.isfinite(threshold):
            raise ValueError(f"threshold must be a finite real number; got {threshold!r}.")
        self.threshold_ = float(threshold)
        return self

    def score(self, pairs, y, sample_weight=None):
        """Accuracy of :meth:`predict` on labelled pairs (labels in {-1, 1}, checked).

        Parameters
        ----------
        pairs : array-like of shape (n_pairs, 2, n_features) or (n_pairs, 2)
        y : array-like of shape (n_pairs,)
            Their labels in {-1, 1}: other labels (0/1, say) are refused, as in
            :meth:`fit`, since they would silently count as misses.
        sample_weight : array-like of shape (n_pairs,), default=None

        Returns
        -------
        score : float
        """
        y = _check_pair_labels(y, len(pairs))
        return super().score(pairs, y, sample_weight=sample_weight)

    def calibrate_threshold(self, pairs_valid, y_valid, strategy="accuracy", min_rate=None,
                            beta=1.0):
        """Choose ``threshold_`` to maximise a score on validation pairs.

        Every distinct distance of the validation pairs (and "accept none") is
        a candidate; ties are accepted or rejected together.

        Parameters
        ----------
        pairs_valid : array-like of shape (n_pairs, 2, n_features) or (n_pairs, 2)
            Validation pairs.
        y_valid : array-like of shape (n_pairs,)
            Their labels in {-1, 1}.
        strategy : {"accuracy", "f_beta", "max_tpr", "max_tnr"}, default="accuracy"
            ``"accuracy"``: the most accurate threshold; ``"f_beta"``: the best
            F-beta score; ``"max_tpr"``: the highest true-positive rate with a
            true-negative rate of at least ``min_rate``; ``"max_tnr"``: the
            highest true-negative rate with a true-positive rate of at least
            ``min_rate`` (ties broken by the other rate).
        min_rate : float in [0, 1], default=None
            Required by ``"max_tpr"`` and ``"max_tnr"``.
        beta : float, default=1.0
            The ``beta`` of ``"f_beta"`` (positive).

        Returns
        -------
        self : object
        """
        check_is_fitted(self)
        _check_calibration(strategy, min_rate, beta)
        pairs_valid = self._validate_tuples(pairs_valid, reset=False)
        y_valid = _check_pair_labels(y_valid, len(pairs_valid))
        return self._calibrate(pairs_valid, y_valid, strategy, min_rate, beta)

    def _calibrate(self, pairs, y, strategy="accuracy", min_rate=None, beta=1.0):
        self.threshold_ = calibrated_threshold(self._distances(pairs, 0, 1), y, strategy,
                                               min_rate, beta)
        return self

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_class = False  # pair labels are -1 and +1 only
        return tags


def _check_calibration(strategy="accuracy", min_rate=None, beta=1.0):
    if strategy not in CALIBRATION_STRATEGIES:
        raise ValueError(f"strategy must be one of {CALIBRATION_STRATEGIES}; got {strategy!r}.")
    if strategy in ("max_tpr", "max_tnr") and (
            isinstance(min_rate, (bool, np.bool_)) or not isinstance(min_rate, numbers.Real)
            or not 0.0 <= min_rate <= 1.0):
        raise ValueError(f"strategy={strategy!r} needs min_rate, a number in [0, 1]; got "
                         f"{min_rate!r}.")
    if strategy == "f_beta" and (isinstance(beta, (bool, np.bool_))
                                 or not isinstance(beta, numbers.Real) or not beta > 0):
        raise ValueError(f"beta must be a positive real number; got {beta!r}.")


def calibrated_threshold(distances, y, strategy="accuracy", min_rate=None, beta=1.0):
    """The distance threshold maximising ``strategy`` (see ``calibrate_threshold``).

    Candidates: accepting the ``i`` closest pairs for every ``i`` that ends a
    group of tied distances, and accepting none. The threshold lies halfway
    between the last accepted distance and the next one (accepting all: as far
    above the largest as accepting none lies below the smallest: 1, or the next
    float where adding 1 rounds back to it), not *on* a calibration distance:
    a pair's distance can differ by a rounding error between batches (BLAS
    blocks a product by its size), and a threshold equal to a distance would
    then accept the pair in one batch and reject it in another. The one
    exception: two distinct distances that are adjacent floats (no float lies
    between them) put the threshold on the smaller one.

    Examples
    --------
    >>> calibrated_threshold(np.array([0.1, 0.5, 0.4, 2.0]), np.array([1, -1, 1, -1]))
    0.45
    """
    order = np.argsort(distances, kind="stable")
    d, pos = distances[order], (y[order] == 1)
    n_pos, n_neg = int(pos.sum()), int((~pos).sum())
    ends = np.flatnonzero(np.r_[d[1:] > d[:-1], True]) + 1  # accepted counts, tie groups whole
    tp = np.r_[0, np.cumsum(pos)[ends - 1]]
    accepted = np.r_[0, ends]
    fp = accepted - tp
    # accept none: below the smallest distance (minus 1 rounds back to it from about 1e16);
    # accept the first ends[j]: halfway to the next distance; accept all: above the largest
    above = min(max(d[-1] + 1.0, np.nextafter(d[-1], np.inf)), np.finfo(np.float64).max)
    last, following = d[ends - 1], np.r_[d[ends[:-1]], above]
    between = last + (following - last) / 2
    # adjacent floats have nothing between them: the threshold is then the last accepted
    # distance itself, except past the largest, where the float above it accepts all alike
    between = np.where((last < between) & (between < following), between, last)
    if not last[-1] < between[-1]:
        between[-1] = above
    thresholds = np.r_[min(d[0] - 1.0, np.nextafter(d[0], -np.inf)), between]
    tn = n_neg - fp
    if strategy == "accuracy":
        best = int(np.argmax(tp + tn))
    else:
        needs = {"f_beta": n_pos > 0, "max_tpr": n_pos > 0, "max_tnr": n_neg > 0}[strategy]
        if not needs:
            raise ValueError(f"strategy={strategy!r} needs "
                             f"{'positive' if strategy != 'max_tnr' else 'negative'} pairs "
                             "(label +1 / -1) in y_valid; there are none.")
        # a rate with nothing to count is 1 (no positive / negative pair can be missed), so
        # min_rate on it holds at every threshold, as for the other rate
        tpr = tp / n_pos if n_pos else np.ones_like(tp, dtype=float)
        tnr = tn / n_neg if n_neg else np.ones_like(tp, dtype=float)
        if strategy == "f_beta":
            # F-beta divided through by 1 + beta^2: the weight w = beta^2 / (1 + beta^2) of
            # precision in the harmonic mean stays in [0, 1] for any beta (inf: recall)
            with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                w = 1.0 / (1.0 + np.float64(beta) ** -2)
                precision = np.where(accepted > 0, tp / np.maximum(accepted, 1), 0.0)
                f = precision * tpr / (w * precision + (1.0 - w) * tpr)
            best = int(np.argmax(np.nan_to_num(f, nan=0.0)))
        else:
            main, other = (tpr, tnr) if strategy == "max_tpr" else (tnr, tpr)
            feasible = (tnr if strategy == "max_tpr" else tpr) >= min_rate - 1e-12
            if not feasible.any():  # pragma: no cover - accepting all (or none) always qualifies
                raise ValueError("No threshold reaches min_rate.")
            top = np.max(main[feasible])  # the best main rate, then the best other rate
            best = int(np.argmax(np.where(feasible & (main >= top), other, -np.inf)))
    return float(thresholds[best])


class _OrderedTupleLearner(_TupleLearner):
    """Triplets and quadruplets: a tuple is satisfied when its first pair is the closer."""

    @_fit_context(prefer_skip_nested_validation=True)
    @transactional_fit
    def fit(self, tuples, y=None):
        """Fit the metric on the tuples.

        Parameters
        ----------
        tuples : array-like of shape (n_tuples, tuple_size, n_features) or (n_tuples, tuple_size)
            The tuples, or indices of samples of ``preprocessor``.
        y : None
            Ignored: the order inside each tuple is the label.

        Returns
        -------
        self : object
            The fitted learner.
        """
        tuples = self._validate_tuples(tuples, reset=True)
        self._fit_tuples(tuples, None)
        return self

    def decision_function(self, tuples):
        """Distance of the second pair minus that of the first (positive: satisfied).

        Parameters
        ----------
        tuples : array-like of shape (n_tuples, tuple_size, n_features) or (n_tuples, tuple_size)

        Returns
        -------
        scores : ndarray of shape (n_tuples,)
        """
        tuples = self._validate_tuples(tuples, reset=False)
        return self._distances(tuples, *self._far_pair) - self._distances(tuples, 0, 1)

    def predict(self, tuples):
        """+1 where the first pair is closer than the second (the tuple holds), else -1.

        Parameters
        ----------
        tuples : array-like of shape (n_tuples, tuple_size, n_features) or (n_tuples, tuple_size)

        Returns
        -------
        y_pred : ndarray of shape (n_tuples,)
        """
        return np.where(self.decision_function(tuples) > 0, 1, -1)

    def score(self, tuples, y=None):
        """The fraction of tuples the learned metric satisfies.

        Parameters
        ----------
        tuples : array-like of shape (n_tuples, tuple_size, n_features) or (n_tuples, tuple_size)
        y : None
            Ignored.

        Returns
        -------
        score : float
        """
        return float(np.mean(self.predict(tuples) == 1))


class BaseTripletsLearner(_OrderedTupleLearner):
    """Base class for metric learners fitted on triplets ``(anchor, positive, negative)``.

    A triplet says the anchor is closer to its positive than to its
    negative. :meth:`predict` is +1 where the learned metric agrees,
    :meth:`score` the fraction of triplets it satisfies. Subclasses implement
    ``_fit_tuples(triplets, None)`` and set ``components_``.

    Examples
    --------
    >>> import numpy as np
    >>> from skdml.linear import BaseTripletsLearner
    >>> class SecondFeature(BaseTripletsLearner):
    ...     def __init__(self, preprocessor=None):
    ...         self.preprocessor = preprocessor
    ...     def _fit_tuples(self, triplets, y):
    ...         self.components_ = np.eye(triplets.shape[2])[1:]
    >>> X = np.array([[0.0, 0.0], [5.0, 0.1], [0.1, 3.0]])
    >>> est = SecondFeature(preprocessor=X).fit(np.array([[0, 1, 2]]))
    >>> est.predict(np.array([[0, 1, 2], [0, 2, 1]])), est.score(np.array([[0, 1, 2]]))
    (array([ 1, -1]), 1.0)
    """

    _tuple_size = 3
    _far_pair = (0, 2)


class BaseQuadrupletsLearner(_OrderedTupleLearner):
    """Base class for metric learners fitted on quadruplets ``(a, b, c, d)``.

    A quadruplet says ``(a, b)`` are closer than ``(c, d)``. :meth:`predict`
    is +1 where the learned metric agrees, :meth:`score` the fraction of
    quadruplets it satisfies. Subclasses implement ``_fit_tuples(quadruplets,
    None)`` and set ``components_``.

    Examples
    --------
    >>> import numpy as np
    >>> from skdml.linear import BaseQuadrupletsLearner
    >>> class Identity(BaseQuadrupletsLearner):
    ...     def __init__(self, preprocessor=None):
    ...         self.preprocessor = preprocessor
    ...     def _fit_tuples(self, quadruplets, y):
    ...         self.components_ = np.eye(quadruplets.shape[2])
    >>> quadruplets = np.array([[[0.0], [1.0], [0.0], [3.0]]])
    >>> est = Identity().fit(quadruplets)
    >>> est.decision_function(quadruplets), est.predict(quadruplets)
    (array([2.]), array([1]))
    """

    _tuple_size = 4
    _far_pair = (2, 3)
