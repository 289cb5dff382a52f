"""Class-disjoint (zero-shot) cross-validation splitters.

In zero-shot retrieval and clustering a metric is learned on some classes and
evaluated on classes it has never seen. The splitters here make that protocol
usable wherever scikit-learn accepts ``cv=`` (``cross_val_score``,
``cross_validate``, ``GridSearchCV``): the classes are read from ``y``, and
no class of a test fold ever appears in the matching training fold.

- :class:`ClassDisjointSplit`: random class-disjoint splits, repeated.
- :class:`FirstHalfClassSplit`: the papers' fixed protocol (first half of the
  sorted classes train, the rest test), one split.
"""

from __future__ import annotations

import numbers

import numpy as np
from sklearn.model_selection import BaseCrossValidator
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_consistent_length, column_or_1d

from ._utils import flatten_label_column, is_missing_label, keep_label_types

__all__ = ["ClassDisjointSplit", "FirstHalfClassSplit"]


def _classes_of(X, y, splitter):
    """Validate ``y`` for a class-disjoint split; return (classes, class index per sample)."""
    if y is None:
        raise ValueError(
            f"{splitter} splits by class and needs the labels: the 'y' parameter should "
            "not be None."
        )
    y = column_or_1d(np.asarray(flatten_label_column(keep_label_types(y))))
    if X is not None:
        check_consistent_length(X, y)
    if y.shape[0] == 0:
        raise ValueError(f"{splitter} got an empty y (0 samples).")
    if y.dtype.kind == "f" and not np.all(np.isfinite(y)):
        raise ValueError(f"{splitter}: y contains NaN or infinity.")
    if y.dtype == object and any(label is None for label in y):
        raise ValueError(f"{splitter}: y contains None; every sample needs a class label.")
    if y.dtype == object and any(map(is_missing_label, y)):
        raise ValueError(f"{splitter}: y contains NaN or a missing value; every sample needs "
                         "a class label.")
    try:
        classes, y_index = np.unique(y, return_inverse=True)
    except TypeError as exc:
        kinds = sorted({type(label).__name__ for label in y})
        raise ValueError(
            f"{splitter}: y mixes label types {kinds} that cannot be ordered ({exc}); use "
            "one type (e.g. convert every label to str).") from None
    if classes.shape[0] < 2:
        raise ValueError(
            f"{splitter} needs at least 2 classes (one to train on, one to test on); "
            f"y has {classes.shape[0]}."
        )
    return classes, y_index.ravel()


def _indices(y_index, test_classes_mask):
    test_mask = test_classes_mask[y_index]
    return np.flatnonzero(~test_mask), np.flatnonzero(test_mask)


class ClassDisjointSplit(BaseCrossValidator):
    """Random class-disjoint train/test splits (the zero-shot protocol).

    Each split draws ``test_size`` of the classes at random as test classes;
    all samples of those classes form the test set and all samples of the
    other classes the training set. A test class therefore never appears in
    the training set of the same split. Splits are drawn independently, like
    :class:`~sklearn.model_selection.ShuffleSplit` (a class may be a test
    class in several splits); this is
    :class:`~sklearn.model_selection.GroupShuffleSplit` with the labels as the
    groups, reading the classes from ``y`` so that it works as ``cv=`` in
    :func:`~sklearn.model_selection.cross_val_score` and
    :class:`~sklearn.model_selection.GridSearchCV`, which pass ``y``.

    Parameters
    ----------
    n_splits : int, default=5
        Number of splits (re-drawings of the test classes).
    test_size : float or int, default=0.5
        If float in (0, 1), the fraction of the classes put in the test set,
        rounded up (``ceil(test_size * n_classes)``). If int, the number of
        test classes. At least one class must remain for training.
    random_state : int, RandomState instance or None, default=None
        Controls the draws. Pass an int for reproducible splits: then every
        call to :meth:`split` yields the same splits.

    See Also
    --------
    FirstHalfClassSplit : The fixed first-half/second-half class split.
    sklearn.model_selection.GroupShuffleSplit : The same with explicit groups.

    Examples
    --------
    >>> import numpy as np
    >>> from skdml.model_selection import ClassDisjointSplit
    >>> X = np.zeros((8, 2))
    >>> y = np.array([0, 0, 1, 1, 2, 2, 3, 3])
    >>> cv = ClassDisjointSplit(n_splits=3, test_size=0.5, random_state=0)
    >>> cv.get_n_splits(X, y)
    3
    >>> for train, test in cv.split(X, y):
    ...     assert not set(y[train]) & set(y[test])
    ...     print(len(set(y[train].tolist())), len(set(y[test].tolist())))
    2 2
    2 2
    2 2
    """

    def __init__(self, n_splits=5, *, test_size=0.5, random_state=None):
        self.n_splits = n_splits
        self.test_size = test_size
        self.random_state = random_state

    def _check_params(self):
        if (not isinstance(self.n_splits, numbers.Integral)
                or isinstance(self.n_splits, bool) or self.n_splits < 1):
            raise ValueError(f"n_splits must be an int >= 1, got {self.n_splits!r}.")
        ts = self.test_size
        if isinstance(ts, bool) or not isinstance(ts, numbers.Real):
            raise ValueError(f"test_size must be a float in (0, 1) or an int >= 1, got {ts!r}.")
        if isinstance(ts, numbers.Integral):
            if ts < 1:
                raise ValueError(f"test_size as an int is a number of classes and must be "
                                 f">= 1, got {ts}.")
        elif not 0.0 < float(ts) < 1.0:
            raise ValueError(f"test_size as a float is a fraction of the classes and must "
                             f"be in (0, 1), got {ts}.")

    def _n_test_classes(self, n_classes):
        ts = self.test_size
        if isinstance(ts, numbers.Integral):
            n_test = int(ts)
        else:
            # rounded to 12 digits first: 0.07 * 100 is 7.000000000000001, which ceil takes to 8
            # and at least 1: a fraction rounding to 0 (1e-14) left every test fold empty
            # a numpy float as the decimal it prints: float32(0.3) is 0.30000001192..., which
            # took 4 test classes of 10
            fraction = float(str(ts)) if isinstance(ts, np.floating) else float(ts)
            n_test = max(1, int(np.ceil(round(fraction * n_classes, 12))))
        if n_test >= n_classes:
            raise ValueError(
                f"test_size={ts!r} asks for {n_test} test classes but y has only {n_classes} "
                "classes; at least one class must remain for training. Lower test_size."
            )
        return n_test

    def split(self, X, y, groups=None):
        """Generate indices to split data into class-disjoint training and test sets.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Training data (only its length is used).
        y : array-like of shape (n_samples,)
            Class labels; the split is by class. Required.
        groups : object
            Ignored, present for API compatibility.

        Yields
        ------
        train : ndarray
            Sorted indices of the training samples.
        test : ndarray
            Sorted indices of the test samples.
        """
        self._check_params()
        classes, y_index = _classes_of(X, y, type(self).__name__)
        n_classes = classes.shape[0]
        n_test = self._n_test_classes(n_classes)
        rng = check_random_state(self.random_state)
        for _ in range(self.n_splits):
            test_classes = np.zeros(n_classes, dtype=bool)
            test_classes[rng.permutation(n_classes)[:n_test]] = True
            yield _indices(y_index, test_classes)

    def get_n_splits(self, X=None, y=None, groups=None):
        """Return the number of splits, ``n_splits``.

        Parameters
        ----------
        X, y, groups : object
            Ignored, present for API compatibility.

        Returns
        -------
        n_splits : int
            The number of splitting iterations.
        """
        self._check_params()
        return self.n_splits

    def _iter_test_indices(self, X=None, y=None, groups=None):  # pragma: no cover
        for _, test in self.split(X, y, groups):
            yield test


class FirstHalfClassSplit(BaseCrossValidator):
    """The papers' fixed zero-shot split: the first half of the classes train.

    The unique labels are sorted; the first ``n_classes // 2`` classes form the
    training set and the remaining classes (the larger half when the count is
    odd) the test set. This is the protocol of Oh Song et al. (2016) used by
    ECAML, DeML and JRD (e.g. CUB-200: classes 1-100 train, 101-200 test).
    One split, deterministic; usable as ``cv=``.

    See Also
    --------
    ClassDisjointSplit : Random repeated class-disjoint splits.

    Examples
    --------
    >>> import numpy as np
    >>> from skdml.model_selection import FirstHalfClassSplit
    >>> y = np.array([3, 0, 1, 2, 0, 3])
    >>> cv = FirstHalfClassSplit()
    >>> cv.get_n_splits()
    1
    >>> train, test = next(cv.split(np.zeros((6, 1)), y))
    >>> train, y[train]
    (array([1, 2, 4]), array([0, 1, 0]))
    >>> test, y[test]
    (array([0, 3, 5]), array([3, 2, 3]))
    """

    def split(self, X, y, groups=None):
        """Generate the one training/test split: first half of the sorted classes vs the rest.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Training data (only its length is used).
        y : array-like of shape (n_samples,)
            Class labels. Required.
        groups : object
            Ignored, present for API compatibility.

        Yields
        ------
        train : ndarray
            Sorted indices of the samples of the first ``n_classes // 2`` classes.
        test : ndarray
            Sorted indices of the samples of the other classes.
        """
        classes, y_index = _classes_of(X, y, type(self).__name__)
        test_classes = np.arange(classes.shape[0]) >= classes.shape[0] // 2
        yield _indices(y_index, test_classes)

    def get_n_splits(self, X=None, y=None, groups=None):
        """Return the number of splits, always 1.

        Parameters
        ----------
        X, y, groups : object
            Ignored, present for API compatibility.

        Returns
        -------
        n_splits : int
            1.
        """
        return 1

    def _iter_test_indices(self, X=None, y=None, groups=None):  # pragma: no cover
        for _, test in self.split(X, y, groups):
            yield test
