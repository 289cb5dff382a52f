"""N-way K-shot episode accuracy: the few-shot protocol of Prototypical Networks on embeddings."""

from __future__ import annotations

import math
from numbers import Integral

import numpy as np
import torch
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import StrOptions, validate_params

from .._utils import thread_limits, warn_user
from ._exact import centre_on_median, normalise_rows
from ._validation import check_embeddings, check_labels
from .._utils._params import StrictInterval, positive_int

__all__ = ["few_shot_accuracy"]

#: Float64 elements of one chunk of gathered episode embeddings (32 MiB).
_CHUNK = 2**22
#: The normal quantile of a two-sided 95 % interval, as the few-shot papers round it.
_Z95 = 1.96


def sample_episodes(y_enc, eligible, n_way, n_shot, n_queries, n_episodes, rng):
    """Sample indices ``(n_episodes, n_way, n_shot + n_queries)`` (support first).

    For each episode: ``rng.choice(eligible, n_way, replace=False)`` picks the
    classes (codes of ``y_enc``), then for each picked class in that order
    ``rng.choice(members, n_shot + n_queries, replace=False)`` picks its samples
    (``members`` in increasing index order); the first ``n_shot`` are the support.
    """
    members = [np.flatnonzero(y_enc == c) for c in range(int(y_enc.max()) + 1)]
    out = np.empty((n_episodes, n_way, n_shot + n_queries), dtype=np.int64)
    for e in range(n_episodes):
        classes = rng.choice(eligible, n_way, replace=False)
        for w, c in enumerate(classes):
            out[e, w] = rng.choice(members[c], n_shot + n_queries, replace=False)
    return out


def _episode_accuracies(X, episodes, n_shot, metric):
    """Fraction of the queries of each episode assigned to their own class's prototype.

    ``X`` is float64 (rows L2-normalised for ``"cosine"``); batched in torch on
    the host, a chunk of episodes at a time.
    """
    n_episodes, n_way, per_class = episodes.shape
    d = X.shape[1]
    n_q = n_way * (per_class - n_shot)
    # euclidean scores from the differences: n_way of them per query and coordinate
    step = max(1, _CHUNK // (n_way * per_class * d * (n_way if metric == "euclidean" else 1)))
    truth = torch.arange(n_way).repeat_interleave(per_class - n_shot)
    X, episodes = torch.from_numpy(X), torch.from_numpy(episodes)
    acc = np.empty(n_episodes)
    with thread_limits(), torch.inference_mode():
        for start in range(0, n_episodes, step):
            Z = X[episodes[start:start + step]]  # (e, n_way, per_class, d)
            prototypes = Z[:, :, :n_shot].mean(dim=2)  # (e, n_way, d)
            queries = Z[:, :, n_shot:].reshape(Z.shape[0], n_q, d)
            if metric == "euclidean":  # ||q - p||^2 from the differences: the expansion
                # ||p||^2 - 2 q.p cancelled classes far apart (groups at +-1e8, gaps of 1)
                score = (queries[:, :, None, :] - prototypes[:, None, :, :]).square().sum(dim=3)
            else:
                norm = torch.linalg.vector_norm(prototypes, dim=2, keepdim=True)
                unit = prototypes / torch.where(norm > 0, norm, torch.ones_like(norm))
                score = -torch.bmm(queries, unit.transpose(1, 2))
            hits = score.argmin(dim=2) == truth
            acc[start:start + step] = hits.double().mean(dim=1).numpy()
    return acc


@validate_params(
    {
        "X": ["array-like"],
        "y": ["array-like"],
        "n_way": [StrictInterval(Integral, 2, None, closed="left")],
        "n_shot": [positive_int()],
        "n_queries": [positive_int()],
        "n_episodes": [positive_int()],
        "metric": [StrOptions({"euclidean", "cosine"})],
        "random_state": ["random_state"],
    },
    prefer_skip_nested_validation=True,
)
def few_shot_accuracy(X, y, *, n_way=5, n_shot=1, n_queries=15, n_episodes=600,
                      metric="euclidean", random_state=None):
    """Mean N-way K-shot episode accuracy of nearest-prototype classification, with a 95% CI.

    Each episode draws ``n_way`` classes and, from each, ``n_shot`` support and
    ``n_queries`` query samples (without replacement). A class's prototype is
    the mean of its support embeddings; each query is assigned to the nearest
    prototype. The episode's accuracy is the fraction of its
    ``n_way * n_queries`` queries assigned to their own class. This is the
    evaluation of Prototypical Networks (Snell et al., 2017) and the standard
    way to report few-shot results on unseen classes (e.g. Omniglot 5-way and
    20-way, 1-shot and 5-shot): embed the test classes with a fitted learner,
    then score the embedding.

    Parameters
    ----------
    X : array-like or torch.Tensor of shape (n_samples, n_features)
        Embeddings (e.g. ``estimator.transform`` of the unseen classes).
    y : array-like of shape (n_samples,)
        Class labels (integers or strings).
    n_way : int, default=5
        Classes per episode; at most the number of classes that have
        ``n_shot + n_queries`` samples.
    n_shot : int, default=1
        Support samples per class (K).
    n_queries : int, default=15
        Query samples per class and episode.
    n_episodes : int, default=600
        Episodes averaged (600 in Prototypical Networks' tables).
    metric : {"euclidean", "cosine"}, default="euclidean"
        ``"euclidean"``: nearest prototype in squared Euclidean distance (as in
        Prototypical Networks). ``"cosine"``: the embeddings are L2-normalised
        first (as the cosine scorers do), so a prototype is the mean of the
        *unit* support embeddings, and each query goes to the prototype of
        largest cosine similarity.
    random_state : int, RandomState instance or None, default=None
        Seeds the episodes; the same seed gives the same episodes for any
        embedding of the same labels, so two learners can be compared on
        identical episodes.

    Returns
    -------
    accuracy : float
        Mean accuracy over the episodes, in ``[0, 1]``.
    ci95 : float
        Half-width of the 95% confidence interval of the mean,
        ``1.96 * std / sqrt(n_episodes)`` (sample standard deviation of the
        episode accuracies); ``nan`` for a single episode. Report
        ``accuracy +- ci95``.

    Raises
    ------
    ValueError
        If fewer than ``n_way`` classes hold ``n_shot + n_queries`` samples.

    Warns
    -----
    UserWarning
        When some classes hold fewer than ``n_shot + n_queries`` samples: they
        are left out of every episode (the message says how many).

    See Also
    --------
    knn_accuracy : k-NN accuracy against a fixed labelled gallery.
    recall_at_k : retrieval score of the same embedding.

    Notes
    -----
    The episodes are drawn from ``check_random_state(random_state)`` as
    follows, so that they can be reproduced elsewhere: classes are the sorted
    unique labels that hold at least ``n_shot + n_queries`` samples; for each
    episode ``rng.choice(classes, n_way, replace=False)``, then for each chosen
    class in that order ``rng.choice(members, n_shot + n_queries, replace=False)``
    (``members`` are the sample indices of the class in increasing order); the
    first ``n_shot`` drawn are the support, the rest the queries. Distances are
    computed in float64 (Euclidean: after centring on the coordinate-wise
    median and an exact power-of-two scaling, so that offsets and extreme
    scales give the same answer); a query whose float64 distances to two
    prototypes are equal goes to the one drawn first. (The prototypes are means
    and the distances are rounded: an exact tie of real numbers may come out
    either way, unlike the certified neighbour search of :mod:`skdml.metrics`.)

    The published Omniglot figures use the class split of Vinyals et al.
    (2016) and 28x28 images, with rotated characters as extra classes; a
    different split of the characters gives numbers of the same kind, not
    the same numbers.

    Examples
    --------
    >>> import numpy as np
    >>> from skdml.metrics import few_shot_accuracy
    >>> rng = np.random.RandomState(0)
    >>> y = np.repeat(np.arange(10), 20)
    >>> X = rng.randn(200, 8) + 4 * np.eye(10, 8)[y]
    >>> accuracy, ci95 = few_shot_accuracy(X, y, n_way=5, n_shot=5, n_episodes=100,
    ...                                    random_state=0)
    >>> round(accuracy, 3), round(ci95, 3)
    (0.913, 0.015)
    """
    X = check_embeddings(X, "X")
    y = check_labels(y, X.shape[0], "y", "X")
    classes, y_enc = np.unique(y, return_inverse=True)
    eligible = _eligible_classes(y_enc, classes.size, n_way, n_shot + n_queries)
    rng = check_random_state(random_state)
    episodes = sample_episodes(y_enc, eligible, n_way, n_shot, n_queries, n_episodes, rng)
    acc = _episode_accuracies(_as_float64_for(X, metric), episodes, n_shot, metric)
    return _mean_and_ci95(acc)


def _eligible_classes(y_enc, n_classes, n_way, per_class):
    """The codes of the classes with ``per_class`` samples; too few of them raise, some warn."""
    counts = np.bincount(y_enc, minlength=n_classes)
    eligible = np.flatnonzero(counts >= per_class)
    if eligible.size < n_way:
        raise ValueError(
            f"n_way={n_way} needs {n_way} classes with at least n_shot + n_queries = "
            f"{per_class} samples each, but y has {eligible.size} such classes (of "
            f"{n_classes}; the largest holds {counts.max()} samples). Lower n_way, "
            "n_shot or n_queries.")
    if eligible.size < n_classes:
        warn_user(
            f"{n_classes - eligible.size} of {n_classes} classes hold fewer than "
            f"n_shot + n_queries = {per_class} samples and are left out of every episode.")
    return eligible


def _as_float64_for(X, metric):
    """``X`` in float64, ready for :func:`_episode_accuracies` with ``metric``.

    Cosine: unit rows. Euclidean: a translation and a power of two change no
    argmin, so the coordinates are centred on their median and scaled by an exact
    power of two (:func:`~skdml.metrics._exact.centre_on_median`).
    """
    if metric == "cosine":
        return normalise_rows(np.array(X, dtype=np.float64))
    return centre_on_median(X)


def _mean_and_ci95(acc):
    """The mean episode accuracy and the half-width of its 95 % interval (``nan`` for one)."""
    mean = float(np.mean(acc))
    ci95 = float(_Z95 * np.std(acc, ddof=1) / math.sqrt(len(acc))) if len(acc) > 1 \
        else float("nan")
    return mean, ci95
