"""Retrieval scores: Recall@K, MAP@R and R-precision from one exact neighbour search."""

from __future__ import annotations

import math
import numbers
from numbers import Integral

import numpy as np
from sklearn.utils._param_validation import Interval, StrOptions, validate_params

from ._neighbors import neighbor_blocks
from ._validation import check_k, prepare_retrieval
from .._utils._params import positive_int
from .._utils._torch import DEVICE_CONSTRAINT

__all__ = ["recall_at_k", "map_at_r", "r_precision", "retrieval_scores"]

_NO_RECALL = object()
_NEVER = np.iinfo(np.int64).max

#: Constraints shared by the three scores (``validate_params``).
_CONSTRAINTS = {
    "X": ["array-like"],
    "y": ["array-like"],
    "metric": [StrOptions({"euclidean", "cosine"})],
    "X_ref": ["array-like", None],
    "y_ref": ["array-like", None],
    "batch_size": [positive_int(), None],
    "device": DEVICE_CONSTRAINT,
}
_K = {"k": [Interval(Integral, 1, None, closed="left"), "array-like"]}


def _retrieval(X, y, ks, *, want_map, metric, X_ref, y_ref, batch_size, device):
    """Shared driver: returns :func:`reduce_query_scores`'s dict."""
    return reduce_query_scores([query_scores(
        X, y, ks, want_map=want_map, metric=metric, X_ref=X_ref, y_ref=y_ref,
        batch_size=batch_size, device=device)])


def reduce_query_scores(parts):
    """``{"recall_at_k": {k: recall}, "map_at_r": float, "r_precision": float}`` of shards.

    ``parts`` are :func:`query_scores` results of disjoint query ranges, in any
    order; the means are taken over the queries in their original order, so the
    result is the one of a single call, bit for bit. MAP@R and R-precision are
    ``None`` when the parts were computed without ``want_map``.
    """
    parts = sorted(parts, key=lambda p: p["rows"][0])
    ks, want_map = parts[0]["ks"], parts[0]["want_map"]
    first_hit, ap, rp, not_lone = (np.concatenate([p[key] for p in parts])
                                   for key in ("first_hit", "ap", "rp", "not_lone"))
    recalls = {k: float(np.mean(first_hit[not_lone] < k)) for k in ks}
    # the correctly rounded mean (math.fsum): the same bits in any order of the queries (a
    # pairwise sum in query order moved the last bit when the rows were permuted)
    n_scored = int(np.count_nonzero(not_lone))
    map_r = math.fsum(ap[not_lone]) / n_scored if want_map else None
    r_prec = math.fsum(rp[not_lone]) / n_scored if want_map else None
    return {"recall_at_k": recalls, "map_at_r": map_r, "r_precision": r_prec}


def query_scores(X, y, ks, *, want_map, metric, X_ref, y_ref, batch_size, device, rows=None):
    """Per-query retrieval results of the queries ``rows = (start, stop)`` (all by default).

    Each query of the range is searched against the *whole* reference set, so a
    range can be scored by any process that holds the data (a Dask worker, a DDP
    rank); :func:`reduce_query_scores` combines the ranges.

    ``ks`` is the user's ``k`` (validated here) or ``_NO_RECALL`` for MAP@R alone.
    The engine is asked for what the scores read: the relevance ("same label as
    the query") of the first ``max(k)`` neighbours, exact at every cut ``k``, and
    for MAP@R (and R-precision, from the same sequence) the exact relevance
    sequence of the first ``R_q``.
    """
    X, yq, R, yr, exclude_self, n_cand, counts = prepare_retrieval(X, y, X_ref, y_ref)
    what = "the other samples of X" if exclude_self else "the samples of X_ref"
    ks = [] if ks is _NO_RECALL else check_k(ks, n_cand, what)[0]
    # R_q: number of relevant references of each query.
    relevant = counts[yq] - int(exclude_self)
    not_lone = relevant > 0
    if not not_lone.any():
        raise ValueError(
            "No query has a reference with the same label (every class has a single "
            "sample, or no query class appears in y_ref): the scores are undefined."
        )
    depth = np.full(yq.shape[0], max(ks) if ks else 0, dtype=np.int64)
    order_depth = relevant if want_map else np.zeros_like(depth)
    if want_map:
        depth = np.maximum(depth, relevant)
    depth[~not_lone] = 0  # a lone query is left out: nothing to search
    start_row, stop_row = (0, yq.shape[0]) if rows is None else rows
    depth[:start_row] = 0  # queries of other shards: nothing to search here
    depth[stop_row:] = 0
    first_hit = np.full(yq.shape[0], _NEVER, dtype=np.int64)
    ap = np.zeros(yq.shape[0], dtype=np.float64)
    rp = np.zeros(yq.shape[0], dtype=np.float64)

    codes_r, codes_q = yr.astype(np.int32), yq.astype(np.int32)  # label codes: < n_samples
    inverse_rank = 1.0 / np.arange(1, int(depth.max()) + 1)  # 1 / i, the same in every block

    def score(start, stop, nbrs):  # in the thread that ranked the block
        n_rows, k = nbrs.shape
        if k == 0:
            return
        same = codes_r[nbrs] == codes_q[start:stop, None]
        if ks:
            pos = np.argmax(same, axis=1)
            first_hit[start:stop] = np.where(same.any(axis=1), pos, _NEVER)
        if want_map:
            r = relevant[start:stop]
            same &= np.arange(k)[None, :] < r[:, None]  # relevant, among the first R_q
            hits = np.cumsum(same, axis=1, dtype=np.int32)  # relevant up to each rank
            rp[start:stop] = hits[:, -1] / np.maximum(r, 1)
            hits *= same  # AP@R = (1/R) sum over relevant ranks i of hits(i) / i
            flat = np.empty(n_rows * k + 1)  # + 1: a segment may end at the last term
            flat[-1] = 0.0
            np.multiply(hits, inverse_rank[:k], out=flat[:-1].reshape(n_rows, k))
            # each query's first R_q terms summed as one segment: the sum reads the query's
            # own terms only, not the block's width (as a row sum's pairwise rounding does)
            # nor its other rows (as a BLAS product's), so each query's AP has the same bits
            # in any block or shard
            bounds = np.empty(2 * n_rows, dtype=np.int64)
            bounds[0::2] = np.arange(n_rows) * k
            bounds[1::2] = bounds[0::2] + np.clip(r, 1, k)
            ap[start:stop] = np.add.reduceat(flat, bounds)[0::2] / np.maximum(r, 1)

    for _ in neighbor_blocks(X, R, depth, exclude_self=exclude_self, metric=metric,
                             batch_size=batch_size, device=device, ref_keys=yr, query_keys=yq,
                             order_depth=order_depth, cuts=ks, reduce=score):
        pass
    part = slice(start_row, stop_row)
    return {"rows": (start_row, stop_row), "ks": ks, "want_map": want_map,
            "first_hit": first_hit[part], "ap": ap[part], "rp": rp[part],
            "not_lone": not_lone[part]}


@validate_params({**_CONSTRAINTS, **_K}, prefer_skip_nested_validation=True)
def recall_at_k(X, y, k=1, *, metric="euclidean", X_ref=None, y_ref=None, batch_size=None,
                device=None):
    """Recall@K: fraction of queries with a same-label point among their K nearest.

    The retrieval metric of Oh Song et al. (2016), used in the ECAML paper. Each
    query scores 1 if at least one of its ``k`` nearest *other* points shares its
    label, else 0; the score is the mean over queries. The search is exact,
    blockwise in torch (on the GPU when one is present), and never holds an
    ``n_queries x n_references`` matrix.

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
        Embeddings of the queries (and of the references when ``X_ref`` is None).
    y : array-like of shape (n_samples,)
        Labels of ``X`` (integers or strings; compared as labels).
    k : int or list of int, default=1
        Neighbourhood size(s). Each must be at most the number of candidate
        neighbours (``n_samples - 1``, or ``n_ref`` with ``X_ref``).
    metric : {"euclidean", "cosine"}, default="euclidean"
        Distance used to rank neighbours. ``"cosine"`` ranks by cosine
        similarity (rows are L2-normalised; an all-zero row has similarity 0 to
        everything).
    X_ref : array-like of shape (n_ref, n_features), default=None
        Gallery to search (query/gallery form, e.g. In-Shop). When given, no
        point is excluded from the search. Requires ``y_ref``.
    y_ref : array-like of shape (n_ref,), default=None
        Labels of ``X_ref``.
    batch_size : int, default=None
        Queries per block. ``None`` sizes blocks so that a block's distances
        take about 256 MiB.
    device : str or torch.device, default=None
        Where to compute; ``None`` or ``"auto"`` uses CUDA when available.

    Returns
    -------
    recall : float or dict
        A float for an int ``k``; a dict ``{k: recall}`` for a list of ``k``.

    Raises
    ------
    ValueError
        On NaN/inf, empty or non-2-D embeddings, mismatched lengths, a single
        class, ``k`` larger than the number of candidates, or when no query has
        a same-label reference.

    See Also
    --------
    map_at_r : MAP@R, which also rewards the order of the relevant neighbours.
    retrieval_scores : Recall@K and MAP@R from a single neighbour search.
    recall_at_k_scorer : This score as a ``scoring=`` callable.

    Notes
    -----
    The query itself is excluded by index, so an exact duplicate of a query
    counts as a neighbour. The ranking is that of a float64 brute force for any
    finite input (large offsets, outliers, scales from 1e-150 to 1e150): float32
    values certified by error bounds, float64 where they cannot decide (see
    :mod:`skdml.metrics`). Ties in distance are broken in favour of the
    reference with the lower index. Queries without any same-label reference
    (singleton classes) are left out of the mean, as in pytorch-metric-learning;
    Recall@1 then equals its ``precision_at_1``.

    Time is ``O(n_queries x n_ref x n_features)``; memory is
    ``O((n_queries + n_ref) x n_features)`` plus one block of about 256 MiB.

    References
    ----------
    H. Oh Song, Y. Xiang, S. Jegelka, S. Savarese, "Deep Metric Learning via
    Lifted Structured Feature Embedding", CVPR 2016.

    Examples
    --------
    >>> import numpy as np
    >>> from skdml.metrics import recall_at_k
    >>> X = np.array([[0.0], [0.1], [1.0], [1.2], [5.0], [5.1]])
    >>> y = np.array([0, 0, 1, 1, 2, 0])
    >>> recall_at_k(X, y, k=1)  # the lone class-2 query is left out
    0.8
    """
    recalls = _retrieval(X, y, k, want_map=False, metric=metric, X_ref=X_ref, y_ref=y_ref,
                         batch_size=batch_size, device=device)["recall_at_k"]
    single = isinstance(k, numbers.Integral) and not isinstance(k, bool)
    return recalls[int(k)] if single else recalls


@validate_params(_CONSTRAINTS, prefer_skip_nested_validation=True)
def map_at_r(X, y, *, metric="euclidean", X_ref=None, y_ref=None, batch_size=None,
             device=None):
    """MAP@R: mean average precision over the first R neighbours of each query.

    Defined by Musgrave, Belongie and Lim (2020). For a query with ``R``
    same-label references, ``AP@R = (1/R) * sum_{i=1..R} P(i) * rel(i)``, where
    ``rel(i)`` is 1 if the i-th nearest reference shares the label and ``P(i)``
    is the precision among the first ``i`` neighbours. MAP@R is the mean over
    queries. It is 1 only when every query's R nearest neighbours are exactly
    its R same-label references.

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
        Embeddings of the queries (and of the references when ``X_ref`` is None).
    y : array-like of shape (n_samples,)
        Labels of ``X``.
    metric : {"euclidean", "cosine"}, default="euclidean"
        Distance used to rank neighbours.
    X_ref : array-like of shape (n_ref, n_features), default=None
        Gallery to search; when given nothing is excluded. Requires ``y_ref``.
    y_ref : array-like of shape (n_ref,), default=None
        Labels of ``X_ref``.
    batch_size : int, default=None
        Queries per block; ``None`` sizes blocks from a 256 MiB budget.
    device : str or torch.device, default=None
        Where to compute; ``None`` or ``"auto"`` uses CUDA when available.

    Returns
    -------
    score : float
        MAP@R in [0, 1].

    Raises
    ------
    ValueError
        On bad embeddings or labels (see :func:`recall_at_k`), or when no query
        has a same-label reference.

    See Also
    --------
    recall_at_k : Recall@K.
    retrieval_scores : Recall@K and MAP@R from a single neighbour search.

    Notes
    -----
    ``R`` excludes the query itself (without ``X_ref``). Queries with ``R = 0``
    (classes with a single sample) are left out of the mean, as in
    pytorch-metric-learning's ``mean_average_precision_at_r``, which this
    function matches. The search needs, per query block, the ``max R``
    nearest references, so its cost grows with the largest class. The relevance
    sequence of the first ``R`` neighbours is exact for any finite input (see
    :func:`recall_at_k`).

    References
    ----------
    K. Musgrave, S. Belongie, S.-N. Lim, "A Metric Learning Reality Check",
    ECCV 2020.

    Examples
    --------
    >>> import numpy as np
    >>> from skdml.metrics import map_at_r
    >>> X = np.array([[0.0], [0.1], [0.3], [1.0], [1.1]])
    >>> y = np.array([0, 0, 1, 0, 1])
    >>> round(map_at_r(X, y), 4)
    0.2
    """
    return _retrieval(X, y, _NO_RECALL, want_map=True, metric=metric, X_ref=X_ref,
                      y_ref=y_ref, batch_size=batch_size, device=device)["map_at_r"]


@validate_params(_CONSTRAINTS, prefer_skip_nested_validation=True)
def r_precision(X, y, *, metric="euclidean", X_ref=None, y_ref=None, batch_size=None,
                device=None):
    """R-precision: the fraction of same-label points among the first R neighbours.

    For a query with ``R`` same-label references, ``R-precision = r / R``, where
    ``r`` is the number of them among its ``R`` nearest references; the score is
    the mean over queries. With Precision@1 and MAP@R it is one of the three
    numbers of Musgrave, Belongie and Lim's protocol (2020). Unlike MAP@R it
    ignores the order within the first ``R``.

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
        Embeddings of the queries (and of the references when ``X_ref`` is None).
    y : array-like of shape (n_samples,)
        Labels of ``X``.
    metric : {"euclidean", "cosine"}, default="euclidean"
        Distance used to rank neighbours.
    X_ref : array-like of shape (n_ref, n_features), default=None
        Gallery to search; when given nothing is excluded. Requires ``y_ref``.
    y_ref : array-like of shape (n_ref,), default=None
        Labels of ``X_ref``.
    batch_size : int, default=None
        Queries per block; ``None`` sizes blocks from a 256 MiB budget.
    device : str or torch.device, default=None
        Where to compute; ``None`` or ``"auto"`` uses CUDA when available.

    Returns
    -------
    score : float
        R-precision in [0, 1].

    Raises
    ------
    ValueError
        On bad embeddings or labels (see :func:`recall_at_k`), or when no query
        has a same-label reference.

    See Also
    --------
    map_at_r : MAP@R, from the same neighbours, which also rewards their order.
    retrieval_scores : Recall@K, MAP@R and R-precision from one neighbour search.
    r_precision_scorer : This score as a ``scoring=`` callable.

    Notes
    -----
    Conventions as for :func:`map_at_r` (the query itself excluded, lone
    queries left out, ties to the lower index), and the same exact search: the
    relevance of the first ``R`` neighbours is that of a float64 brute force.
    It equals pytorch-metric-learning's ``r_precision``.

    References
    ----------
    K. Musgrave, S. Belongie, S.-N. Lim, "A Metric Learning Reality Check",
    ECCV 2020.

    Examples
    --------
    >>> import numpy as np
    >>> from skdml.metrics import r_precision
    >>> X = np.array([[0.0], [0.1], [0.3], [1.0], [1.1]])
    >>> y = np.array([0, 0, 1, 0, 1])
    >>> round(r_precision(X, y), 4)
    0.2
    """
    return _retrieval(X, y, _NO_RECALL, want_map=True, metric=metric, X_ref=X_ref,
                      y_ref=y_ref, batch_size=batch_size, device=device)["r_precision"]


@validate_params({**_CONSTRAINTS, **_K}, prefer_skip_nested_validation=True)
def retrieval_scores(X, y, k=(1, 2, 4, 8), *, metric="euclidean", X_ref=None, y_ref=None,
                     batch_size=None, device=None):
    """Recall@K for several K, MAP@R and R-precision from one exact neighbour search.

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
        Embeddings of the queries (and of the references when ``X_ref`` is None).
    y : array-like of shape (n_samples,)
        Labels of ``X``.
    k : int or list of int, default=(1, 2, 4, 8)
        Neighbourhood sizes for Recall@K.
    metric : {"euclidean", "cosine"}, default="euclidean"
        Distance used to rank neighbours.
    X_ref : array-like of shape (n_ref, n_features), default=None
        Gallery to search; requires ``y_ref``.
    y_ref : array-like of shape (n_ref,), default=None
        Labels of ``X_ref``.
    batch_size : int, default=None
        Queries per block; ``None`` sizes blocks from a 256 MiB budget.
    device : str or torch.device, default=None
        Where to compute; ``None`` or ``"auto"`` uses CUDA when available.

    Returns
    -------
    scores : dict
        ``{"recall_at_k": {k: recall, ...}, "map_at_r": float, "r_precision": float}``,
        equal to :func:`recall_at_k`, :func:`map_at_r` and :func:`r_precision`
        called separately.

    See Also
    --------
    recall_at_k, map_at_r, r_precision

    Examples
    --------
    >>> import numpy as np
    >>> from skdml.metrics import retrieval_scores
    >>> X = np.array([[0.0], [0.1], [0.3], [1.0], [1.1]])
    >>> y = np.array([0, 0, 1, 0, 1])
    >>> scores = retrieval_scores(X, y, k=[1, 2])
    >>> {k: round(v, 2) for k, v in scores["recall_at_k"].items()}
    {1: 0.4, 2: 0.6}
    >>> round(scores["map_at_r"], 4)
    0.2
    """
    return _retrieval(X, y, k, want_map=True, metric=metric, X_ref=X_ref, y_ref=y_ref,
                      batch_size=batch_size, device=device)
