"""Scorer factories: ``scoring=`` callables that embed a fold, then score the embedding."""

from __future__ import annotations

from numbers import Integral

from sklearn.utils._param_validation import Interval, StrOptions, validate_params

from ._clustering import clustering_f1_score, nmi_score
from ._retrieval import map_at_r, r_precision, recall_at_k
from .._utils._params import positive_int
from .._utils._torch import DEVICE_CONSTRAINT

__all__ = ["NotATransformerError", "recall_at_k_scorer", "map_at_r_scorer",
           "r_precision_scorer", "nmi_scorer", "clustering_f1_scorer"]

_SEARCH = {
    "metric": [StrOptions({"euclidean", "cosine"})],
    "batch_size": [positive_int(), None],
    "device": DEVICE_CONSTRAINT,
}
_KMEANS = {"random_state": ["random_state"],
           "n_init": [positive_int()]}


class NotATransformerError(TypeError, ValueError):
    """The estimator given to a skdml scorer cannot embed data (it has no ``transform``)."""


class _EmbeddingScorer:
    """``scorer(estimator, X, y)``: embed X with ``estimator.transform`` then score it."""

    def __init__(self, score_func, name, **kwargs):
        self._score_func = score_func
        self._name = name
        self._kwargs = kwargs

    def __call__(self, estimator, X, y=None):
        if not hasattr(estimator, "transform"):
            raise NotATransformerError(
                f"The {self._name} scorer scores an embedding, so it needs an estimator "
                f"with a transform method; {type(estimator).__name__} has none (e.g. a "
                "Pipeline that ends in a classifier). Score the transformer part instead."
            )
        if y is None:
            raise ValueError(f"The {self._name} scorer needs the labels y of the fold.")
        return self._score_func(estimator.transform(X), y, **self._kwargs)

    def __repr__(self):
        args = ", ".join(f"{key}={value!r}" for key, value in self._kwargs.items())
        return f"{self._name}_scorer({args})"


@validate_params({"k": [Interval(Integral, 1, None, closed="left")], **_SEARCH},
                 prefer_skip_nested_validation=True)
def recall_at_k_scorer(k=1, *, metric="euclidean", batch_size=None, device=None):
    """Scorer computing :func:`recall_at_k` of the fold's embedding.

    Parameters
    ----------
    k : int, default=1
        Neighbourhood size (a single int: a scorer returns one number).
    metric : {"euclidean", "cosine"}, default="euclidean"
        Distance used to rank neighbours.
    batch_size : int, default=None
        Queries per block (see :func:`recall_at_k`).
    device : str or torch.device, default=None
        Where to compute; ``None`` uses CUDA when available.

    Returns
    -------
    scorer : callable
        ``scorer(estimator, X, y)`` returns ``recall_at_k(estimator.transform(X), y, k)``:
        usable as ``scoring=`` in ``cross_val_score`` and ``GridSearchCV``
        (greater is better). The estimator must have ``transform``.

    Examples
    --------
    Zero-shot evaluation: grouping the folds by class keeps test classes out
    of the fit.

    >>> from sklearn.datasets import load_digits
    >>> from sklearn.decomposition import PCA
    >>> from sklearn.model_selection import GroupKFold, cross_val_score
    >>> from skdml.metrics import recall_at_k_scorer
    >>> X, y = load_digits(return_X_y=True)
    >>> scores = cross_val_score(PCA(16), X, y, groups=y, cv=GroupKFold(2),
    ...                          scoring=recall_at_k_scorer(k=1))
    >>> scores.shape, bool(scores.min() > 0.8)
    ((2,), True)
    """
    if isinstance(k, bool):
        raise ValueError(f"k must be a positive int for a scorer, got {k!r}.")
    return _EmbeddingScorer(recall_at_k, "recall_at_k", k=int(k), metric=metric,
                            batch_size=batch_size, device=device)


@validate_params(_SEARCH, prefer_skip_nested_validation=True)
def map_at_r_scorer(*, metric="euclidean", batch_size=None, device=None):
    """Scorer computing :func:`map_at_r` of the fold's embedding.

    Parameters
    ----------
    metric : {"euclidean", "cosine"}, default="euclidean"
        Distance used to rank neighbours.
    batch_size : int, default=None
        Queries per block.
    device : str or torch.device, default=None
        Where to compute; ``None`` uses CUDA when available.

    Returns
    -------
    scorer : callable
        ``scorer(estimator, X, y)`` returning ``map_at_r(estimator.transform(X), y)``.

    Examples
    --------
    >>> from sklearn.datasets import load_iris
    >>> from sklearn.decomposition import PCA
    >>> from skdml.metrics import map_at_r_scorer
    >>> X, y = load_iris(return_X_y=True)
    >>> round(map_at_r_scorer()(PCA(2).fit(X), X, y), 2)
    0.77
    """
    return _EmbeddingScorer(map_at_r, "map_at_r", metric=metric, batch_size=batch_size,
                            device=device)


@validate_params(_SEARCH, prefer_skip_nested_validation=True)
def r_precision_scorer(*, metric="euclidean", batch_size=None, device=None):
    """Scorer computing :func:`r_precision` of the fold's embedding.

    Parameters
    ----------
    metric : {"euclidean", "cosine"}, default="euclidean"
        Distance used to rank neighbours.
    batch_size : int, default=None
        Queries per block.
    device : str or torch.device, default=None
        Where to compute; ``None`` uses CUDA when available.

    Returns
    -------
    scorer : callable
        ``scorer(estimator, X, y)`` returning ``r_precision(estimator.transform(X), y)``.

    Examples
    --------
    >>> from sklearn.datasets import load_iris
    >>> from sklearn.decomposition import PCA
    >>> from skdml.metrics import r_precision_scorer
    >>> X, y = load_iris(return_X_y=True)
    >>> 0.5 < r_precision_scorer()(PCA(2).fit(X), X, y) <= 1.0
    True
    """
    return _EmbeddingScorer(r_precision, "r_precision", metric=metric, batch_size=batch_size,
                            device=device)


@validate_params(_KMEANS, prefer_skip_nested_validation=True)
def nmi_scorer(*, random_state=0, n_init=1):
    """Scorer computing :func:`nmi_score` of the fold's embedding.

    Parameters
    ----------
    random_state : int, RandomState instance or None, default=0
        Seed of k-means (fixed by default so that every candidate of a grid
        search is scored with the same k-means seed).
    n_init : int, default=1
        Number of k-means++ initialisations.

    Returns
    -------
    scorer : callable
        ``scorer(estimator, X, y)`` returning ``nmi_score(estimator.transform(X), y)``.

    Examples
    --------
    >>> from sklearn.datasets import load_iris
    >>> from sklearn.decomposition import PCA
    >>> from skdml.metrics import nmi_scorer
    >>> X, y = load_iris(return_X_y=True)
    >>> 0.5 < nmi_scorer()(PCA(2).fit(X), X, y) <= 1.0
    True
    """
    return _EmbeddingScorer(nmi_score, "nmi", random_state=random_state, n_init=n_init)


@validate_params(_KMEANS, prefer_skip_nested_validation=True)
def clustering_f1_scorer(*, random_state=0, n_init=1):
    """Scorer computing :func:`clustering_f1_score` of the fold's embedding.

    Parameters
    ----------
    random_state : int, RandomState instance or None, default=0
        Seed of k-means (fixed by default, see :func:`nmi_scorer`).
    n_init : int, default=1
        Number of k-means++ initialisations.

    Returns
    -------
    scorer : callable
        ``scorer(estimator, X, y)`` returning
        ``clustering_f1_score(estimator.transform(X), y)``.

    Examples
    --------
    >>> from sklearn.datasets import load_iris
    >>> from sklearn.decomposition import PCA
    >>> from skdml.metrics import clustering_f1_scorer
    >>> X, y = load_iris(return_X_y=True)
    >>> 0.5 < clustering_f1_scorer()(PCA(2).fit(X), X, y) <= 1.0
    True
    """
    return _EmbeddingScorer(clustering_f1_score, "clustering_f1", random_state=random_state,
                            n_init=n_init)
