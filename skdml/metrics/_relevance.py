"""Exact relevance sequences of long neighbour lists (MAP@R, R-precision) on the CPU.

MAP@R reads, for each query, only *which* of its first ``R`` neighbours share its
label, not who they are; with few classes ``R`` is about ``n / n_classes`` and
ranking every one of those neighbours exactly (:func:`~skdml.metrics._neighbors.
_rank_block`, its float64 certification of each gap) costs far more than the
matrix product. This module gives the same relevance sequence, ranking one block
of queries as follows:

1. A threshold drawn from a strided sample of each row (as in
   :func:`~skdml.metrics._neighbors._sorted_keys`) keeps every reference whose
   float32 search value is at most it: a few more than ``L = K + K/8`` per row.
   Their ``(value, index)`` int64 keys are sorted for all rows at once (one
   padded table, numpy's vectorised sort).
2. Two neighbours can only swap in the float64 brute force when their float32
   values lie within the query's slack (the bounds of
   :class:`~skdml.metrics._exact.Frame`): the sorted list splits into *runs* of
   such neighbours, separated by certain gaps. The gaps are checked in float32
   (one subtraction per candidate, the slack rounded up to absorb its rounding).
3. A query is settled once a certain gap lies at or after its depth ``K_q - 1``
   and before every unlisted reference (their common lower bound). Only the runs
   that hold both a relevant and an irrelevant neighbour, and start before
   ``K_q``, can change the relevance sequence; those alone are re-ranked by
   float64 brute-force distance, then index (after splitting them with the
   tighter slacks of their own candidates).

Queries it cannot settle (a threshold keeping too few or too many references,
ties running past the list) and blocks on an accelerator go to the general
engine, whose result is turned into the same relevance sequence. Data on an
integer grid (an exact float32 frame) are sorted exactly by their keys and skip
step 2. The cosine zero-row convention is the engine's: an all-zero query lists
the references in index order.
"""

from __future__ import annotations

import numpy as np
import torch

from ._neighbors import _list_length, _order_keys, _order_segments, _rank_block

__all__ = ["relevance_block"]

#: Shortest list (``L``) ranked here: shorter lists (Recall@K, small classes) are
#: the general engine's fast case, and the strided-sample threshold needs
#: ``L >= 128`` (a stride of at least 2).
MIN_LIST = 128
#: Bytes of float32 values selected and sorted together (a block's rows, in steps).
_STEP_BYTES = 16 * 2**20
_MAX_KEY = np.iinfo(np.int64).max


def relevance_block(D, qrows, depth, order_depth, cuts, frame, ref_keys, query_keys):
    """Exact relevance ``ref_keys[neighbour] == query_keys[query]`` of one block.

    Same arguments as :func:`~skdml.metrics._neighbors._rank_block` (``ref_keys``
    and ``query_keys`` both given). Returns a boolean ``(n_rows, depth.max())``
    array whose row ``i`` is, over its first ``depth[i]`` positions, the
    relevance sequence of the float64 brute-force ranking (ties to the lower
    index), and False after them.
    """
    n_rows, n_ref = D.shape
    k = int(depth.max()) if n_rows else 0
    out = np.zeros((n_rows, k), dtype=bool)
    if k == 0:
        return out
    todo = np.flatnonzero(depth > 0)
    if frame.zero_queries is not None:  # cosine, all-zero queries: references in index order
        zero = frame.zero_queries[qrows[todo]]
        if zero.any():
            rows = todo[zero]
            order = np.broadcast_to(np.arange(k, dtype=np.int64), (rows.size, k))
            if frame.exclude_self:  # skip the query's own index
                order = order + (order >= qrows[rows][:, None])
            _store(out, rows, order, depth, qrows, ref_keys, query_keys)
            todo = todo[~zero]
    L = _list_length(k, n_ref)
    rest = [todo]
    idx_bits = max(1, int(n_ref - 1).bit_length())
    if D.device.type == "cpu" and MIN_LIST <= L < n_ref and idx_bits <= 30:
        A = D.numpy()
        rest = []
        # the keys hold (row, value, index) in 63 bits
        step = max(1, min(_STEP_BYTES // (4 * n_ref), 2 ** (31 - idx_bits)))
        for first in range(0, todo.size, step):
            rows = todo[first:first + step]
            part = A[rows[0]:rows[-1] + 1] if rows[-1] - rows[0] == rows.size - 1 else A[rows]
            settled, rel, starts = _rank_rows(part, qrows[rows], depth[rows], idx_bits,
                                              frame, ref_keys, query_keys)
            for row, begin in zip(rows[settled], starts):
                out[row, :depth[row]] = rel[begin:begin + depth[row]]
            rest.append(rows[~settled])
    rest = np.concatenate(rest)
    if rest.size:  # the general engine: every case, any device
        sub = D if rest.size == n_rows else D[torch.as_tensor(rest, device=D.device)]
        nbrs = _rank_block(sub, qrows[rest], depth[rest], order_depth[rest], cuts, frame,
                           ref_keys, query_keys)
        _store(out, rest, nbrs, depth, qrows, ref_keys, query_keys)
    return out


def _store(out, rows, idx, depth, qrows, ref_keys, query_keys):
    """Write the relevance of neighbours ``idx`` (first ``depth`` of each row) into ``out``."""
    if rows.size == 0:
        return
    k = out.shape[1]
    same = ref_keys[idx[:, :k]] == query_keys[qrows[rows]][:, None]
    same &= np.arange(k)[None, :] < depth[rows][:, None]
    out[rows] = same


def _rank_rows(part, qrows, depth, idx_bits, frame, ref_keys, query_keys):
    """Steps 1-3 of the module docstring for the rows of ``part`` (float32 search values).

    Returns ``settled`` (boolean per row), ``rel`` and ``starts``: the settled
    rows' first candidates, row after row in one flat array, each row in an order
    whose relevance sequence ``rel`` is exact over its first ``depth``
    positions; ``starts`` where each settled row begins.
    """
    n_rows, n_ref = part.shape
    # 1. Threshold from every stride-th column: a few more than L values lie below it.
    L = depth + np.maximum(4, depth // 8)
    stride = max(2, int(L.min()) // 64)
    sample = np.sort(part[:, ::stride], axis=1)
    rank = np.minimum(sample.shape[1] - 1, (5 * L) // (4 * stride) + 8)
    threshold = sample[np.arange(n_rows), rank]
    # never the excluded query itself (+inf): unlisted references are then all finite
    np.minimum(threshold, np.finfo(np.float32).max, out=threshold)
    flat = np.flatnonzero(part <= threshold[:, None])  # row by row, rows in order
    counts = np.diff(np.searchsorted(flat, np.arange(n_rows + 1) * n_ref))
    settled = (counts >= depth) & (counts <= 4 * L)
    ok = np.flatnonzero(settled)
    if ok.size < n_rows:
        flat = flat[np.repeat(settled, counts)]
    if ok.size == 0:
        return settled, np.empty(0, dtype=bool), np.empty(0, dtype=np.int64)
    counts, threshold, qrows, depth = counts[ok], threshold[ok], qrows[ok], depth[ok]
    # One sort of (row, value, index) keys: each row's candidates stay in its own stretch.
    bits = (part.ravel()[flat] + np.float32(0.0)).view(np.int32)  # -0.0 becomes +0.0
    bits ^= (bits >> 31) & np.int32(0x7FFFFFFF)  # monotone signed; + 2**31: unsigned
    keys = (bits.astype(np.int64) + 2 ** 31) << idx_bits
    del bits
    keys += flat  # then less the row offset, plus the row in the top bits: the column
    keys -= np.repeat(ok * n_ref - (np.arange(ok.size) << (32 + idx_bits)), counts)
    keys.sort()
    # Only a row's first depth + margin candidates are read: the rest are dropped here
    # (what follows them, the first dropped value or the threshold, bounds the unlisted).
    kept = np.minimum(counts, depth + 32 + depth // 64)
    starts = np.cumsum(counts) - counts
    ends = starts + kept
    follows = threshold.astype(np.float64)
    cut_short = kept < counts
    if cut_short.any():
        high = ((keys[ends[cut_short]] >> idx_bits) & np.int64(0xFFFFFFFF)) - 2 ** 31
        follows[cut_short] = _from_monotone(high.astype(np.int32))
    if cut_short.any():
        keys = keys[np.repeat(ends - kept, kept) + _ramp(kept)]
    starts = np.cumsum(kept) - kept
    ends = starts + kept
    idx = keys & np.int64((1 << idx_bits) - 1)
    rel = ref_keys[idx] == np.repeat(query_keys[qrows], kept)
    if frame.exact:  # exact float32 values: the (value, index) order is the brute force's
        return settled, rel, starts
    vals = _from_monotone((((keys >> idx_bits) & np.int64(0xFFFFFFFF)) - 2 ** 31)
                          .astype(np.int32))
    del keys
    # 2. Per-row slacks, valid for every listed candidate (values between the first and
    # the last listed, norms at most the largest listed), checked in float32.
    q_sq = frame.q_sq[qrows]
    v_first = vals[starts].astype(np.float64) + q_sq
    v_last = vals[ends - 1].astype(np.float64) + q_sq
    b_max = np.maximum.reduceat(frame.r_norm[idx], starts)
    s_hi, s_lo = frame.slacks(v_first, v_last, qrows, b_max)
    total = (s_hi + s_lo) * (1 + 2.0 ** -20) + 2.0 ** -45 * np.maximum(np.abs(v_first),
                                                                        np.abs(v_last))
    sep = np.empty(vals.size, dtype=bool)  # sep[p]: a certain gap after position p
    with np.errstate(over="ignore", invalid="ignore"):
        # the float32 gap g = fl(delta) has |g - delta| <= 2**-24 |delta|, so g > total32,
        # with total32 >= total (1 + 2**-20), makes the exact gap delta exceed total
        total32 = np.nextafter(total.astype(np.float32), np.float32(np.inf))
        total32[~np.isfinite(total)] = np.inf
        np.greater(vals[1:] - vals[:-1], np.repeat(total32, kept)[:-1], out=sep[:-1])
    sep[ends - 1] = True  # after a row's last candidate: its unlisted, checked below
    # 3. The first certain gap at or after depth - 1 (the row's last candidate at the
    # latest) settles the row if it also precedes every unlisted reference (each has a
    # value at least ``follows``).
    gaps = np.flatnonzero(sep)
    cut = gaps[np.searchsorted(gaps, starts + depth - 1)]
    beyond = frame.beyond(follows + q_sq, qrows)
    with np.errstate(invalid="ignore"):
        limit = beyond - s_hi
        limit = np.where(np.isfinite(limit), limit - 2.0 ** -50 * np.abs(limit), limit)
        certain = vals[cut].astype(np.float64) + q_sq < limit
    settled[ok] = certain
    # Runs of uncertain gaps that mix relevance and start before the depth: float64.
    p = np.flatnonzero(~sep[:-1] & (rel[1:] != rel[:-1]))
    owner = np.searchsorted(ends, p, side="right")  # the row of each gap
    p = p[(p < cut[owner]) & certain[owner]]
    if p.size:
        _rerank_runs(vals, idx, rel, p, sep, cut, starts, depth, qrows, q_sq, frame,
                     ref_keys, query_keys)
    return settled, rel, starts[certain]


def _ramp(lengths):
    """``0, 1, ..., n - 1`` for each ``n`` of ``lengths``, concatenated."""
    return np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths)


def _from_monotone(bits):
    """Float32 values of their monotone int32 codes (see ``_order_keys``)."""
    return (bits ^ ((bits >> 31) & np.int32(0x7FFFFFFF))).view(np.float32)


def _rerank_runs(vals, idx, rel, p, sep, cut, starts, depth, qrows, q_sq, frame,
                 ref_keys, query_keys):
    """Re-rank, by float64 distance then index, the runs holding the uncertain gaps ``p``.

    A run is a maximal stretch of positions joined by uncertain gaps (``~sep``)
    before the row's ``cut``; only runs starting before the row's depth are
    re-ranked. ``idx`` and ``rel`` are updated in place.
    """
    row = np.searchsorted(starts, p, side="right") - 1
    start, end = p.copy(), p + 1  # first and last position of the run
    # a row's first position follows the previous row's last, a certain gap
    grow = (start > 0) & ~sep[np.maximum(start - 1, 0)]
    while grow.any():
        start[grow] -= 1
        grow &= (start > 0) & ~sep[np.maximum(start - 1, 0)]
    grow = (end < cut[row]) & ~sep[end]
    while grow.any():
        end[grow] += 1
        grow &= (end < cut[row]) & ~sep[end]
    first = np.ones(start.size, dtype=bool)  # p is increasing: one entry per run
    first[1:] = start[1:] != start[:-1]
    start, end, row = start[first], end[first], row[first]
    keep = start - starts[row] < depth[row]
    start, end, row = start[keep], end[keep], row[keep]
    if start.size == 0:
        return
    length = end - start + 1
    segment = np.repeat(np.arange(length.size), length)
    pos = _ramp(length) + np.repeat(start, length)
    ref = idx[pos]
    v = vals[pos].astype(np.float64) + np.repeat(q_sq[row], length)
    segment, needed = _split_runs(v, ref, segment, length, qrows[row], frame)
    pos, ref, segment = pos[needed], ref[needed], segment[needed]
    if ref.size == 0:
        return
    query = qrows[np.repeat(row, length)[needed]]
    dist = frame.exact_distances(query, ref)
    idx[pos] = ref[_order_segments(segment, dist, ref)]
    rel[pos] = ref_keys[idx[pos]] == query_keys[query]


def _split_runs(v, ref, segment, length, run_qrows, frame):
    """Split runs where the slacks of their own candidates certify a gap.

    The row's slacks use the largest reference norm of the whole list; a run's
    own largest norm, and so its slacks, are usually smaller (the same bounds,
    valid for values between the run's first and last). Returns new segment ids
    (non-decreasing) and which positions still need float64 (pieces of two or more).
    """
    first = np.cumsum(length) - length
    last = first + length - 1
    b_run = np.maximum.reduceat(frame.r_norm[ref], first)
    s_hi, s_lo = frame.slacks(v[first], v[last], run_qrows, b_run)
    inner = np.ones(v.size, dtype=bool)
    inner[last] = False  # the last candidate of a run has no next
    cut = np.zeros(v.size, dtype=bool)
    with np.errstate(invalid="ignore"):
        gap = v[1:][inner[:-1]] - v[:-1][inner[:-1]]
        cut[inner] = gap * (1 - 2.0 ** -50) > (s_hi + s_lo)[segment[inner]]
    begins = np.ones(v.size, dtype=bool)  # a new piece after every certain gap
    begins[1:] = (segment[1:] != segment[:-1]) | cut[:-1]
    piece = np.cumsum(begins) - 1
    sizes = np.bincount(piece)
    return piece, sizes[piece] > 1
