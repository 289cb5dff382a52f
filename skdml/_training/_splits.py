"""Validation hold-outs used by the learners' early stopping."""

from __future__ import annotations

import numpy as np

__all__ = ["class_disjoint_holdout", "stratified_holdout"]


def stratified_holdout(y, fraction, rng):
    """Hold out ``fraction`` of each class that has at least 3 samples.

    Each such class keeps at least 2 training samples (one positive pair); the
    other classes stay whole in training. Returns sorted ``(train, val)``
    index arrays; ``val`` is empty when no class has 3 samples.

    Examples
    --------
    >>> import numpy as np
    >>> train, val = stratified_holdout(np.repeat([0, 1], 10), 0.2, np.random.RandomState(0))
    >>> len(train), len(val)
    (16, 4)
    """
    train, val = [], []
    for c in np.unique(y):
        idx = rng.permutation(np.flatnonzero(y == c))
        n_val = max(min(max(1, int(round(fraction * len(idx)))), len(idx) - 2), 0)
        val.append(idx[:n_val])
        train.append(idx[n_val:])
    return np.sort(np.concatenate(train)), np.sort(np.concatenate(val))


def class_disjoint_holdout(y, fraction, rng, min_train_classes=2):
    """Hold out ``fraction`` of the classes (at least 2) with all their samples.

    Returns sorted ``(train, val)`` index arrays. Raises ``ValueError`` when
    fewer than ``min_train_classes`` classes would be left for training.

    Examples
    --------
    >>> import numpy as np
    >>> y = np.repeat(np.arange(10), 3)
    >>> train, val = class_disjoint_holdout(y, 0.2, np.random.RandomState(0))
    >>> len(np.unique(y[val])), len(set(y[train]) & set(y[val]))
    (2, 0)
    """
    classes = np.unique(y)
    n_val = max(2, int(round(fraction * len(classes))))
    if len(classes) - n_val < min_train_classes:
        raise ValueError(
            f"A class-disjoint validation split needs at least {min_train_classes} classes for "
            f"training and 2 for validation; {len(classes)} classes with "
            f"validation_fraction={fraction} leave {len(classes) - n_val} for training.")
    val_classes = rng.choice(classes, n_val, replace=False)
    is_val = np.isin(y, val_classes)
    return np.flatnonzero(~is_val), np.flatnonzero(is_val)
