"""How the supervised linear learners validate early stopping: the held-out scores, the
rule that keeps the start, and the documentation of the three parameters involved."""

from __future__ import annotations

import math

import numpy as np
import torch

from .._training import n_held_out_classes
from .._utils import warn_user

__all__ = ["SIGNIFICANCE_Z", "STRATIFIED_SIGNIFICANCE_Z", "VALIDATION_KS",
           "VALIDATION_PARAMS_DOC", "choose_run", "fill_validation_params_doc", "improves",
           "knn_purity", "knn_sample_purities", "knn_sample_scores", "knn_score",
           "too_few_classes_to_hold_out", "unseen_query_scores", "warn_start_kept"]

#: k of the k-NN accuracies averaged by the early-stopping validation score.
VALIDATION_KS = (1, 10)
#: With class-disjoint validation, the learned metric replaces the start only when its mean
#: per-query Recall@1 gain exceeds this many standard errors (one-sided, about 2.5%).
SIGNIFICANCE_Z = 2.0
#: With stratified validation, the same rule on the per-sample k-NN scores; None: off, the
#: default (measured: with 1 or 2 the learners kept their start where learning helped, on
#: wine, breast cancer and digits; ``benchmarks/studies/bench_stratified_significance.py``).
STRATIFIED_SIGNIFICANCE_Z = None
#: The numpydoc entries of ``standardize``, ``early_stopping``, ``validation_fraction`` and
#: ``validation_split``, written once for ECAML and JRD: their class docstrings have a line
#: ``{validation_params}`` in their place, which :func:`fill_validation_params_doc` replaces
#: by this text.
VALIDATION_PARAMS_DOC = """\
    standardize : bool or "auto", default="auto"
        Learn on the features divided by their standard deviations (folded
        into ``components_``, so :meth:`transform` still takes raw input).
        ``"auto"``: when that gives the training samples a leave-one-out
        k-NN accuracy (k = 1 and 10, at most 2,000 samples) better than
        their raw features' by two standard errors of a paired test, as for
        features in different units (scikit-learn's wine and breast cancer);
        raw features otherwise (pixels, PCA coordinates, where standardising
        stretches the quiet features that carry little). The check reads no
        random numbers. See :doc:`/linear`, "Features in different units".
        With a ``StandardScaler`` before the learner both choices are the
        same.
    early_stopping : bool or "auto", default="auto"
        Adam solver only. Hold out a validation set (see
        ``validation_split``), train on the rest and score the start and
        each epoch on it; stop when that score has not improved by more than
        ``tol`` for ``max(10 epochs, 300 steps)``. The start (the PCA
        initialisation) is kept (``best_iteration_ = 0``) unless learning
        beats it on the held-out set: by more than ``tol`` with stratified
        validation, significantly with class-disjoint validation (a paired
        test of Recall@1 over the queries, 2 standard errors; on AT&T faces
        and digits, gains on a few held-out classes within that noise did not
        carry over to other unseen classes). Where the start already
        classifies every sample of a stratified hold-out right at k = 1 and
        10 (small, easy data: wine's 13 held-out samples), accuracy cannot
        rise, so the score adds the mean purity of the held-out samples'
        10 nearest neighbours (the fraction in their class), which learning
        can still raise: each sample scores its accuracy plus its purity,
        both in [0, 1] (``best_validation_score_`` is then above 1).
        Stratified validation then refits from the same start on *all* the
        data for the best epoch count (the latest among equal scores), so
        that tiny classes (AT&T: 7 faces a person) lose no training sample;
        class-disjoint validation
        keeps the model of the best epoch. ``"auto"``: on when the hold-out
        is possible: some class has at least 3 samples (stratified), or at
        least 2 classes are left for training (class-disjoint, with the
        default ``validation_fraction``). With class-disjoint validation and
        2 or 3 classes, too few for that, ``"auto"`` keeps the start
        (``best_iteration_ = 0``, with a warning): no gain on unseen classes
        can be measured, and trained on 3 classes the learners lost
        unseen-class Recall@1 against PCA in 8 of 10 splits (digits,
        OSULeaf); ``False`` trains anyway. The objectives
        over-fit the training classes (held-out accuracy falls with the
        epochs on USPS, unseen-class retrieval on AT&T faces); this guards
        against it.
    validation_fraction : float, default=None
        Fraction held out when early stopping is used: of each class
        (``None``: 0.1) for stratified validation, of the classes (``None``:
        0.2, at least 2 classes) for class-disjoint validation.
    validation_split : {"stratified", "class_disjoint"}, default="stratified"
        **The task the metric is for**, and how early stopping measures it.
        ``"stratified"``: k-NN classification of the *training* classes (a
        ``Pipeline`` with ``KNeighborsClassifier``); a fraction of each class
        is held out and scored by the mean 1-NN / 10-NN accuracy of the
        held-out samples against the training ones. ``"class_disjoint"``:
        retrieval or clustering of classes *never seen* in training; whole
        classes are held out and scored by the mean of Recall@1 and MAP@R
        among them (leave-one-out retrieval). Each guards the other task
        poorly: measured on class-disjoint halves of AT&T, COIL-20, USPS and
        digits, stratified validation let JRD lose up to 0.16 Recall@1
        against its PCA start (``benchmarks/studies/bench_linear_unseen.py``),
        and class-disjoint validation kept the PCA start in closed-set k-NN
        on AT&T and COIL-20 (:doc:`/linear`).
"""
_VALIDATION_PARAMS_PLACEHOLDER = "    {validation_params}\n"


def fill_validation_params_doc(cls):
    """Class decorator: replace the ``{validation_params}`` line of ``cls``'s docstring."""
    doc = cls.__doc__
    if doc is None:  # docstrings stripped (python -OO)
        return cls
    if doc.count(_VALIDATION_PARAMS_PLACEHOLDER) != 1:
        raise ValueError(f"{cls.__name__}'s docstring needs exactly one line "
                         f"{_VALIDATION_PARAMS_PLACEHOLDER.strip()!r}.")
    cls.__doc__ = doc.replace(_VALIDATION_PARAMS_PLACEHOLDER, VALIDATION_PARAMS_DOC)
    return cls


def improves(best, start, tol, paired=None):
    """Whether the best validation score beats the start's by more than ``tol``.

    With per-query differences (``paired``, best minus start: Recall@1 and AP@R
    columns of a class-disjoint hold-out, or per-sample k-NN scores of a
    stratified one), the mean Recall@1 gain must also exceed ``SIGNIFICANCE_Z``
    standard errors (the k-NN gain ``STRATIFIED_SIGNIFICANCE_Z``, off by
    default): the few classes
    a validation can hold out give a noisy score, and a gain within that
    noise, or in MAP@R only, did not carry over to other unseen classes (AT&T
    faces, digits).
    """
    if not math.isfinite(best) or not best > start + tol:
        return False
    if paired is None or len(paired) < 2:
        return True
    z = SIGNIFICANCE_Z if paired.ndim == 2 else STRATIFIED_SIGNIFICANCE_Z
    if paired.ndim == 2:
        paired = paired[:, 0]  # class-disjoint: Recall@1 (and AP@R, which it ignores)
    elif z is None:
        return True
    error = float(np.std(paired, ddof=1)) / math.sqrt(len(paired))
    return float(np.mean(paired)) > z * error


def too_few_classes_to_hold_out(y):
    """Whether ``y`` has too few classes for a class-disjoint hold-out: fewer than 4.

    The hold-out keeps 2 classes out (at least) and needs 2 to train. Without it no gain
    on classes never seen can be measured, and trained on 3 classes anyway, ECAML and JRD
    lost unseen-class Recall@1 against PCA in 8 of 10 class-disjoint splits (digits: 0.98
    to 0.61-0.88; OSULeaf; ``make_classification``;
    ``benchmarks/studies/bench_external.py --few-classes``).

    Examples
    --------
    >>> too_few_classes_to_hold_out([0, 0, 1, 1, 2, 2]), too_few_classes_to_hold_out(range(4))
    (True, False)
    """
    n_classes = len(np.unique(np.asarray(y)))
    return n_classes - n_held_out_classes(n_classes) < 2


def warn_start_kept(learner, n_classes):
    """Tell the user that a fit for unseen classes kept its start, and why (at their line)."""
    warn_user(f"{learner} kept its start (best_iteration_=0): a class-disjoint hold-out needs "
              f"2 classes held out and 2 to train, and y has {n_classes} classes, so no gain "
              "on classes never seen can be measured; trained on so few classes, the learners "
              "lost unseen-class Recall@1 against PCA (digits, OSULeaf: see the linear "
              "guide). early_stopping=False trains anyway.")


def unseen_query_scores(L, X_val, y_val, block=512):
    """Per-query Recall@1 hit and AP@R among held-out classes under ``L``, shape (n, 2).

    Leave-one-out retrieval among the held-out samples (classes never trained
    on). AP@R ranks all ``R`` same-class neighbours of a query, so their mean
    moves before Recall@1 saturates on a small held-out set (it chooses the
    epoch). Per query, so that an epoch's Recall@1 can be compared with the
    start's in a paired test (it decides whether to leave the start).
    """
    with torch.no_grad():
        Z = X_val @ L.T
        y = torch.as_tensor(y_val)
        sq = (Z * Z).sum(1)
        n_same = torch.bincount(y)[y] - 1
        out = []
        for i in range(0, len(y), block):
            rows = torch.arange(i, min(i + block, len(y)))
            D = sq[rows, None] - 2.0 * Z[rows] @ Z.T + sq[None, :]
            D[torch.arange(len(rows)), rows] = math.inf  # not its own neighbour
            R = n_same[rows]
            nearest = torch.topk(D, int(R.max()), dim=1, largest=False).indices
            ranks = torch.arange(1, nearest.shape[1] + 1)
            relevant = ((y[nearest] == y[rows, None]) & (ranks[None, :] <= R[:, None])).double()
            ap = (torch.cumsum(relevant, 1) / ranks * relevant).sum(1) / R
            out.append(torch.stack([relevant[:, 0], ap], dim=1))
    return torch.cat(out).numpy()


def knn_score(L, X_train, X_val, y_train, y_val):
    """Mean k-NN accuracy (k in ``VALIDATION_KS``) of the held-out samples under ``L``.

    Averaging the 1-NN and 10-NN accuracies gives a smoother signal than the
    1-NN accuracy alone, which saturates early on small data sets while the
    10-NN accuracy still improves. The search is skdml's exact neighbour engine;
    the mean of :func:`knn_sample_scores`, which the validation runs record.
    """
    return float(knn_sample_scores(L, X_train, X_val, y_train, y_val).mean())


def knn_sample_scores(L, X_train, X_val, y_train, y_val, purity=False):
    """Per held-out sample, the mean over ``VALIDATION_KS`` of its k-NN vote being right.

    Their mean is :func:`knn_score` (the same exact neighbours, votes and ties: the
    smallest label wins); per sample, so that an epoch can be compared with the start in
    a paired test. ``purity``: plus each sample's :func:`knn_sample_purities`, read from
    the same neighbours (the score of a hold-out the start classifies perfectly).
    """
    from ..metrics import nearest_neighbors
    from ..metrics._neighbors import knn_votes

    with torch.no_grad():
        Z_train, Z_val = (X_train @ L.T).numpy(), (X_val @ L.T).numpy()
    classes, codes = np.unique(np.asarray(y_train), return_inverse=True)
    truth = np.searchsorted(classes, np.asarray(y_val))
    truth = np.where(classes[np.minimum(truth, len(classes) - 1)] == np.asarray(y_val), truth, -1)
    ks = [min(k, len(y_train)) for k in VALIDATION_KS]
    labels = codes[nearest_neighbors(Z_val, max(ks), X_ref=Z_train)]
    scores = knn_votes(labels, truth, ks, len(classes)).mean(axis=1)
    if purity:  # the max(VALIDATION_KS) nearest, as knn_sample_purities reads them
        scores = scores + np.mean(labels == truth[:, None], axis=1)
    return scores


def knn_purity(L, X_train, X_val, y_train, y_val, k=max(VALIDATION_KS)):
    """Mean fraction of each held-out sample's ``k`` nearest training samples in its class.

    The finer-grained form of the k-NN score: it still moves when the accuracies have
    saturated on a small hold-out, so it breaks their ties (two candidate losses with the
    same held-out accuracy: the one whose neighbourhoods are purer is kept). The mean of
    :func:`knn_sample_purities`.
    """
    return float(knn_sample_purities(L, X_train, X_val, y_train, y_val, k).mean())


def knn_sample_purities(L, X_train, X_val, y_train, y_val, k=max(VALIDATION_KS)):
    """Per held-out sample, the fraction of its ``k`` nearest training samples in its class."""
    from ..metrics import nearest_neighbors

    with torch.no_grad():
        Z_train, Z_val = (X_train @ L.T).numpy(), (X_val @ L.T).numpy()
    nearest = nearest_neighbors(Z_val, min(k, len(y_train)), X_ref=Z_train)
    return np.mean(np.asarray(y_train)[nearest] == np.asarray(y_val)[:, None], axis=1)


def choose_run(runs):
    """The validation run whose model ``fit`` returns (or refits), among the candidates'.

    Only runs whose best epoch beat the start compete (``run["best"] > 0``): the best
    held-out score wins; among equal scores, the purer neighbourhoods (``"purity"``);
    then the order of the candidates. When no run beat the start, the first run, which
    holds the start.

    Examples
    --------
    >>> runs = [{"candidate": "lmnn", "best": 40, "best_score": 0.95, "purity": 0.70},
    ...         {"candidate": "binomial", "best": 90, "best_score": 0.95, "purity": 0.80}]
    >>> choose_run(runs)["candidate"]
    'binomial'
    >>> choose_run([dict(r, best=0) for r in runs])["candidate"]
    'lmnn'
    """
    improving = [run for run in runs if run["best"] > 0]
    if not improving:
        return runs[0]
    return max(improving, key=lambda run: (run["best_score"], run["purity"]))
