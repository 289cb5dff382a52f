"""The exact k-nearest-neighbour engine behind every score and every learner's validation.

:func:`nearest_neighbors` and :func:`knn_accuracy` are the public entry points;
the scores of :mod:`skdml.metrics` use the blockwise generator directly.

How one block of queries is ranked
----------------------------------
1. One GEMM gives the float32 search values of the block against every reference
   (:class:`~skdml.metrics._exact.Frame`); ``torch.topk`` keeps the ``L = K + K/8``
   smallest (at least ``K + 4``), sorted by (value, index).
2. On the host, each candidate gets an interval ``[lo, hi]`` that provably contains
   its float64 brute-force distance, and all unlisted references share one lower
   bound. Position ``j`` *separates* when everything up to ``j`` is provably closer
   than everything after it: ``max(hi[:j+1]) < min(lo[j+1:], lo_beyond)``.
3. A query is settled once a separation exists at or after its depth ``K_q - 1``;
   otherwise (ties or near-ties running past the list) it is searched again with a
   four times longer list, up to a full stable sort of its row.
4. Between separations lie *segments* whose internal order float32 cannot certify.
   A segment is re-ranked by float64 brute-force distance, then index, when its
   order can matter: it holds two different *keys* and either starts before the
   query's ``order_depth`` or straddles a cut ``k`` (the boundary of a top-``k``
   set). Keys are the reference index (:func:`nearest_neighbors`: the full order
   is exact), the reference label (:func:`knn_accuracy`: the label multiset of
   each top-``k`` is exact) or "same label as the query" (Recall@K, MAP@R: the
   relevance sequence is exact).

On ordinary data (float32 ranking gaps far above float32 rounding) step 4 rarely
fires and the cost is the float32 GEMM plus ``O(n_q L)`` host work; data on an
integer grid are ranked exactly in float32 and skip steps 2 and 4 entirely.
"""

from __future__ import annotations

from numbers import Integral

import numpy as np
import torch
from sklearn.utils._param_validation import Interval, StrOptions, validate_params

from .._utils import resolve_device, thread_limits
from ._exact import Frame, ieee_float32
from ._validation import check_k, check_labels, check_pair, encode_labels

__all__ = ["nearest_neighbors", "knn_accuracy"]

#: Bytes of working memory one block of the neighbour search may use (distances
#: of the query block to every reference, plus the per-candidate bookkeeping).
_BLOCK_BYTES = 256 * 2**20
#: Host bytes per listed candidate: values, indices, bounds and their temporaries.
_BYTES_PER_CANDIDATE = 192
_METRICS = ("euclidean", "cosine")


def _list_length(k, n_ref):
    return min(k + max(4, k // 8), n_ref)


def _lexsort_rows(vals, idx):
    """Sort each row by (value, index), ascending."""
    order = torch.argsort(idx, dim=1)
    vals, idx = vals.gather(1, order), idx.gather(1, order)
    order = torch.sort(vals, dim=1, stable=True)[1]
    return vals.gather(1, order), idx.gather(1, order)


def _keys(idx, qrows, ref_keys, query_keys):
    if ref_keys is None:
        return idx
    keys = ref_keys[idx]
    return keys if query_keys is None else keys == query_keys[qrows][:, None]


def _settle(vals, idx, qrows, depth, order_depth, cuts, full, frame, ref_keys, query_keys):
    """Certify (and where needed repair) the order of listed candidates.

    Returns ``ok`` (rows settled with this list) and ``idx`` reordered in place.
    """
    n_rows, L = idx.shape
    v = frame.estimate(vals, qrows)
    lo, hi = frame.intervals(v, qrows, idx)
    if full:
        beyond = np.full(n_rows, np.inf)
    else:
        beyond = frame.beyond(v[:, -1], qrows)
    before = np.maximum.accumulate(hi, axis=1)
    after = np.full_like(lo, np.inf)
    after[:, :-1] = np.minimum.accumulate(lo[:, :0:-1], axis=1)[:, ::-1]
    sep = (before <= after) if frame.exact else (before < after)
    sep &= before < beyond[:, None]
    pos = np.arange(L)
    eligible = sep & (pos >= depth[:, None] - 1)
    ok = eligible.any(axis=1) | (depth == 0)
    cut = np.where(ok & (depth > 0), eligible.argmax(axis=1) + 1, 0)
    inplay = pos < cut[:, None]
    joined = ~sep[:, :-1] & inplay[:, 1:]  # j and j + 1 in one uncertified segment
    if not joined.any():
        return ok, idx
    keys = _keys(idx, qrows, ref_keys, query_keys)
    if not (joined & (keys[:, :-1] != keys[:, 1:])).any():
        return ok, idx
    change = np.zeros((n_rows, L), dtype=np.int64)
    change[:, :-1] = joined & (keys[:, :-1] != keys[:, 1:])
    rows, cols = np.nonzero(inplay)
    starts = np.ones(rows.size, dtype=bool)
    inner = cols > 0
    starts[inner] = ~joined[rows[inner], cols[inner] - 1]
    first = np.flatnonzero(starts)
    length = np.diff(np.append(first, rows.size))
    seg_start = cols[first]
    seg_end = seg_start + length - 1
    mixed = np.add.reduceat(change[rows, cols], first) > 0
    matters = seg_start < order_depth[rows[first]]
    for k in cuts:
        matters |= (seg_start <= k - 1) & (seg_end >= k)
    flag = mixed & matters
    if not flag.any():
        return ok, idx
    member = np.repeat(flag, length)
    r, c = rows[member], cols[member]
    segment = np.repeat(np.arange(first.size), length)[member]
    ref = idx[r, c]
    dist = frame.exact_distances(qrows[r], ref)
    idx[r, c] = ref[np.lexsort((ref, dist, segment))]
    return ok, idx


def _rank_block(D, qrows, depth, order_depth, cuts, frame, ref_keys, query_keys):
    """Exact neighbours (``(n_rows, depth.max())`` int64, host) of one block of queries."""
    n_rows, n_ref = D.shape
    k = int(depth.max())
    result = np.empty((n_rows, k), dtype=np.int64)
    pending = np.arange(n_rows)
    L = _list_length(k, n_ref)
    while pending.size:
        full = L >= n_ref
        chunk_rows = max(1, _BLOCK_BYTES // (_BYTES_PER_CANDIDATE * L))
        retry = []
        for first in range(0, pending.size, chunk_rows):
            rows = pending[first:first + chunk_rows]
            sub = D if rows.size == n_rows else D[torch.as_tensor(rows, device=D.device)]
            if full:
                vals, idx = torch.sort(sub, dim=1, stable=True)
            else:
                vals, idx = _lexsort_rows(*torch.topk(sub, L, dim=1, largest=False))
            del sub
            ok, idx = _settle(vals.cpu().numpy(), idx.cpu().numpy(), qrows[rows], depth[rows],
                              order_depth[rows], cuts, full, frame, ref_keys, query_keys)
            result[rows[ok]] = idx[ok, :k]
            retry.append(rows[~ok])
        pending = np.concatenate(retry)
        L = min(4 * L, n_ref)
    return result


def neighbor_blocks(Q, R, depth, *, exclude_self, metric, batch_size, device,
                    ref_keys=None, query_keys=None, order_depth=None, cuts=()):
    """Yield ``(start, stop, nbrs)`` over blocks of queries.

    ``nbrs`` is a host int64 array ``(stop - start, depth[start:stop].max())``: for
    query ``i`` its first ``depth[i]`` entries are indices into ``R``, nearest
    first, exact in the sense of the keys (see the module docstring): the full
    order when ``ref_keys`` is None, else the sequence of ``ref_keys`` (or of
    ``ref_keys == query_keys[i]`` when ``query_keys`` is given) within the first
    ``order_depth[i]`` positions and the key multiset of every top-``k``, ``k`` in
    ``cuts``. ``Q is R`` when ``exclude_self`` (the query itself is left out).
    """
    n_q, n_ref = Q.shape[0], R.shape[0]
    depth = np.asarray(depth, dtype=np.int64)
    order_depth = (np.zeros(n_q, dtype=np.int64) if order_depth is None
                   else np.asarray(order_depth, dtype=np.int64))
    k_max = int(depth.max()) if depth.size else 0
    if batch_size is None:
        per_row = 4 * n_ref + _BYTES_PER_CANDIDATE * _list_length(k_max, n_ref)
        batch_size = max(1, _BLOCK_BYTES // per_row)
    device = resolve_device(device)
    flops = 2.0 * min(batch_size, n_q) * n_ref * Q.shape[1]
    with thread_limits(flops_per_step=flops), ieee_float32(), torch.inference_mode():
        frame = Frame(Q, R, exclude_self=exclude_self, metric=metric, device=device)
        for start in range(0, n_q, batch_size):
            stop = min(start + batch_size, n_q)
            if int(depth[start:stop].max()) == 0:
                yield start, stop, np.empty((stop - start, 0), dtype=np.int64)
                continue
            D = frame.distances(start, stop, exclude_self)
            nbrs = _rank_block(D, np.arange(start, stop), depth[start:stop],
                               order_depth[start:stop], tuple(cuts), frame, ref_keys,
                               query_keys)
            del D
            yield start, stop, nbrs


_COMMON = {
    "metric": [StrOptions(set(_METRICS))],
    "batch_size": [Interval(Integral, 1, None, closed="left"), None],
    "device": [str, torch.device, None],
}


@validate_params(
    {"X": ["array-like"], "k": [Interval(Integral, 1, None, closed="left")],
     "X_ref": ["array-like", None], **_COMMON},
    prefer_skip_nested_validation=True,
)
def nearest_neighbors(X, k, *, X_ref=None, metric="euclidean", batch_size=None, device=None):
    """Indices of the ``k`` exact nearest neighbours of each query.

    The search runs blockwise in float32 (torch, on the GPU when one is present)
    and never holds an ``n_queries x n_references`` matrix; candidates that
    float32 cannot order with certainty are re-ranked in float64, so the result is
    the one of a float64 brute force for any finite input (see Notes).

    Parameters
    ----------
    X : array-like or torch.Tensor of shape (n_queries, n_features)
        Queries. A torch tensor is detached and read on the host.
    k : int
        Neighbours per query: at most ``n_ref`` (``n_queries - 1`` without
        ``X_ref``).
    X_ref : array-like or torch.Tensor of shape (n_ref, n_features), default=None
        References to search. ``None`` searches ``X`` itself, each query's own
        row excluded (by index: an exact duplicate still counts).
    metric : {"euclidean", "cosine"}, default="euclidean"
        ``"cosine"`` ranks by decreasing cosine similarity; an all-zero row has
        similarity 0 to everything.
    batch_size : int, default=None
        Queries per block; ``None`` sizes blocks from a 256 MiB budget.
    device : str or torch.device, default=None
        Where the float32 search runs; ``None`` or ``"auto"`` uses CUDA when
        available.

    Returns
    -------
    indices : ndarray of shape (n_queries, k), dtype int64
        Row ``i`` lists indices into ``X_ref`` (or ``X``), nearest first; ties in
        distance go to the lower index.

    See Also
    --------
    knn_accuracy : k-NN classification accuracy from the same search.

    Notes
    -----
    The order is that of the float64 distances ``sum((x_r - x_q) ** 2)`` (or
    ``-<x_q / ||x_q||, x_r / ||x_r||>``) then index, computed after an exact
    power-of-two rescaling where squares would overflow. Rigorous error bounds
    on the float32 values decide which candidates need the float64 pass; on
    ordinary data it touches few of them.

    Examples
    --------
    >>> import numpy as np
    >>> from skdml.metrics import nearest_neighbors
    >>> X = np.array([[0.0], [1.0], [3.0], [1e8]])
    >>> nearest_neighbors(X, 2)
    array([[1, 2],
           [0, 2],
           [1, 0],
           [2, 1]])
    >>> nearest_neighbors([[0.9], [2.0]], 1, X_ref=X)
    array([[1],
           [1]])
    """
    X, R = check_pair(X, X_ref)
    exclude_self = R is None
    R = X if exclude_self else R
    what = "the other samples of X" if exclude_self else "the samples of X_ref"
    k = check_k(k, R.shape[0] - int(exclude_self), what)[0][0]
    depth = np.full(X.shape[0], k, dtype=np.int64)
    out = np.empty((X.shape[0], k), dtype=np.int64)
    for start, stop, nbrs in neighbor_blocks(X, R, depth, exclude_self=exclude_self,
                                             metric=metric, batch_size=batch_size,
                                             device=device, order_depth=depth):
        out[start:stop] = nbrs
    return out


@validate_params(
    {"X": ["array-like"], "y": ["array-like"], "X_ref": ["array-like"],
     "y_ref": ["array-like"], "k": [Interval(Integral, 1, None, closed="left"), "array-like"],
     **_COMMON},
    prefer_skip_nested_validation=True,
)
def knn_accuracy(X, y, X_ref, y_ref, k=(1, 10), *, metric="euclidean", batch_size=None,
                 device=None):
    """Accuracy of a majority-vote k-NN classifier of the queries, for each ``k``.

    Each query is given the most frequent label among its ``k`` exact nearest
    references (:func:`nearest_neighbors` with ``X_ref``); a tied vote goes to
    the smallest label (in sorted order). The result is the fraction of queries
    whose label is predicted, for each ``k``.

    Parameters
    ----------
    X : array-like or torch.Tensor of shape (n_queries, n_features)
        Queries (e.g. an embedded validation set).
    y : array-like of shape (n_queries,)
        Labels of ``X`` (integers or strings).
    X_ref : array-like or torch.Tensor of shape (n_ref, n_features)
        References (e.g. the embedded training set); nothing is excluded.
    y_ref : array-like of shape (n_ref,)
        Labels of ``X_ref``.
    k : int or array-like of int, default=(1, 10)
        Neighbourhood sizes, each at most ``n_ref``.
    metric : {"euclidean", "cosine"}, default="euclidean"
        Distance used to rank neighbours.
    batch_size : int, default=None
        Queries per block; ``None`` sizes blocks from a 256 MiB budget.
    device : str or torch.device, default=None
        Where the float32 search runs; ``None`` or ``"auto"`` uses CUDA when
        available.

    Returns
    -------
    accuracies : list of float
        One accuracy per ``k``, in the order given. A query whose label is
        absent from ``y_ref`` counts as misclassified.

    See Also
    --------
    nearest_neighbors : The underlying exact search.
    recall_at_k : Retrieval counterpart (a hit among the k nearest).

    Examples
    --------
    >>> import numpy as np
    >>> from skdml.metrics import knn_accuracy
    >>> X_ref = np.array([[0.0], [0.2], [1.0], [1.1], [1.2]])
    >>> y_ref = np.array([0, 0, 1, 1, 1])
    >>> accuracies = knn_accuracy([[0.1], [0.7], [1.05]], [0, 0, 1], X_ref, y_ref, k=[1, 5])
    >>> [round(a, 3) for a in accuracies]
    [0.667, 0.333]
    """
    X, R = check_pair(X, X_ref)
    y = check_labels(y, X.shape[0], "y", "X")
    y_ref = check_labels(y_ref, R.shape[0], "y_ref", "X_ref")
    codes, yq, yr = encode_labels(y, y_ref)
    ks = check_k(k, R.shape[0], "the samples of X_ref")[0]
    n_classes = codes.size
    depth = np.full(X.shape[0], max(ks), dtype=np.int64)
    correct = np.zeros(len(ks))
    for start, stop, nbrs in neighbor_blocks(X, R, depth, exclude_self=False, metric=metric,
                                             batch_size=batch_size, device=device,
                                             ref_keys=yr, cuts=ks):
        labels = yr[nbrs]
        step = max(1, 2**22 // n_classes)
        for first in range(0, stop - start, step):
            part = labels[first:first + step]
            truth = yq[start + first:start + first + part.shape[0]]
            offset = (np.arange(part.shape[0]) * n_classes)[:, None]
            for i, kk in enumerate(ks):
                votes = np.bincount((part[:, :kk] + offset).ravel(),
                                    minlength=part.shape[0] * n_classes)
                predicted = votes.reshape(part.shape[0], n_classes).argmax(axis=1)
                correct[i] += np.count_nonzero(predicted == truth)
    return [float(c / X.shape[0]) for c in correct]
