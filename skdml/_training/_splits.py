"""Validation hold-outs used by the learners' early stopping."""

from __future__ import annotations

import numpy as np

__all__ = ["DEFAULT_FRACTIONS", "MIN_CLASSES_CLASS_DISJOINT", "class_disjoint_holdout",
           "n_held_out_classes", "stratified_holdout", "validation_holdout"]


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


def n_held_out_classes(n_classes, fraction=None):
    """Classes a class-disjoint hold-out of ``fraction`` (``None``: the default) keeps out.

    Examples
    --------
    >>> n_held_out_classes(10), n_held_out_classes(136), n_held_out_classes(136, 0.5)
    (2, 27, 68)
    """
    if fraction is None:
        fraction = DEFAULT_FRACTIONS["class_disjoint"]
    return max(2, int(round(fraction * n_classes)))


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
    n_val = n_held_out_classes(len(classes), fraction)
    if len(classes) - n_val < min_train_classes:
        raise ValueError(
            f"A class-disjoint validation split needs at least {min_train_classes} classes for "
            f"training and 2 for validation; {len(classes)} classes with "
            f"validation_fraction={fraction} leave {len(classes) - n_val} for training "
            "(early_stopping=False trains on every class without a hold-out).")
    # held out among the classes of 2 or more samples: the hold-out is scored among itself
    # (Recall@1, MAP@R), where a single sample has no same-class reference (the same draws
    # as before when every class has 2)
    classes, counts = np.unique(y, return_counts=True)
    pairs = classes[counts >= 2]
    if len(pairs) < n_val:
        raise ValueError(
            f"A class-disjoint validation split holds out {n_val} classes of 2 or more samples "
            f"(they are scored among themselves), but only {len(pairs)} of the {len(classes)} "
            "classes have 2 or more; hold out fewer classes (a smaller validation_fraction), "
            "use a stratified hold-out where the learner offers one (validation_split="
            "'stratified'), or set early_stopping=False to train without a hold-out.")
    val_classes = rng.choice(pairs, n_val, replace=False)
    is_val = np.isin(y, val_classes)
    return np.flatnonzero(~is_val), np.flatnonzero(is_val)


#: ``validation_split="auto"``: whole classes are held out from this many classes up (at
#: least 2 held out, the rest trained on); fewer classes hold out samples of each class.
MIN_CLASSES_CLASS_DISJOINT = 5
#: ``validation_fraction=None``: the fraction of the classes held out by a class-disjoint
#: split, and of each class by a stratified one.
DEFAULT_FRACTIONS = {"class_disjoint": 0.2, "stratified": 0.1}


def _check_scored_within(y, val, fraction):
    """Refuse a stratified hold-out in which no class has two held-out samples.

    The deep learner scores its held-out set by MAP@R *among itself*: a class
    with one held-out sample has no same-class reference there, and with no
    class of two the score is undefined.
    """
    classes, counts = np.unique(y[val], return_counts=True)
    if np.any(counts >= 2):
        return
    totals = dict(zip(*np.unique(y, return_counts=True)))
    shown = ", ".join(f"{c!r} ({totals[c]} samples)" for c in classes[:10].tolist())
    more = f" and {len(classes) - 10} more" if len(classes) > 10 else ""
    raise ValueError(
        f"The stratified validation split (validation_fraction={fraction} of each class) holds "
        f"out a single sample of each of the classes {shown}{more}: the held-out set is scored "
        "by MAP@R among itself, which needs two held-out samples of a class. Raise "
        "validation_fraction, give the classes more samples, or set early_stopping=False and "
        "validation_fraction=None.")


def validation_holdout(y, fraction, split, rng, *, scored_within=False):
    """``(train, val, split)``: the early-stopping hold-out of every learner, and its kind.

    One rule for :class:`~skdml.ECAML`, :class:`~skdml.JRD` and
    :class:`~skdml.DeepMetricTransformer`. ``split="auto"`` holds out whole
    classes (what retrieval of unseen classes needs) from
    :data:`MIN_CLASSES_CLASS_DISJOINT` classes up, and a fraction of each class
    below; ``fraction=None`` is 0.2 of the classes (class-disjoint) or 0.1 of
    each class (stratified). ``scored_within=True`` (a hold-out scored among
    itself) refuses a stratified split with no class of two held-out samples,
    naming the split and its classes.

    Examples
    --------
    >>> import numpy as np
    >>> y = np.repeat(np.arange(10), 4)
    >>> train, val, split = validation_holdout(y, None, "auto", np.random.RandomState(0))
    >>> split, len(np.unique(y[val]))
    ('class_disjoint', 2)
    """
    if split == "auto":
        split = "class_disjoint" if len(np.unique(y)) >= MIN_CLASSES_CLASS_DISJOINT \
            else "stratified"
    if fraction is None:
        fraction = DEFAULT_FRACTIONS[split]
    if split == "class_disjoint":
        train, val = class_disjoint_holdout(y, fraction, rng)
    else:
        train, val = stratified_holdout(y, fraction, rng)
        if len(val) == 0:
            raise ValueError(f"A validation hold-out (early_stopping or validation_fraction="
                             f"{fraction}) needs at least one class with 3 or more samples.")
        if scored_within:
            _check_scored_within(y, val, fraction)
    return train, val, split
