"""Step 1 of the neighbour search: the ``L`` smallest values of each row, sorted.

A block's search values (float32, or float64 in a wide frame) go in; the ``L``
smallest of each row come out with their columns, sorted by (value, index). On
the CPU in numpy: one comparison of each row with a threshold drawn from a sample
of it (or from column-group minima for short lists), then one sort of int64 keys,
the float32 bits of the value made monotone above the column (long lists are first
put nearly in order by a radix pass over 16-bit buckets of their values, which the
sort then runs through quickly); float64 values are
listed, and returned, as their float32 roundings (the certificate allows for the
rounding). On an accelerator, ``torch.topk`` then a stable sort. See
:mod:`skdml.metrics._neighbors` for how the lists are certified.
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["smallest", "order_segments", "pair_runs", "segment_cells"]

#: Host bytes of the temporaries of one CPU selection step (8 bytes per value).
_SELECT_BYTES = 32 * 2**20


def _lexsort_rows(vals, idx):
    """Sort each row by (value, index), ascending."""
    order = torch.argsort(idx, dim=1)
    vals, idx = vals.gather(1, order), idx.gather(1, order)
    order = torch.sort(vals, dim=1, stable=True)[1]
    return vals.gather(1, order), idx.gather(1, order)


def _order_keys(vals, idx):
    """int64 keys sorting as ``(value, index)``: the float32 bits made monotone, then the index.

    ``idx`` (non-negative, below ``2**32``) fills the low 32 bits. Written in place
    on fresh arrays: a few passes over the candidates, not one temporary per step.
    """
    bits = vals.astype(np.float32)  # a fresh copy (the float32 rounding of float64 values)
    bits += np.float32(0.0)  # -0.0 becomes +0.0, its equal
    bits = bits.view(np.int32)
    bits ^= (bits >> 31) & np.int32(0x7FFFFFFF)  # negatives: reverse their order
    keys = bits.astype(np.int64)
    keys <<= 32
    keys |= idx
    return keys


def smallest(D, rows, L, full):
    """The ``L`` smallest values of rows ``rows`` of ``D``, sorted by (value, index), on the host.

    On the CPU, numpy (see :func:`_sorted_candidates`); on an accelerator,
    ``torch.topk`` then a stable sort. Float64 values (a wide frame) on the CPU
    are listed by their float32 rounding, then index, and ``vals`` holds those
    roundings: each within half a float32 ulp of its value, which the
    certificate (:func:`~skdml.metrics._neighbors._settle`) adds to its slacks.

    Returns ``vals``, ``idx`` (``(n_rows, L)``) and ``floor`` (``(n_rows,)``): every
    reference not listed in a row has a value at or above its floor, the last
    listed value, or for float64 values the float32 number just below the last
    listed rounding (an unlisted value may lie below the last listed one).
    """
    if D.device.type != "cpu":
        sub = D if rows.size == D.shape[0] else D[torch.as_tensor(rows, device=D.device)]
        if full:
            vals, idx = torch.sort(sub, dim=1, stable=True)
        else:
            vals, idx = _lexsort_rows(*torch.topk(sub, L, dim=1, largest=False))
        vals = vals.cpu().numpy()
        return vals, idx.cpu().numpy(), vals[:, -1]
    A = D.numpy()
    n_ref = A.shape[1]
    vals = np.empty((rows.size, L), dtype=np.float32)
    idx = np.empty((rows.size, L), dtype=np.int64)
    step = max(1, _SELECT_BYTES // (8 * n_ref))
    contiguous = rows.size and rows[-1] - rows[0] == rows.size - 1
    for first in range(0, rows.size, step):
        in_d = rows[first:first + step]
        part = A[in_d[0]:in_d[-1] + 1] if contiguous else A[in_d]
        out = slice(first, first + step)
        _sorted_candidates(part, L, full, vals[out], idx[out])
    if A.dtype == np.float32:
        return vals, idx, vals[:, -1]
    # cut by float32 rounding: an unlisted value rounds at or above the last listed one, so
    # it lies above the float32 number just below that rounding (not above the last value)
    return vals, idx, np.nextafter(vals[:, -1], np.float32(-np.inf))


def _sorted_candidates(part, L, full, vals, idx):
    """The ``L`` smallest values of each row of ``part`` and their columns, sorted (host).

    Writes them into ``vals`` (float32: the values, or the float32 roundings of
    float64 ones) and ``idx`` (``(n_rows, L)``), read back from the sorted int64
    keys: the float32 rounding of the value (monotone bits) above the column, so
    the keys sort as (rounded value, index).
    """
    out = _sorted_keys(part, L, full)
    np.bitwise_and(out, np.int64(0xFFFFFFFF), out=idx)
    high = (out >> 32).astype(np.int32)  # the value's bits, made monotone: undo it
    vals[...] = (high ^ ((high >> 31) & np.int32(0x7FFFFFFF))).view(np.float32)


def _buckets(values, counts):
    """Each value's bucket (uint16), linear in ``[min, max]`` of its row's run, or None.

    ``values``: the candidates of consecutive rows, ``counts`` of each (rows with
    none are allowed). In float32 (a bucket's rounding only moves work between the
    two sorts). None where a value is not a finite float32 (the caller sorts directly).
    """
    values = values.astype(np.float32, copy=False)
    if not np.isfinite(values).all():
        return None
    filled = counts[counts > 0]
    starts = np.cumsum(filled) - filled
    lo = np.minimum.reduceat(values, starts)
    with np.errstate(over="ignore"):
        spread = np.maximum.reduceat(values, starts) - lo
    spreads = np.isfinite(spread) & (spread > 2.0 ** -100)
    lo[~spreads] = 0.0  # a row whose spread overflows or vanishes: every bucket 0
    # below 65535 by more than float32's rounding of the product: no bucket overflows
    scale = np.divide(np.float32(65535 * (1 - 2.0 ** -12)), spread,
                      out=np.zeros_like(spread), where=spreads)
    buckets = values - np.repeat(lo, filled)
    buckets *= np.repeat(scale, filled)
    return buckets.astype(np.uint16)


def _sorted_keys(part, L, full):
    """The ``(rounded value, index)`` keys of the ``L`` smallest values of each row, sorted."""
    n_rows, n_ref = part.shape
    if full:
        keys = _order_keys(part, np.arange(n_ref)[None, :])
        keys.sort(axis=1)
        return keys
    out = np.empty((n_rows, L), dtype=np.int64)
    todo = np.ones(n_rows, dtype=bool)
    stride = L // 64
    threshold = None
    if stride >= 2:
        # A threshold from every stride-th column: the values <= it are a few more than L
        # in most rows (one comparison per value instead of a selection); rows where they
        # are too few or too many fall back to the selection below.
        sample = part[:, ::stride]
        rank = min(sample.shape[1] - 1, (5 * L) // (4 * stride) + 8)
        threshold = np.partition(sample, rank, axis=1)[:, rank]
    elif n_ref >= 64 * L:
        # Short lists: the L-th smallest of the minima of 4 L column groups. L groups have
        # their minimum at or below it, so at least L values are: usually a few more than
        # L (one reduction and one comparison per value instead of a selection).
        width = n_ref // (4 * L)
        minima = part[:, :width * 4 * L].reshape(n_rows, 4 * L, width).min(axis=2)
        threshold = np.partition(minima, L - 1, axis=1)[:, L - 1]
    if threshold is not None:
        flat = np.flatnonzero(part <= threshold[:, None])  # row by row, rows in order
        counts = np.diff(np.searchsorted(flat, np.arange(n_rows + 1) * n_ref))
        good = (counts >= L) & (counts <= 4 * L)
        if good.any():
            # keys above the flat index: within a row it orders as the column does, and the
            # row's offset is taken off the L kept keys (no borrow: flat >= offset)
            listed = np.take(part.ravel(), flat)
            keys = _order_keys(listed, flat)
            ends = np.cumsum(counts)
            if stride >= 2:  # long lists: one sort per row
                # The keys put nearly in order by one stable radix pass over their values'
                # 16-bit buckets (a bucket keeps column order), then sorted exactly by a
                # stable sort (timsort: about one comparison per key through ordered
                # stretches): half the time of sorting the keys directly on the CPU. Only
                # the time depends on the buckets, never the result.
                buckets = _buckets(listed, counts)
                for r in np.flatnonzero(good):
                    run = slice(ends[r] - counts[r], ends[r])
                    if buckets is None:
                        row_keys = keys[run]
                        row_keys.sort()
                    else:
                        row_keys = keys[run][np.argsort(buckets[run], kind="stable")]
                        row_keys.sort(kind="stable")
                    np.subtract(row_keys[:L], r * n_ref, out=out[r])  # the row's offset
            else:  # short lists: one sort of a padded (rows, longest) table
                owner = np.repeat(np.arange(n_rows), counts)
                keep = good[owner]
                table = np.full((n_rows, int(counts[good].max())), np.iinfo(np.int64).max)
                table[owner[keep], (np.arange(flat.size) - (ends - counts)[owner])[keep]] = \
                    keys[keep]
                table = table[good]
                table.sort(axis=1)
                out[good] = table[:, :L] - (np.flatnonzero(good) * n_ref)[:, None]
            todo &= ~good
    if todo.any():
        # a partition of the unique (value, index) keys: the L smallest in that order (where
        # the values tie past the list, the lowest columns), and no slow selection on tied
        # rows (np.argpartition took 7-9x longer on rows of equal values)
        keys = _order_keys(part[todo], np.arange(n_ref)[None, :])
        keys = np.partition(keys, L - 1, axis=1)[:, :L] if L < n_ref else keys
        keys.sort(axis=1)
        out[todo] = keys
    return out


def order_segments(segment, dist, ref):
    """The permutation sorting each run of equal ``segment`` ids by ``(dist, ref)``.

    ``segment`` is non-decreasing. Runs of two (most of them) are ordered by one
    vectorised compare-and-swap; only the longer runs go through ``np.lexsort``.
    """
    order = np.arange(segment.size)
    sizes = np.bincount(segment)
    first = np.cumsum(sizes) - sizes
    pairs = first[sizes == 2]
    if pairs.size:
        a, b = pairs, pairs + 1
        swap = (dist[b] < dist[a]) | ((dist[b] == dist[a]) & (ref[b] < ref[a]))
        order[a[swap]], order[b[swap]] = b[swap], a[swap]
    longer = (sizes > 2)[segment]
    if longer.any():
        rest = np.flatnonzero(longer)
        order[rest] = rest[np.lexsort((ref[rest], dist[rest], segment[rest]))]
    return order


def pair_runs(jr, jc):
    """Runs of consecutive pairs ``(j, j + 1)`` within a row: each run's first pair and size.

    ``jr``, ``jc``: row and position of each pair, in row-major order. A run of ``n``
    pairs is a segment of ``n + 1`` consecutive positions.
    """
    starts = np.ones(jr.size, dtype=bool)
    starts[1:] = (jr[1:] != jr[:-1]) | (jc[1:] != jc[:-1] + 1)
    first = np.flatnonzero(starts)
    return first, np.diff(np.append(first, jr.size))


def segment_cells(rows, starts, length):
    """Segment id, row and position of every cell of the segments ``(row, start, length)``."""
    segment = np.repeat(np.arange(length.size), length)
    offset = np.arange(segment.size) - np.repeat(np.cumsum(length) - length, length)
    return segment, np.repeat(rows, length), np.repeat(starts, length) + offset
