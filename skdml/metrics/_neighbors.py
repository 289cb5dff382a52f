"""The exact k-nearest-neighbour engine behind every score and every learner's validation.

:func:`nearest_neighbors` and :func:`knn_accuracy` are the public entry points;
the scores of :mod:`skdml.metrics` use the blockwise generator directly.

How one block of queries is ranked
----------------------------------
1. One GEMM gives the float32 search values of the block against every reference
   (:class:`~skdml.metrics._exact.Frame`); the ``L = K + K/8`` smallest (at least
   ``K + 4``; ``K/64`` in a float64 frame) are kept, sorted by (value, index): on
   the CPU by one comparison with a threshold drawn from a sample of the row, then
   a sort of int64 (value, index) keys (numpy, :mod:`~skdml.metrics._select`); on
   an accelerator by ``torch.topk``.
2. On the host, each candidate's float64 brute-force distance provably lies in
   ``[v - s_lo, v + s_hi]`` (one pair of slacks per query, from the error bounds),
   and all unlisted references share one lower bound. Position ``j``
   *separates* when everything up to ``j`` is provably closer than everything
   after it: ``v_j + s_hi < v_{j+1} - s_lo`` and ``v_j + s_hi < lo_beyond``.
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
fires and the cost is the float32 GEMM, the selection, and ``O(n_q L)`` host work
(a few comparisons per candidate; only the uncertified pairs are visited); data on
an integer grid are ranked exactly in float32 and skip steps 2 and 4 entirely.
Deep lists among many references are dense in value and send many candidates to
step 4; on the CPU, :func:`_wide_pays` then ranks 32 queries and, where step 4
costs more than a float64 frame would, the search runs in one
(:class:`~skdml.metrics._exact.Frame` ``wide=True``): its candidates are selected
and sorted by the float32 rounding of their float64 values
(:mod:`~skdml.metrics._select`), and certified from those roundings with half a
float32 ulp of the row's largest value added to the slacks: where two roundings
are too close for that, step 4 orders the candidates, as for float32 near-ties.
The unlisted references are bounded from the float32 number just below the last
rounding.

On the CPU the blocks are ranked side by side, one thread each (as many as the
thread policy grants, :func:`skdml._utils.choose_n_threads` with
``independent=True``: the threads share no barrier, so a busy machine does not
take them away), each GEMM on one torch thread: the host work (selection,
certification, the scores of ``reduce``) is then parallel too, and no OpenMP
pool spin-waits between the steps on a busy machine. A CPU block
takes about 32 MiB (its distances in one reused buffer per thread, which stays
in cache), so the blocks in flight stay far below the 256 MiB budget.
"""

from __future__ import annotations

import threading
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from .._utils._params import positive_int
from .._utils._torch import DEVICE_CONSTRAINT
from numbers import Integral

import numpy as np
import torch
from sklearn.utils._param_validation import Interval, StrOptions, validate_params

from .._utils import choose_n_threads, evenly_spaced, resolve_device, thread_limits
from ._exact import Frame, ieee_float32
from ._select import order_segments, pair_runs, segment_cells, smallest
from ._validation import check_k, check_labels, check_pair, encode_labels

__all__ = ["nearest_neighbors", "knn_accuracy"]

#: Bytes of working memory one block of the neighbour search may use (distances
#: of the query block to every reference, plus the per-candidate bookkeeping).
_BLOCK_BYTES = 256 * 2**20
#: On the CPU, bytes per query block (distances and bookkeeping): small enough that a block's
#: distances are written into one reused buffer that stays in cache (a fresh 480 MB block
#: made the d=32 GEMM 2.6x slower, most of it page faults).
_CPU_BLOCK_BYTES = 32 * 2**20
#: Host bytes per listed candidate: values, indices, bounds and their temporaries.
_BYTES_PER_CANDIDATE = 192
_METRICS = ("euclidean", "cosine")
#: On the CPU, searches with lists at least this deep probe whether a float64 frame
#: (``Frame(wide=True)``) pays: see :func:`_wide_pays`.
_WIDE_DEPTH = 64
#: Queries of that probe, spread over the query set.
_PROBE_ROWS = 32
#: The float64 frame pays when float32 sends more than this many candidates per query and
#: per reference to the float64 pass (its product and selection cost about as much).
_WIDE_RATIO = 0.004
#: Below this many query-reference pairs the search is quick either way: no probe.
_PROBE_MIN_PAIRS = 2**27


def _list_length(k, n_ref, wide=False):
    """Candidates listed for depth ``k``: a margin for float32's uncertified ties (1/64 in a
    float64 frame, whose bounds leave almost none)."""
    return min(k + max(4, k // (64 if wide else 8)), n_ref)


def _keys(idx, qrows, ref_keys, query_keys):
    """The keys of references ``idx`` for the queries ``qrows`` (arrays of one shape)."""
    if ref_keys is None:
        return idx
    keys = ref_keys[idx]
    return keys if query_keys is None else keys == query_keys[qrows]


def _settle(vals, idx, floor, qrows, depth, order_depth, cuts, full, frame, ref_keys,
            query_keys, repaired=None, keyed=False):
    """Certify (and where needed repair) the order of listed candidates.

    Returns ``ok`` (rows settled with this list) and ``idx`` reordered in place.
    ``vals`` are sorted per row, so position ``j`` separates when
    ``v_j + s_hi < v_{j+1} - s_lo`` (and ``< lo_beyond``), with the per-query
    slacks of :meth:`~skdml.metrics._exact.Frame.slacks`: two comparisons per
    candidate. The uncertified pairs are few, and only they are visited.
    ``floor``: per row, a value at or below every unlisted reference's (from
    :func:`~skdml.metrics._select.smallest`). ``repaired``: a list to which the
    number of candidates sent to the float64 pass is appended. ``keyed``: the list
    holds the ``L`` smallest references by (value, index) (the host selection of
    :func:`~skdml.metrics._select.smallest`, or a full sort), so that in an exact
    frame every unlisted reference comes after every listed one.
    """
    n_rows, L = idx.shape
    v = frame.estimate(vals, qrows)
    beyond = np.full(n_rows, np.inf) if full else \
        frame.beyond(frame.estimate(floor[:, None], qrows)[:, 0], qrows)
    sep = np.ones((n_rows, L), dtype=bool)  # exact sorted values: every gap is certain
    s_hi = np.zeros(n_rows)
    rounding = None
    if not frame.exact:
        last_pos = np.full(n_rows, L - 1)
        if not np.isfinite(v[:, -1]).all():  # the excluded query itself (inf) ends a full row
            last_pos = np.maximum(np.count_nonzero(np.isfinite(v), axis=1) - 1, 0)
        last = v[np.arange(n_rows), last_pos]
        if frame.wide and vals.dtype == np.float32:
            # float32 roundings of float64 values (_select.smallest): each within half an
            # ulp, 2**-24 of its magnitude (or 2**-150 below the normal range); the largest
            # magnitude of a sorted row is at one of its ends
            top = np.maximum(np.abs(vals[:, 0]), np.abs(vals[np.arange(n_rows), last_pos]))
            rounding = top.astype(np.float64) * (2.0 ** -24 * (1 + 2.0 ** -20)) + 2.0 ** -149
        # the listed references' norms, bounded from their values (no gather of L norms)
        b_max = frame.reach(last if rounding is None else last + rounding, qrows)
        s_hi, s_lo = frame.slacks(v[:, 0], last, qrows, b_max)
        if rounding is not None:
            s_hi, s_lo = s_hi + rounding, s_lo + rounding
        with np.errstate(invalid="ignore"):
            gap = np.subtract(v[:, 1:], v[:, :-1])
            gap *= 1 - 2.0 ** -50
            np.greater(gap, (s_hi + s_lo)[:, None], out=sep[:, :-1])
        del gap
    # v is sorted: the positions provably before every unlisted reference form a prefix
    if frame.exact and keyed:
        # exact values listed by (value, index): an unlisted reference's value is larger,
        # or equal with a larger index (a tie with the floor is ordered, not uncertain)
        n_before = np.count_nonzero(np.isfinite(v), axis=1)
    else:
        with np.errstate(invalid="ignore"):
            limit = beyond - s_hi
            limit = np.where(np.isfinite(limit), limit - 2.0 ** -50 * np.abs(limit), limit)
            n_before = np.count_nonzero(v < limit[:, None], axis=1)
    pos = np.arange(L)
    sep &= pos < n_before[:, None]
    eligible = sep & (pos >= depth[:, None] - 1)
    ok = eligible.any(axis=1) | (depth == 0)
    cut = np.where(ok & (depth > 0), eligible.argmax(axis=1) + 1, 0)
    # pairs (j, j + 1) in one uncertified segment, both within the certified prefix
    jr, jc = np.divmod(np.flatnonzero(~sep[:, :-1] & (pos[1:] < cut[:, None])), max(L - 1, 1))
    if jr.size == 0:
        return ok, idx
    differ = _keys(idx[jr, jc], qrows[jr], ref_keys, query_keys) != \
        _keys(idx[jr, jc + 1], qrows[jr], ref_keys, query_keys)
    if not differ.any():
        return ok, idx
    first, n_pairs = pair_runs(jr, jc)  # runs of consecutive pairs of a row: segments
    seg_row, seg_start = jr[first], jc[first]
    seg_end = seg_start + n_pairs  # last position of the segment
    mixed = np.add.reduceat(differ.astype(np.int64), first) > 0
    matters = seg_start < order_depth[seg_row]
    for k in cuts:
        matters |= (seg_start <= k - 1) & (seg_end >= k)
    flag = mixed & matters
    if not flag.any():
        return ok, idx
    length = (n_pairs + 1)[flag]
    segment, r, c = segment_cells(seg_row[flag], seg_start[flag], length)
    ref = idx[r, c]
    if not frame.exact:
        segment, keep = _split_segments(v, r, c, ref, segment, length, seg_row[flag],
                                        seg_start[flag], seg_end[flag], qrows, frame,
                                        None if rounding is None else rounding[seg_row[flag]])
        r, c, ref, segment = r[keep], c[keep], ref[keep], segment[keep]
        if ref.size == 0:
            return ok, idx
    if repaired is not None:
        repaired.append(ref.size)
    dist = frame.exact_distances(qrows[r], ref)
    idx[r, c] = ref[order_segments(segment, dist, ref)]
    return ok, idx


def _split_segments(v, r, c, ref, segment, length, rows, starts, ends, qrows, frame,
                    rounding=None):
    """Split uncertified segments where slacks of the segment's own candidates separate them.

    The row's slacks use the largest reference norm among all its listed candidates;
    a segment's own largest norm is usually smaller, and so are its slacks (same
    bounds, :meth:`~skdml.metrics._exact.Frame.slacks`, valid for candidates whose
    values lie between the segment's first and last and whose norms are at most its
    largest). Where a gap inside the segment exceeds them, everything before the gap
    is provably closer than everything after it, exactly as for the row's own
    separations. ``rounding``: per segment, the bound on how far listed float32
    roundings lie from their float64 values (added to both slacks), or None.
    Returns the new segment ids and which positions still need the float64 pass
    (sub-segments of two or more candidates).
    """
    first = np.cumsum(length) - length
    b_seg = np.maximum.reduceat(frame.r_norm[ref], first)
    s_hi, s_lo = frame.slacks(v[rows, starts], v[rows, ends], qrows[rows], b_seg)
    if rounding is not None:
        s_hi, s_lo = s_hi + rounding, s_lo + rounding
    inner = np.ones(r.size, dtype=bool)
    inner[np.cumsum(length) - 1] = False  # the last candidate of a segment has no next
    cut = np.zeros(r.size, dtype=bool)
    with np.errstate(invalid="ignore"):
        gap = v[r[inner], c[inner] + 1] - v[r[inner], c[inner]]
        cut[inner] = gap * (1 - 2.0 ** -50) > (s_hi + s_lo)[segment[inner]]
    begins = np.ones(r.size, dtype=bool)  # a new sub-segment after every cut
    begins[1:] = (segment[1:] != segment[:-1]) | cut[:-1]
    sub = np.cumsum(begins) - 1
    sizes = np.bincount(sub)
    return sub, sizes[sub] > 1


def _rank_block(D, qrows, depth, order_depth, cuts, frame, ref_keys, query_keys, repaired=None):
    """Exact neighbours (``(n_rows, depth.max())`` int64, host) of one block of queries."""
    n_rows, n_ref = D.shape
    k = int(depth.max())
    result = np.empty((n_rows, k), dtype=np.int64)
    pending = np.arange(n_rows)
    if frame.zero_queries is not None:  # cosine, all-zero queries: every reference at 2
        zero = frame.zero_queries[qrows]
        if zero.any():
            order = np.broadcast_to(np.arange(k, dtype=np.int64), (int(zero.sum()), k))
            if frame.exclude_self:  # skip the query's own index
                order = order + (order >= qrows[zero][:, None])
            result[zero] = order
            pending = pending[~zero]
    L = _list_length(k, n_ref, frame.wide)
    while pending.size:
        full = L >= n_ref
        chunk_rows = max(1, _BLOCK_BYTES // (_BYTES_PER_CANDIDATE * L))
        retry = []
        for first in range(0, pending.size, chunk_rows):
            rows = pending[first:first + chunk_rows]
            vals, idx, floor = smallest(D, rows, L, full)
            ok, idx = _settle(vals, idx, floor, qrows[rows], depth[rows], order_depth[rows], cuts,
                              full, frame, ref_keys, query_keys, repaired,
                              keyed=full or D.device.type == "cpu")
            result[rows[ok]] = idx[ok, :k]
            retry.append(rows[~ok])
        pending = np.concatenate(retry)
        if full and pending.size:  # every reference was listed and brute-forced: a bug
            raise RuntimeError(
                f"skdml could not certify the neighbour order of {pending.size} queries from "
                "full lists; please report this with the input's range (min, max).")
        L = min(4 * L, n_ref)
    return result


def _wide_pays(frame, depth, order_depth, keys, n_probe):
    """Whether a float64 frame would rank this search faster than the float32 one.

    Dense values (deep lists among many references) leave float32 many near-ties,
    each settled by the float64 brute force; a float64 frame settles them at once,
    for a dearer product and selection. This ranks ``n_probe`` queries spread over
    the query set in ``frame`` (float32) and counts the candidates sent to the
    float64 pass: the float64 frame pays beyond about ``_WIDE_RATIO`` of them per
    query and per reference (measured: ``benchmarks/studies/bench_frames.py``).
    """
    searched = np.flatnonzero(depth > 0)
    n_ref = frame.n_ref
    if searched.size * n_ref < _PROBE_MIN_PAIRS:
        return False
    rows = evenly_spaced(searched, n_probe)
    cuts, ref_keys, query_keys = keys
    repaired = []
    _rank_block(frame.distances(rows, frame.exclude_self), rows, depth[rows],
                order_depth[rows], cuts, frame, ref_keys, query_keys, repaired)
    return sum(repaired) > _WIDE_RATIO * n_ref * rows.size


def neighbor_blocks(Q, R, depth, *, exclude_self, metric, batch_size, device,
                    ref_keys=None, query_keys=None, order_depth=None, cuts=(), reduce=None):
    """Yield ``(start, stop, nbrs)`` over blocks of queries.

    ``nbrs`` is a host int64 array ``(stop - start, depth[start:stop].max())``: for
    query ``i`` its first ``depth[i]`` entries are indices into ``R``, nearest
    first, exact in the sense of the keys (see the module docstring): the full
    order when ``ref_keys`` is None, else the sequence of ``ref_keys`` (or of
    ``ref_keys == query_keys[i]`` when ``query_keys`` is given) within the first
    ``order_depth[i]`` positions and the key multiset of every top-``k``, ``k`` in
    ``cuts``. ``Q is R`` when ``exclude_self`` (the query itself is left out).
    ``reduce(start, stop, nbrs)``, when given, runs in the thread that ranked the
    block (in parallel on the CPU), and its result is yielded instead of ``nbrs``.
    """
    n_q, n_ref = Q.shape[0], R.shape[0]
    depth = np.asarray(depth, dtype=np.int64)
    order_depth = (np.zeros(n_q, dtype=np.int64) if order_depth is None
                   else np.asarray(order_depth, dtype=np.int64))
    k_max = int(depth.max()) if depth.size else 0
    device = resolve_device(device)
    cpu = device.type == "cpu"

    def block_rows(wide):
        per_row = ((8 if wide else 4) * n_ref
                   + _BYTES_PER_CANDIDATE * _list_length(k_max, n_ref, wide))
        return batch_size or max(1, (_CPU_BLOCK_BYTES if cpu else _BLOCK_BYTES) // per_row)

    block = block_rows(False)
    workers = 1
    if cpu:  # blocks ranked side by side, one thread each (module docstring)
        workers = max(1, min(choose_n_threads(2.0 * n_q * n_ref * Q.shape[1], independent=True),
                             -(-n_q // block)))
    buffers = threading.local()  # each thread's distance block, reused (CPU)

    def ranked(start, stop):
        if reduce is not None:
            return reduce(start, stop, search(start, stop))
        return search(start, stop)

    def search(start, stop):
        if int(depth[start:stop].max()) == 0:
            return np.empty((stop - start, 0), dtype=np.int64)
        with torch.inference_mode():  # thread-local: entered again in a worker
            out = None
            if cpu:
                out = getattr(buffers, "D", None)
                if out is None or out.shape[0] < stop - start:
                    out = buffers.D = torch.empty((min(block, n_q), n_ref), dtype=frame.dtype)
                out = out[:stop - start]
            D = frame.distances(slice(start, stop), exclude_self, out=out)
            return _rank_block(D, np.arange(start, stop), depth[start:stop],
                               order_depth[start:stop], tuple(cuts), frame, ref_keys,
                               query_keys)

    with thread_limits(1 if cpu else None,
                       flops_per_step=2.0 * min(block, n_q) * n_ref * Q.shape[1]), \
            ieee_float32(), torch.inference_mode():
        frame = Frame(Q, R, exclude_self=exclude_self, metric=metric, device=device)
        if (cpu and k_max >= _WIDE_DEPTH and not frame.exact
                and _wide_pays(frame, depth, order_depth, (tuple(cuts), ref_keys, query_keys),
                               min(block, _PROBE_ROWS))):
            frame = Frame(Q, R, exclude_self=exclude_self, metric=metric, device=device,
                          wide=True)
            block = block_rows(True)

        starts = range(0, n_q, block)
        if workers == 1:
            for start in starts:
                stop = min(start + block, n_q)
                yield start, stop, ranked(start, stop)
            return
        with ThreadPoolExecutor(max_workers=workers) as pool:
            in_flight = deque()
            for start in starts:
                stop = min(start + block, n_q)
                in_flight.append((start, stop, pool.submit(ranked, start, stop)))
                if len(in_flight) >= workers:
                    first, last, job = in_flight.popleft()
                    yield first, last, job.result()
            while in_flight:
                first, last, job = in_flight.popleft()
                yield first, last, job.result()


_COMMON = {
    "metric": [StrOptions(set(_METRICS))],
    "batch_size": [positive_int(), None],
    "device": DEVICE_CONSTRAINT,
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
        similarity 0 to every row, another all-zero row included (see the
        metrics guide).
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
    ``sum((u_r - u_q) ** 2)`` of the rows ``u = x / ||x||``, which is ``2 - 2 cos``
    with the digits ``1 - cos`` loses near 1) then index, computed after an exact
    power-of-two rescaling of the data (so that no square overflows, and tiny
    values do not underflow to a tie: ``[[0], [3e-170], [1e-170]]`` ranks 2
    before 1 from 0, where unscaled squares both underflow to 0). Rigorous error bounds
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
        correct += knn_votes(yr[nbrs], yq[start:stop], ks, n_classes).sum(axis=0)
    return [float(c / X.shape[0]) for c in correct]


def knn_votes(labels, truth, ks, n_classes):
    """Whether each query's k-NN vote is right, for each ``k`` in ``ks``: bool ``(n, len(ks))``.

    ``labels``: the class codes (``0 .. n_classes - 1``) of each query's neighbours,
    nearest first; ``truth``: each query's code (-1: a class no reference has). A tie
    goes to the smallest code. The votes are counted per class (``n_classes`` counts a
    query) or, where fewer, among the neighbours (``k**2`` comparisons a query: many
    classes, small ``k``), in blocks of about ``2**22`` counts.
    """
    out = np.zeros((labels.shape[0], len(ks)), dtype=bool)
    for i, kk in enumerate(ks):
        width = min(n_classes, kk * kk)
        step = max(1, 2**22 // width)
        for first in range(0, labels.shape[0], step):
            part = labels[first:first + step, :kk]
            rows = slice(first, first + part.shape[0])
            if width < n_classes:  # each neighbour's label counted among the neighbours
                counts = (part[:, :, None] == part[:, None, :]).sum(axis=2)
                top = counts == counts.max(axis=1, keepdims=True)
                winner = np.where(top, part, np.iinfo(part.dtype).max).min(axis=1)
            else:
                offset = (np.arange(part.shape[0]) * n_classes)[:, None]
                votes = np.bincount((part + offset).ravel(), minlength=part.shape[0] * n_classes)
                winner = votes.reshape(part.shape[0], n_classes).argmax(axis=1)
            out[rows, i] = winner == truth[rows]
    return out
