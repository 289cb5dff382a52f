"""Retrieval scores with the queries spread over processes: joblib/Dask workers or DDP ranks.

Each shard is a contiguous range of queries searched against the **whole**
reference set by the exact engine (:func:`~skdml.metrics._retrieval.query_scores`);
the shards return per-query results (first hit, average precision), which are
put back in query order and averaged once. The scores are therefore those of one
process, bit for bit, whatever the number of shards.

The time of the search divides by the number of shards; the memory of a shard
is the reference set plus one block (256 MiB by default), so shards also spread
the blocks' working memory over machines (see ``doc/scaling.md`` for the model).
"""

from __future__ import annotations

import hashlib
import pickle
from numbers import Integral

import numpy as np
import torch
from joblib import Parallel, delayed, effective_n_jobs
from sklearn.utils._param_validation import Interval, StrOptions, validate_params

from ._retrieval import query_scores, reduce_query_scores
from ._validation import as_host_array
from .._utils._params import positive_int
from .._utils._torch import DEVICE_CONSTRAINT

__all__ = ["fingerprint", "shard_rows", "sharded_retrieval_scores",
           "distributed_retrieval_scores"]


def shard_rows(n_queries, shard, n_shards):
    """``(start, stop)``: the contiguous range of queries of shard ``shard`` of ``n_shards``.

    Examples
    --------
    >>> [shard_rows(10, s, 3) for s in range(3)]
    [(0, 3), (3, 6), (6, 10)]
    """
    if not 0 <= shard < n_shards:
        raise ValueError(f"shard={shard} is not in [0, n_shards={n_shards}).")
    bounds = np.linspace(0, n_queries, n_shards + 1).astype(np.int64)
    return int(bounds[shard]), int(bounds[shard + 1])


def fingerprint(*values):
    """A short hash of the inputs of a score (arrays by dtype, shape and bytes; the rest pickled).

    Examples
    --------
    >>> import numpy as np
    >>> fingerprint(np.zeros(3), [1]) == fingerprint(np.zeros(3), [1])
    True
    >>> fingerprint(np.zeros(3), [1]) == fingerprint(np.zeros(3) + 1e-300, [1])
    False
    """
    digest = hashlib.blake2b(digest_size=16)
    for value in values:
        # integer tensors as their own dtype (as_host_array makes them float64: 2**53 + 1
        # would hash as 2**53), so a tensor and an array of the same labels hash alike
        if isinstance(value, torch.Tensor) and not value.is_floating_point():
            value = value.detach().cpu().numpy()
        else:
            value = np.asarray(as_host_array(value))
        if value.dtype != object:
            value = np.ascontiguousarray(value)
            digest.update(f"{value.dtype.str}{value.shape}".encode())
            digest.update(value.view(np.uint8).reshape(-1) if value.size else b"")
        else:
            digest.update(pickle.dumps(value.tolist(), protocol=4))
    return digest.hexdigest()


def _check_same_inputs(dist, world, inputs):
    """Every rank must score the same data: compare the ranks' fingerprints, refuse otherwise."""
    mine = fingerprint(*inputs)
    every = [None] * world
    dist.all_gather_object(every, mine)
    differ = [r for r, f in enumerate(every) if f != every[0]]
    if differ:
        raise ValueError(
            f"distributed_retrieval_scores: ranks {differ} hold different inputs (X, y, k, "
            "metric, X_ref, y_ref) than rank 0. Every rank must pass the whole, identical "
            "data (each scores its share of the queries against all of it); gather the "
            "embeddings first (e.g. torch.distributed.all_gather), or score each rank's "
            "data alone with retrieval_scores.")


def _check_tiling(parts, n_queries):
    covered = sorted(p["rows"] for p in parts)
    edges = [0] + [b for a, b in covered]
    if any(a != e for (a, _), e in zip(covered, edges)) or edges[-1] != n_queries:
        raise ValueError(f"The shards cover the queries {covered}, not 0..{n_queries} once: "
                         "a shard is missing or repeated.")


#: The parameters both sharded scorers share with :func:`~skdml.metrics.retrieval_scores`.
_SHARED_CONSTRAINTS = {
    "X": ["array-like"], "y": ["array-like"],
    "k": [Interval(Integral, 1, None, closed="left"), "array-like"],
    "metric": [StrOptions({"euclidean", "cosine"})], "X_ref": ["array-like", None],
    "y_ref": ["array-like", None],
    "batch_size": [positive_int(), None],
    "device": DEVICE_CONSTRAINT}


@validate_params(
    {**_SHARED_CONSTRAINTS, "n_shards": [positive_int(), None],
     "n_jobs": [Integral, None]},
    prefer_skip_nested_validation=True,
)
def sharded_retrieval_scores(X, y, k=(1, 2, 4, 8), *, n_shards=None, metric="euclidean",
                             X_ref=None, y_ref=None, batch_size=None, device=None,
                             n_jobs=None):
    """:func:`~skdml.metrics.retrieval_scores` with the queries split over joblib workers.

    The shards run through :class:`joblib.Parallel`, so under
    ``joblib.parallel_config(backend="dask")`` they run on a Dask cluster (``X``
    and the gallery are scattered once, not per shard); with the default backend
    they run in local processes.

    Parameters
    ----------
    X, y, k, metric, X_ref, y_ref, batch_size, device
        As for :func:`~skdml.metrics.retrieval_scores`.
    n_shards : int, default=None
        Query ranges; ``None``: one per joblib worker (``effective_n_jobs``).
    n_jobs : int, default=None
        joblib's ``n_jobs`` (``-1``: every worker of the backend).

    Returns
    -------
    scores : dict
        ``{"recall_at_k": {k: recall, ...}, "map_at_r": float, "r_precision": float}``,
        equal to :func:`~skdml.metrics.retrieval_scores` bit for bit.

    Examples
    --------
    >>> import numpy as np
    >>> from skdml.metrics import retrieval_scores, sharded_retrieval_scores
    >>> rng = np.random.RandomState(0)
    >>> y = np.repeat(np.arange(5), 8)
    >>> X = rng.randn(40, 3) + y[:, None]
    >>> sharded_retrieval_scores(X, y, k=[1, 4], n_shards=3) == retrieval_scores(X, y, k=[1, 4])
    True
    """
    n_queries = len(X)
    n_shards = effective_n_jobs(n_jobs) if n_shards is None else int(n_shards)
    n_shards = max(1, min(n_shards, n_queries))
    work = delayed(query_scores)
    parts = Parallel(n_jobs=n_jobs)(
        work(X, y, k, want_map=True, metric=metric, X_ref=X_ref, y_ref=y_ref,
             batch_size=batch_size, device=device, rows=shard_rows(n_queries, s, n_shards))
        for s in range(n_shards))
    _check_tiling(parts, n_queries)
    return reduce_query_scores(parts)


@validate_params(_SHARED_CONSTRAINTS, prefer_skip_nested_validation=True)
def distributed_retrieval_scores(X, y, k=(1, 2, 4, 8), *, metric="euclidean", X_ref=None,
                                 y_ref=None, batch_size=None, device=None):
    """:func:`~skdml.metrics.retrieval_scores` inside a ``torch.distributed`` job.

    Every rank holds the embeddings (``X``, and ``X_ref`` if any), scores its
    share of the queries (on its own GPU with ``device``), and the per-query
    results are exchanged with ``all_gather_object``; every rank returns the
    scores of one process. Outside a process group it is ``retrieval_scores``.
    The ranks first compare a hash of their inputs: ranks holding different
    data (e.g. each its own shard of the embeddings) raise a ``ValueError`` on
    every rank instead of mixing them.

    Parameters
    ----------
    X, y, k, metric, X_ref, y_ref, batch_size, device
        As for :func:`~skdml.metrics.retrieval_scores`.

    Returns
    -------
    scores : dict
        ``{"recall_at_k": {k: recall, ...}, "map_at_r": float, "r_precision": float}``.

    Examples
    --------
    >>> import numpy as np
    >>> from skdml.metrics import retrieval_scores
    >>> y = np.repeat(np.arange(3), 4)
    >>> X = np.arange(12.0)[:, None]
    >>> distributed_retrieval_scores(X, y, k=1) == retrieval_scores(X, y, k=1)
    True
    """
    import torch.distributed as dist

    rank, world = 0, 1
    if dist.is_available() and dist.is_initialized():
        rank, world = dist.get_rank(), dist.get_world_size()
    if world > 1:
        _check_same_inputs(dist, world, (X, y, k, metric, X_ref, y_ref))
    n_queries = len(X)
    part = query_scores(X, y, k, want_map=True, metric=metric, X_ref=X_ref, y_ref=y_ref,
                        batch_size=batch_size, device=device,
                        rows=shard_rows(n_queries, rank, world))
    parts = [part]
    if world > 1:
        parts = [None] * world
        dist.all_gather_object(parts, part)
    _check_tiling(parts, n_queries)
    return reduce_query_scores(parts)
