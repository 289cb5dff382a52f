"""Retrieval and clustering scores for learned embeddings, and scorers for model selection.

Retrieval (exact k-nearest neighbours, blockwise in torch, on the GPU when one is
present, never an ``N x N`` matrix):

- :func:`recall_at_k`: Recall@K of Oh Song et al. (2016), the metric of the
  ECAML paper: a query scores 1 if at least one of its K nearest *other* points
  shares its label.
- :func:`map_at_r`: MAP@R of Musgrave et al., "A Metric Learning Reality Check"
  (2020).
- :func:`retrieval_scores`: both from one neighbour search.

Clustering (k-means with as many clusters as classes):

- :func:`nmi_score`: ``NMI = 2 I(clusters; classes) / (H(clusters) + H(classes))``.
- :func:`clustering_f1_score`: pairwise F1 from the contingency table, in
  ``O(n + n_clusters x n_classes)``.
- :func:`clustering_scores`: both from one k-means run.

Scorer factories for ``scoring=`` in :func:`~sklearn.model_selection.cross_val_score`
and :class:`~sklearn.model_selection.GridSearchCV`: :func:`recall_at_k_scorer`,
:func:`map_at_r_scorer`, :func:`nmi_scorer`, :func:`clustering_f1_scorer`. Each
is called as ``scorer(estimator, X, y)``: it embeds ``X`` with the fitted
``estimator.transform`` and scores the embedding within the fold.

Conventions shared by the retrieval scores
-----------------------------------------
- Without ``X_ref`` every sample is a query against all the *other* samples: the
  query itself is excluded by index (not by a zero distance), so exact
  duplicates of a query still count as neighbours.
- With ``X_ref``/``y_ref`` (query/gallery form, In-Shop style) the queries are
  searched in the gallery and nothing is excluded.
- Ties in distance are broken deterministically, in favour of the reference with
  the lower index.
- A *lone* query, one with no same-label point among its references (a class
  with a single sample, or a query class absent from the gallery), can neither
  hit nor be ranked; it is left out of the average, as pytorch-metric-learning's
  ``AccuracyCalculator`` does. If every query is lone a ``ValueError`` is raised.
- Labels are compared as labels (integers, strings...), never cast to float.
- Distances are computed in float32: the Euclidean ranking uses
  ``||r||^2 - 2 <q, r>``, the cosine one ``-<q / ||q||, r / ||r||>``.
"""

from __future__ import annotations

import numbers
import warnings

import numpy as np
import torch
from sklearn.cluster import KMeans
from sklearn.utils import check_array, check_random_state
from sklearn.utils.multiclass import type_of_target

from ._utils import resolve_device, thread_limits as torch_threads

__all__ = [
    "NotATransformerError",
    "recall_at_k",
    "map_at_r",
    "retrieval_scores",
    "nmi_score",
    "clustering_f1_score",
    "clustering_scores",
    "recall_at_k_scorer",
    "map_at_r_scorer",
    "nmi_scorer",
    "clustering_f1_scorer",
]

#: Bytes of working memory one block of the neighbour search may use (distances
#: of the query block to every reference, plus the per-neighbour bookkeeping).
_BLOCK_BYTES = 256 * 2**20
_METRICS = ("euclidean", "cosine")
_NO_RECALL = object()


# --------------------------------------------------------------------------------------
# Input validation
# --------------------------------------------------------------------------------------
def _check_embeddings(X, name):
    """2-D, finite, non-empty float array (float32 kept, anything else -> float64)."""
    return check_array(
        X,
        dtype=[np.float32, np.float64],
        ensure_all_finite=True,
        ensure_2d=True,
        allow_nd=False,
        ensure_min_samples=1,
        ensure_min_features=1,
        input_name=name,
    )


def _check_labels(y, n_samples, name, x_name):
    """1-D discrete labels with one label per sample."""
    if y is None:
        raise ValueError(f"{name} is required: the scores compare labels of neighbours.")
    y = np.asarray(y)
    if y.ndim == 2 and y.shape[1] == 1:
        y = y.ravel()
    if y.ndim != 1:
        raise ValueError(f"{name} must be a 1-D array of labels, got shape {y.shape}.")
    if y.shape[0] != n_samples:
        raise ValueError(
            f"{x_name} and {name} have inconsistent lengths: {n_samples} samples "
            f"but {y.shape[0]} labels."
        )
    try:
        kind = type_of_target(y, input_name=name)
    except ValueError as exc:
        raise ValueError(f"{name} must hold discrete class labels: {exc}") from exc
    if kind not in ("binary", "multiclass"):
        raise ValueError(
            f"{name} must hold discrete class labels (integers or strings), got a target "
            f"of type {kind!r}."
        )
    return y


def _check_k(k, n_candidates, what):
    """Normalise ``k`` to a list of positive ints, each at most ``n_candidates``."""
    single = isinstance(k, numbers.Integral) and not isinstance(k, bool)
    ks = [k] if single else k
    try:
        ks = list(ks)
    except TypeError:
        raise ValueError(f"k must be a positive int or a list of them, got {k!r}.") from None
    if not ks:
        raise ValueError("k must be a positive int or a non-empty list of them, got [].")
    for value in ks:
        if (not isinstance(value, numbers.Integral)) or isinstance(value, bool) or value < 1:
            raise ValueError(f"k must be a positive int or a list of them, got {value!r}.")
        if value > n_candidates:
            raise ValueError(
                f"k={value} is too large: each query has only {n_candidates} candidate "
                f"neighbours ({what}). Use k <= {n_candidates}."
            )
    return [int(v) for v in ks], single


def _check_batch_size(batch_size):
    if batch_size is None:
        return None
    if (not isinstance(batch_size, numbers.Integral)) or isinstance(batch_size, bool) \
            or batch_size < 1:
        raise ValueError(f"batch_size must be None or a positive int, got {batch_size!r}.")
    return int(batch_size)


def _prepare_retrieval(X, y, X_ref, y_ref, metric):
    """Validate the query (and optional reference) set; encode the labels to 0..C-1.

    Returns ``X, yq, R, yr, exclude_self, n_candidates, counts`` where ``counts``
    is the number of references per encoded label.
    """
    if metric not in _METRICS:
        raise ValueError(f"metric must be one of {_METRICS}, got {metric!r}.")
    X = _check_embeddings(X, "X")
    y = _check_labels(y, X.shape[0], "y", "X")
    if (X_ref is None) != (y_ref is None):
        raise ValueError("X_ref and y_ref must be given together (or neither).")
    if X_ref is None:
        if X.shape[0] < 2:
            raise ValueError(
                f"X has {X.shape[0]} sample: retrieval needs at least 2 (each query is "
                "searched among the other samples)."
            )
        codes, yq = np.unique(y, return_inverse=True)
        if codes.size < 2:
            raise ValueError(
                f"y has a single class ({codes[0]!r}): retrieval scores need at least 2 "
                "classes to be meaningful."
            )
        return X, yq, X, yq, True, X.shape[0] - 1, np.bincount(yq, minlength=codes.size)
    R = _check_embeddings(X_ref, "X_ref")
    yr = _check_labels(y_ref, R.shape[0], "y_ref", "X_ref")
    if R.shape[1] != X.shape[1]:
        raise ValueError(
            f"X has {X.shape[1]} features but X_ref has {R.shape[1]}: queries and "
            "references must live in the same embedding space."
        )
    try:
        codes, inverse = np.unique(np.concatenate([y, yr]), return_inverse=True)
    except TypeError as exc:
        raise ValueError(f"y and y_ref hold labels that cannot be compared: {exc}") from exc
    yq, yr = inverse[: y.shape[0]], inverse[y.shape[0]:]
    if np.unique(yr).size < 2:
        raise ValueError(
            "y_ref has a single class: retrieval scores need at least 2 classes among "
            "the references to be meaningful."
        )
    return X, yq, R, yr, False, R.shape[0], np.bincount(yr, minlength=codes.size)


# --------------------------------------------------------------------------------------
# Exact blockwise k-nearest neighbours
# --------------------------------------------------------------------------------------
def _abs_max(X):
    """max |X| without an n x d temporary."""
    return max(float(X.max()), -float(X.min()))


def _embed_tensors(Q, R, *, exclude_self, metric, device):
    """Float32 query and reference tensors on ``device``, ready for ranking.

    Cosine: rows are L2-normalised. Euclidean: the ranking is invariant to a
    common shift and a common positive scale, so

    - inputs beyond float32's comfortable range (|x| > 1e15 or < 1e-15) are
      rescaled first, so squared norms neither overflow nor underflow;
    - both sets are shifted by the mean of (a subsample of) the references,
      rounded to a power-of-two grid finer than the data's spread. This keeps
      ``||r||^2 - 2 <q, r>`` from losing precision to cancellation when the data
      sit far from the origin, while data on a coarse grid (integers, pixels)
      stay exactly representable, so their exact ties stay exact.
    """
    peak = max(_abs_max(Q), _abs_max(R))
    scale = peak if (peak > 1e15 or 0.0 < peak < 1e-15) else 1.0

    def to_tensor(X):
        if scale != 1.0:
            X = X / scale  # float64 in, float64 out: no overflow before the cast
        X = np.ascontiguousarray(X)
        with warnings.catch_warnings():
            # A read-only array (e.g. joblib's memmapped folds) is only ever read here.
            warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
            return torch.as_tensor(X).to(device=device, dtype=torch.float32)

    Rt = to_tensor(R)
    Qt = Rt if exclude_self else to_tensor(Q)
    if metric == "cosine":
        Rt = torch.nn.functional.normalize(Rt, dim=1)
        Qt = Rt if exclude_self else torch.nn.functional.normalize(Qt, dim=1)
        return Qt, Rt
    sub = Rt[:: max(1, Rt.shape[0] // 4096)].to(torch.float64)
    mean = sub.mean(dim=0)
    spread = float((sub - mean).abs().mean())
    if spread > 0.0:
        step = 2.0 ** (np.floor(np.log2(spread)) - 4)
        shift = (torch.round(mean / step) * step).to(torch.float32)
        if bool(shift.abs().max() > 0):
            Rt = Rt - shift
            Qt = Rt if exclude_self else Qt - shift
    return Qt, Rt


def _squared_norms(X, chunk=8192):
    """Row-wise ``||x||^2``, chunked so no ``n x d`` temporary is made."""
    out = torch.empty(X.shape[0], dtype=X.dtype, device=X.device)
    for start in range(0, X.shape[0], chunk):
        part = X[start:start + chunk]
        torch.sum(part * part, dim=1, out=out[start:start + chunk])
    return out


def _lexsort_rows(vals, idx):
    """Sort each row by (value, index), ascending."""
    order = torch.argsort(idx, dim=1)
    vals, idx = vals.gather(1, order), idx.gather(1, order)
    order = torch.sort(vals, dim=1, stable=True)[1]
    return idx.gather(1, order)


def _neighbour_blocks(Q, R, depth, *, exclude_self, metric, batch_size, device):
    """Yield ``(start, stop, nbrs)`` over blocks of queries.

    ``nbrs`` is an int64 tensor on ``device`` of shape ``(stop - start, K)``: the
    indices into ``R`` of the ``K = depth[start:stop].max()`` nearest references
    of each query, ordered by distance then index (self excluded when
    ``exclude_self``, in which case ``Q is R``).
    """
    n_q, n_r = Q.shape[0], R.shape[0]
    Qt, Rt = _embed_tensors(Q, R, exclude_self=exclude_self, metric=metric, device=device)
    r_sq = _squared_norms(Rt) if metric == "euclidean" else None
    k_max = int(depth.max()) if depth.size else 0
    if batch_size is None:
        per_row = 4 * n_r + 48 * (k_max + 1)
        batch_size = max(1, _BLOCK_BYTES // per_row)
    inf = torch.tensor(float("inf"), device=device)
    for start in range(0, n_q, batch_size):
        stop = min(start + batch_size, n_q)
        k = int(depth[start:stop].max())
        if k == 0:
            yield start, stop, torch.empty((stop - start, 0), dtype=torch.int64, device=device)
            continue
        q = Qt[start:stop]
        if metric == "euclidean":
            # ||q - r||^2 - ||q||^2 = ||r||^2 - 2 <q, r>: same ranking per query.
            D = torch.addmm(r_sq.unsqueeze(0), q, Rt.T, beta=1.0, alpha=-2.0)
        else:
            D = torch.mm(q, Rt.T).neg_()
        rows = torch.arange(stop - start, device=device)
        if exclude_self:
            D[rows, rows + start] = inf
        if k + 1 > n_r:  # the whole row is needed: a stable sort is exact and cheap enough
            yield start, stop, torch.sort(D, dim=1, stable=True)[1][:, :k]
            continue
        # One extra neighbour tells whether the k-th distance is tied with a
        # reference outside the top k; such rows are re-ranked exactly.
        vals, idx = torch.topk(D, k + 1, dim=1, largest=False, sorted=True)
        tied = vals[:, k - 1] == vals[:, k]
        nbrs = _lexsort_rows(vals, idx)[:, :k]
        if bool(tied.any()):
            tied_rows = torch.nonzero(tied).squeeze(1)
            nbrs[tied_rows] = torch.sort(D[tied_rows], dim=1, stable=True)[1][:, :k]
        del D, vals, idx
        yield start, stop, nbrs


def _retrieval(X, y, ks, *, want_map, metric, X_ref, y_ref, batch_size, device):
    """Shared driver: returns ``({k: recall}, map_at_r or None)``.

    ``ks`` is the user's ``k`` (validated here) or ``_NO_RECALL`` for MAP@R alone.
    """
    X, yq, R, yr, exclude_self, n_cand, counts = _prepare_retrieval(X, y, X_ref, y_ref, metric)
    batch_size = _check_batch_size(batch_size)
    what = "the other samples of X" if exclude_self else "the samples of X_ref"
    ks = [] if ks is _NO_RECALL else _check_k(ks, n_cand, what)[0]
    # R_i: number of relevant references of each query.
    relevant = counts[yq] - int(exclude_self)
    not_lone = relevant > 0
    if not not_lone.any():
        raise ValueError(
            "No query has a reference with the same label (every class has a single "
            "sample, or no query class appears in y_ref): the scores are undefined."
        )
    depth = np.full(yq.shape[0], max(ks) if ks else 0, dtype=np.int64)
    if want_map:
        depth = np.maximum(depth, relevant)
    device = resolve_device(device)
    first_hit = np.empty(yq.shape[0], dtype=np.int64)
    ap = np.zeros(yq.shape[0], dtype=np.float64)
    with torch_threads(), torch.inference_mode():
        yr_t = torch.as_tensor(yr, dtype=torch.int64, device=device)
        yq_t = yr_t if exclude_self else torch.as_tensor(yq, dtype=torch.int64, device=device)
        rel_t = torch.as_tensor(relevant, dtype=torch.int64, device=device)
        blocks = _neighbour_blocks(X, R, depth, exclude_self=exclude_self, metric=metric,
                                   batch_size=batch_size, device=device)
        for start, stop, nbrs in blocks:
            k = nbrs.shape[1]
            if k == 0:
                first_hit[start:stop] = np.iinfo(np.int64).max
                continue
            same = yr_t[nbrs] == yq_t[start:stop].unsqueeze(1)
            if ks:
                hit = same.any(dim=1)
                pos = torch.argmax(same.to(torch.uint8), dim=1)
                pos = torch.where(hit, pos, torch.full_like(pos, np.iinfo(np.int64).max))
                first_hit[start:stop] = pos.cpu().numpy()
            if want_map:
                r = rel_t[start:stop]
                ranks = torch.arange(1, k + 1, device=device)
                rel = same & (ranks.unsqueeze(0) <= r.unsqueeze(1))
                precision = rel.cumsum(dim=1).to(torch.float64) / ranks.to(torch.float64)
                summed = (precision * rel).sum(dim=1)
                ap[start:stop] = (summed / r.clamp(min=1)).cpu().numpy()
            del same, nbrs
    recalls = {k: float(np.mean(first_hit[not_lone] < k)) for k in ks} if ks else {}
    map_r = float(np.mean(ap[not_lone])) if want_map else None
    return recalls, map_r


# --------------------------------------------------------------------------------------
# Public retrieval scores
# --------------------------------------------------------------------------------------
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
    counts as a neighbour. Ties in distance are broken in favour of the
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
    recalls, _ = _retrieval(X, y, k, want_map=False, metric=metric, X_ref=X_ref, y_ref=y_ref,
                            batch_size=batch_size, device=device)
    single = isinstance(k, numbers.Integral) and not isinstance(k, bool)
    return recalls[int(k)] if single else recalls


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
    nearest references, so its cost grows with the largest class.

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
    _, score = _retrieval(X, y, _NO_RECALL, want_map=True, metric=metric, X_ref=X_ref, y_ref=y_ref,
                          batch_size=batch_size, device=device)
    return score


def retrieval_scores(X, y, k=(1, 2, 4, 8), *, metric="euclidean", X_ref=None, y_ref=None,
                     batch_size=None, device=None):
    """Recall@K for several K and MAP@R from one exact neighbour search.

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
        ``{"recall_at_k": {k: recall, ...}, "map_at_r": float}``, equal to
        :func:`recall_at_k` and :func:`map_at_r` called separately.

    See Also
    --------
    recall_at_k, map_at_r

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
    recalls, score = _retrieval(X, y, k, want_map=True, metric=metric, X_ref=X_ref,
                                y_ref=y_ref, batch_size=batch_size, device=device)
    return {"recall_at_k": recalls, "map_at_r": score}


# --------------------------------------------------------------------------------------
# Clustering scores
# --------------------------------------------------------------------------------------
def _contingency(classes, clusters):
    """Dense contingency table (n_classes, n_clusters) of two 0-based code arrays."""
    n_classes, n_clusters = classes.max() + 1, clusters.max() + 1
    flat = np.bincount(classes * n_clusters + clusters, minlength=n_classes * n_clusters)
    return flat.reshape(n_classes, n_clusters).astype(np.int64)


def _entropy(counts, n):
    p = counts[counts > 0] / n
    return float(-np.sum(p * np.log(p)))


def _nmi_from_table(table):
    """``2 I / (H(rows) + H(cols))`` from a contingency table."""
    n = table.sum()
    rows, cols = table.sum(axis=1), table.sum(axis=0)
    h_rows, h_cols = _entropy(rows, n), _entropy(cols, n)
    if h_rows + h_cols == 0.0:  # both partitions are trivial and identical
        return 1.0
    i, j = np.nonzero(table)
    nij = table[i, j].astype(np.float64)
    mi = float(np.sum(nij / n * (np.log(nij) + np.log(n) - np.log(rows[i]) - np.log(cols[j]))))
    return float(np.clip(2.0 * max(mi, 0.0) / (h_rows + h_cols), 0.0, 1.0))


def _pair_f1_from_table(table):
    """Pairwise F1: precision/recall of 'same cluster' pairs against 'same class' pairs.

    ``TP = sum_ij C(n_ij, 2)``, ``P = TP / sum_j C(b_j, 2)`` (pairs in a cluster),
    ``R = TP / sum_i C(a_i, 2)`` (pairs in a class), ``F1 = 2 TP / (pairs in a
    cluster + pairs in a class)``. Exact in integer arithmetic.
    """
    def pairs(c):
        c = c.astype(np.int64)
        return int(np.sum(c * (c - 1) // 2))

    tp = pairs(table.ravel())
    same_class, same_cluster = pairs(table.sum(axis=1)), pairs(table.sum(axis=0))
    if same_class + same_cluster == 0:
        raise ValueError(
            "Pairwise F1 is undefined: no two samples share a class or a cluster."
        )
    return 2.0 * tp / (same_class + same_cluster)


def _cluster(X, y, random_state, n_init):
    X = _check_embeddings(X, "X")
    y = _check_labels(y, X.shape[0], "y", "X")
    classes, codes = np.unique(y, return_inverse=True)
    if classes.size < 2:
        raise ValueError(
            f"y has a single class ({classes[0]!r}): clustering scores need at least 2 classes."
        )
    if (not isinstance(n_init, numbers.Integral)) or isinstance(n_init, bool) or n_init < 1:
        raise ValueError(f"n_init must be a positive int, got {n_init!r}.")
    kmeans = KMeans(n_clusters=classes.size, n_init=int(n_init),
                    random_state=check_random_state(random_state))
    clusters = kmeans.fit_predict(X)
    return _contingency(codes, np.unique(clusters, return_inverse=True)[1])


def clustering_scores(X, y, *, random_state=None, n_init=1):
    """NMI and pairwise F1 of a k-means clustering of ``X``, from one k-means run.

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
        Embeddings to cluster.
    y : array-like of shape (n_samples,)
        Class labels (integers or strings).
    random_state : int, RandomState instance or None, default=None
        Seed of k-means (pass an int for reproducible scores).
    n_init : int, default=1
        Number of k-means++ initialisations (the best inertia is kept).

    Returns
    -------
    scores : dict
        ``{"nmi": float, "f1": float}``; see :func:`nmi_score` and
        :func:`clustering_f1_score`.

    See Also
    --------
    nmi_score, clustering_f1_score

    Examples
    --------
    >>> import numpy as np
    >>> from skdml.metrics import clustering_scores
    >>> X = np.array([[0.0, 0.0], [0.1, 0.0], [5.0, 5.0], [5.1, 5.0]])
    >>> scores = clustering_scores(X, [0, 0, 1, 1], random_state=0)
    >>> {name: round(value, 3) for name, value in scores.items()}
    {'nmi': 1.0, 'f1': 1.0}
    """
    table = _cluster(X, y, random_state, n_init)
    return {"nmi": _nmi_from_table(table), "f1": _pair_f1_from_table(table)}


def nmi_score(X, y, *, random_state=None, n_init=1):
    """Normalised mutual information between a k-means clustering of ``X`` and ``y``.

    ``X`` is clustered by k-means with as many clusters as classes; then
    ``NMI = 2 I(clusters; classes) / (H(clusters) + H(classes))``, the
    clustering metric of Oh Song et al. used by the ECAML paper (equal to
    ``sklearn.metrics.normalized_mutual_info_score(classes, clusters,
    average_method="arithmetic")``).

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
        Embeddings to cluster.
    y : array-like of shape (n_samples,)
        Class labels.
    random_state : int, RandomState instance or None, default=None
        Seed of k-means.
    n_init : int, default=1
        Number of k-means++ initialisations.

    Returns
    -------
    nmi : float
        In [0, 1].

    See Also
    --------
    clustering_scores : NMI and F1 from one k-means run.

    Examples
    --------
    >>> import numpy as np
    >>> from skdml.metrics import nmi_score
    >>> X = np.array([[0.0], [0.1], [5.0], [5.1], [9.0], [9.2]])
    >>> round(nmi_score(X, [0, 0, 1, 1, 2, 2], random_state=0), 3)
    1.0
    """
    return _nmi_from_table(_cluster(X, y, random_state, n_init))


def clustering_f1_score(X, y, *, random_state=None, n_init=1):
    """Pairwise F1 between a k-means clustering of ``X`` and the classes ``y``.

    A pair of samples is *predicted positive* when both fall in the same
    cluster, and *positive* when both share a class. Precision, recall and F1
    are counted over all ``n (n - 1) / 2`` pairs, but computed from the
    contingency table in ``O(n + n_clusters x n_classes)``:
    ``F1 = 2 sum_ij C(n_ij, 2) / (sum_i C(a_i, 2) + sum_j C(b_j, 2))``.

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
        Embeddings to cluster (k-means with as many clusters as classes).
    y : array-like of shape (n_samples,)
        Class labels.
    random_state : int, RandomState instance or None, default=None
        Seed of k-means.
    n_init : int, default=1
        Number of k-means++ initialisations.

    Returns
    -------
    f1 : float
        In [0, 1].

    Raises
    ------
    ValueError
        On bad input, or when no two samples share a class or a cluster (F1 is
        then 0/0).

    See Also
    --------
    clustering_scores : NMI and F1 from one k-means run.

    Examples
    --------
    >>> import numpy as np
    >>> from skdml.metrics import clustering_f1_score
    >>> X = np.array([[0.0], [0.1], [5.0], [5.1], [9.0], [9.2]])
    >>> round(clustering_f1_score(X, [0, 0, 1, 1, 2, 0], random_state=0), 3)
    0.571
    """
    return _pair_f1_from_table(_cluster(X, y, random_state, n_init))


# --------------------------------------------------------------------------------------
# Scorers
# --------------------------------------------------------------------------------------
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
    if (not isinstance(k, numbers.Integral)) or isinstance(k, bool) or k < 1:
        raise ValueError(f"k must be a positive int for a scorer, got {k!r}.")
    return _EmbeddingScorer(recall_at_k, "recall_at_k", k=int(k), metric=metric,
                            batch_size=batch_size, device=device)


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


def knn_accuracy(X, y, X_ref, y_ref, k=(1, 10)):
    """Temporary (replaced by the metrics package): k-NN vote accuracy of queries X."""
    X = np.asarray(X, dtype=np.float32)
    R = np.asarray(X_ref, dtype=np.float32)
    y, y_ref = np.asarray(y), np.asarray(y_ref)
    classes, codes = np.unique(np.concatenate([y, y_ref]), return_inverse=True)
    yq, yr = codes[:len(y)], codes[len(y):]
    ks = list(k)
    depth = np.full(len(yq), max(ks), dtype=np.int64)
    correct = np.zeros(len(ks))
    with torch.inference_mode():
        for start, stop, nbrs in _neighbour_blocks(X, R, depth, exclude_self=False,
                                                   metric="euclidean", batch_size=None,
                                                   device=torch.device("cpu")):
            labels = torch.as_tensor(yr)[nbrs]
            for i, kk in enumerate(ks):
                votes = torch.nn.functional.one_hot(labels[:, :kk], len(classes)).sum(dim=1)
                correct[i] += float((votes.argmax(dim=1) == torch.as_tensor(yq[start:stop])).sum())
    return list(correct / len(yq))
