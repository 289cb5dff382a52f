"""The arithmetic that makes the neighbour search exact: a float32 frame, rigorous
bounds on its error, and the float64 distances that settle what the bounds cannot.

The reference ranking
---------------------
Neighbours are ranked by the float64 distance a brute force computes,

- Euclidean: ``sum((x_r - x_q) ** 2)`` (numpy, float64), after both sets are
  multiplied by one power of two ``2**e_ref`` chosen so that the largest ``|x|``
  sits below ``2**M`` with ``4 d 4**M < 2**1023``: no square can overflow, and
  since scaling by a power of two commutes with rounding, this equals the unscaled
  brute force wherever that one neither overflows nor underflows;
- cosine: ``sum((u_r - u_q) ** 2)`` (that is ``2 - 2 cos``) with
  ``u = x / sqrt(sum(x * x))`` computed in float64 (each row first scaled by a
  power of two, which changes nothing but avoids overflow). The distance of
  the unit rows, not ``-sum(u_q * u_r)``: near 1 the cosine itself carries no
  float64 digit of the differences (at an offset ``X + 1e8`` every cosine is
  ``1 - 1e-16``), while ``u_r - u_q`` keeps them. An all-zero row is given one
  extra coordinate 1 (every other row 0 there), so that it lies near 2 from
  every non-zero row, and its distances are set to exactly 2 (similarity 0),
  also from another all-zero row: the zero-vector convention of
  ``doc/metrics.md``, the one of scikit-learn's ``cosine_distances`` and of
  faiss's inner product of normalised rows. An all-zero *query* is therefore
  at distance 2 from every reference, and its neighbours are the references
  in index order (the engine lists them without a search). The cosine search
  of the other queries is then the Euclidean search of these rows;

ties broken by the lower reference index.

The float32 frame
-----------------
The search itself runs in float32: ``z = fl32((x - c) * 2**s)``. ``c`` is the
coordinate-wise median of (a subsample of) the references, so an outlier cannot
drag the bulk of the data away from the origin; ``2**s`` puts ``max |x - c|`` at
``2**m`` with ``4 d 4**m < 2**126``, so no float32 square overflows. When every
value lies on a grid ``h = 2**g`` (integers, pixels) and the frame's norms are
small enough, the frame is *exact*: ``z = (x - round(c / h) h) / h`` holds
integers and every float32 operation of the search is exact, so float32 ranks
exactly and nothing below is needed.

The float64 frame
-----------------
With ``wide=True`` (chosen by the search for deep lists among many references,
where float32's near-ties are many) the frame is ``z = fl64((x - c) * 2**s)`` and
the product runs in float64: the bounds below hold with ``u = 2**-53`` in place
of ``2**-24`` (for ``gamma_{d+3}`` of the product and in ``u1``), and the float32
subnormal terms stay as an upper bound of float64's. A frame on a grid is
widened from its float32 values, which are integers below ``2**23`` (exact).

Error bounds (Euclidean)
------------------------
With ``u = 2**-24``, ``gamma_n = n u / (1 - n u)``, ``a = ||z_q||``, ``b = ||z_r||``
(float64) and ``v = fl32(||z_r||^2 - 2 <z_q, z_r>) + ||z_q||^2`` the search value,
for ``t = ||z_q - z_r||``:

- ``|v - t^2| <= E = gamma_{d+3} (b^2 + 2 a b) + gamma64_{d+3} (a^2 + |v|) + (2d+6) 2**-150``
  (any summation order of the GEMM; Cauchy-Schwarz; subnormal underflow). The GEMM
  forms ``||z_r||^2 - 2 <z_q, z_r>`` as the dot product of ``[-2 z_q, 1]`` and
  ``[z_r, fl32(||z_r||^2)]``: ``d + 1`` terms whose magnitudes sum to at most
  ``2ab + (1 + u) b^2``, so ``gamma_{d+1}`` of that sum plus the ``u b^2`` of the
  stored norm stays within the ``gamma_{d+3}`` term (the ``-2`` is exact);
- ``|t - S| <= u1 (a' + b') + 2 sqrt(d) 2**-150`` where ``S = 2**s ||x_q - x_r||``
  is the exact distance, ``u1 = u + 2 u64`` the rounding of ``z`` and
  ``a' = (a + sqrt(d) 2**-150) / (1 - u1)`` bounds ``||2**s (x_q - c)||``;
- the brute force's ``d64`` satisfies ``|d64 k^2 - S^2| <= gamma64_{d+3} S^2 + zeta64``
  (``k`` the ratio of the two frames' scales).

Hence an interval ``[lo, hi]`` per candidate that contains its brute-force
distance (in frame units). For the references *not* returned by the top-``L``
search, ``v >= v_L``, and with ``b <= a + t`` the same inequalities give one lower
bound ``lo_beyond(v_L, a)`` for all of them (a quadratic in ``t``).

Every bound is widened by a relative ``2**-40`` for the float64 evaluation of the
bounds themselves. Matrix products run with float32 accumulation (TF32/bfloat16
are switched off for the search).
"""

from __future__ import annotations

import math
from contextlib import contextmanager

import numpy as np
import torch

from .._utils._torch import ProcessSetting

__all__ = ["Frame", "UnitRows", "centre_on_median", "ieee_float32", "normalise_rows",
           "pair_distances", "zero_rows"]

_U32 = 2.0 ** -24
_U64 = 2.0 ** -53
_SUB32 = 2.0 ** -150  # largest error of a rounding into float32's subnormal range
_WIDEN = 2.0 ** -40
_CHUNK = 2 ** 21  # float64 elements per host temporary (16 MiB)
_SAMPLE = 4096  # rows sampled for the robust centre
_INF = float("inf")


def _gamma(n, u):
    return n * u / (1.0 - n * u)


#: torch's matmul precision while searches run: full float32 (see :func:`ieee_float32`).
_FULL_FLOAT32 = ProcessSetting(torch.get_float32_matmul_precision,
                               torch.set_float32_matmul_precision, "highest")


@contextmanager
def ieee_float32():
    """Run matrix products in full float32 (no TF32/bfloat16), then restore the setting.

    torch's setting is process-wide: it is held from the first search of any thread to
    enter until the last leaves (:class:`~skdml._utils._torch.ProcessSetting`; a search
    that saved another's "highest" and put it back, or one that put the caller's back
    while another ran, left a running search below full float32).
    """
    with _FULL_FLOAT32:
        yield


def _abs_max(X):
    """The largest ``|x|`` of an array (0 for an empty one)."""
    return max(float(np.max(X, initial=0.0)), -float(np.min(X, initial=0.0)))


def normalise_rows(A):
    """Divide the rows of float64 ``A`` by their L2 norm, in place; zero rows stay zero.

    The squares are summed row by row in one order whatever ``A``'s memory layout (a
    Fortran-ordered copy was summed in another order: the same row got another last bit).
    """
    peak = np.max(np.abs(A), axis=1)
    np.ldexp(A, -np.frexp(peak)[1][:, None], out=A)  # exact: a power of two per row
    norm = np.sqrt(np.sum(np.multiply(A, A, order="C"), axis=1))
    norm[norm == 0.0] = 1.0
    A /= norm[:, None]
    return A


def centre_on_median(X):
    """A float64 copy of ``X`` centred on its coordinate-wise median, its peak in ``[0.5, 1)``.

    A translation and a power of two change no argmin nor k-means partition, so
    the scorers that compute in float64 start from this: offsets (``X + 1e8``)
    no longer cancel in the products, nor do extreme scales (``1e200``) overflow
    in them. Centred before the scaling (a huge offset scaled first would flush
    the rest into subnormals), after halving twice where the difference from
    the median could overflow (values of 1e308 beside -1e308). Every step is
    exact but for subnormals; a constant ``X`` becomes all zeros.
    """
    X = np.array(X, dtype=np.float64)
    if _abs_max(X) >= 2.0 ** 1022:
        np.ldexp(X, -2, out=X)
    X -= np.median(X, axis=0)
    peak = _abs_max(X)
    if peak > 0:
        np.ldexp(X, -math.frexp(peak)[1], out=X)
    return X


def zero_rows(X):
    """Boolean mask of the all-zero rows of ``X`` (read in chunks)."""
    out = np.empty(X.shape[0], dtype=bool)
    step = max(1, _CHUNK // max(X.shape[1], 1))
    for start in range(0, X.shape[0], step):
        out[start:start + step] = ~np.any(np.asarray(X[start:start + step]) != 0, axis=1)
    return out


def pair_distances(Q, R, indices, metric):
    """Float64 distances of each query to its listed references, as the engine ranks them.

    Euclidean: ``sqrt(sum((r - q) ** 2))``, computed after scaling both sets by
    one power of two (exact) so that no square overflows; cosine: ``1 - cos``
    computed as ``|u - v|^2 / 2`` of rows normalised in float64, and exactly 1
    (similarity 0) where either row is all-zero (the zero-vector convention,
    see the module docstring). Both are the float64 values the engine ranks by
    (same scaling, same expressions) passed through a monotone map, so each
    row of ``indices`` from :func:`~skdml.metrics.nearest_neighbors` gets a
    non-decreasing row of distances.
    """
    n_q, k = indices.shape
    out = np.empty((n_q, k))
    d = Q.shape[1]
    if n_q == 0 or k == 0:
        return out
    if metric == "euclidean":
        peak = max(float(np.max(np.abs(Q))), float(np.max(np.abs(R))))
        e = int((1020 - math.log2(d)) // 2) - math.frexp(peak)[1] if peak > 0 else 0
    step = max(1, _CHUNK // (d * k))
    for start in range(0, n_q, step):
        rows = indices[start:start + step]
        A = np.array(Q[start:start + step], dtype=np.float64, order="C")  # normalised in place
        B = np.array(R[rows.ravel()], dtype=np.float64).reshape(rows.shape + (d,))
        if metric == "euclidean":
            B = np.ldexp(B, e) - np.ldexp(A, e)[:, None, :]
            out[start:start + step] = np.ldexp(np.sqrt(np.sum(B * B, axis=2)), -e)
        else:
            zero = ~np.any(B != 0, axis=2) | ~np.any(A != 0, axis=1)[:, None]
            A = normalise_rows(A)
            B = normalise_rows(B.reshape(-1, d)).reshape(B.shape)
            # half the squared distance of unit rows, = 1 - cos: the engine's own key, so each
            # row stays sorted even at large offsets where 1 - <u, v> has no digits left
            B = B - A[:, None, :]
            out[start:start + step] = np.where(zero, 1.0, 0.5 * np.sum(B * B, axis=2))
    return out


class UnitRows:
    """The rows of ``X`` divided by their norm in float64, made on demand (chunk by chunk).

    What the cosine search ranks (see the module docstring): rows read by index
    or slice are normalised when read, so no float64 copy of ``X`` is held.
    With ``lift``, a last coordinate is 1 on all-zero rows and 0 elsewhere.
    """

    def __init__(self, X, lift):
        self.X, self.lift = X, lift
        self.shape = (X.shape[0], X.shape[1] + int(lift))

    @staticmethod
    def has_zero_row(X):
        step = max(1, _CHUNK // X.shape[1])
        return any(not np.all(np.any(X[start:start + step] != 0, axis=1))
                   for start in range(0, X.shape[0], step))

    def __getitem__(self, rows):
        A = normalise_rows(np.array(self.X[rows], dtype=np.float64, ndmin=2, order="C"))
        if self.lift:
            A = np.hstack([A, (~np.any(A != 0, axis=1)).astype(np.float64)[:, None]])
        return A

    def _reduce(self, op):
        step = max(1, _CHUNK // self.shape[1])
        return op([op(self[start:start + step], axis=0)
                   for start in range(0, self.shape[0], step)], axis=0)

    def min(self, axis):
        return self._reduce(np.min)

    def max(self, axis):
        return self._reduce(np.max)


def _lowest_bit(values):
    """Exponent of the lowest set bit over the nonzero float64 ``values`` (None if all 0)."""
    values = values[values != 0.0]
    if values.size == 0:
        return None
    mant, ex = np.frexp(values)
    ints = (np.abs(mant) * 2.0 ** 53).astype(np.int64)
    low = np.frexp((ints & -ints).astype(np.float64))[1] - 1
    return int(np.min(ex - 53 + low))


def _grid_step(sets, span):
    """Coarsest power of two ``h`` dividing every value, if ``span < 2**23 h``; else None."""
    sample = np.concatenate([np.asarray(X[:: max(1, X.shape[0] // 256)], np.float64).ravel()
                             for X in sets])
    g = _lowest_bit(sample)
    g = 0 if g is None else g
    if not span < _power_of_two(23 + g):
        return None
    for X in sets:
        step = max(1, _CHUNK // X.shape[1])
        for start in range(0, X.shape[0], step):
            low = _lowest_bit(np.asarray(X[start:start + step], np.float64).ravel())
            g = g if low is None else min(g, low)
            if not span < _power_of_two(23 + g):
                return None
    return math.ldexp(1.0, g)


def _power_of_two(e):
    """``2**e`` as a float, ``inf`` past float64's range (a span is always below it)."""
    return math.ldexp(1.0, e) if e < 1024 else math.inf


class Frame:
    """Float32 copies of queries and references, their error bounds, float64 distances.

    Parameters
    ----------
    Q, R : ndarray of float32 or float64
        Validated queries and references (``Q is R`` when ``exclude_self``).
    exclude_self : bool
    metric : {"euclidean", "cosine"}
    device : torch.device
    wide : bool, default=False
        A float64 frame (``z`` rounded to float64, the product in float64) for
        data off a grid: twice the product's cost, and bounds ``2**29`` times
        tighter, so that near-ties of float32 (dense values, deep lists) no
        longer need the float64 brute force. A frame on a grid stays float32.
    """

    def __init__(self, Q, R, *, exclude_self, metric, device, wide=False):
        self.exclude_self = exclude_self
        #: All-zero queries under cosine: at distance 2 from every reference, listed in
        #: index order without a search (``None``: there are none).
        self.zero_queries = None
        if metric == "cosine":  # the Euclidean search of the unit rows (module docstring)
            zero_q = zero_rows(Q)
            self.zero_queries = zero_q if zero_q.any() else None
            lift = bool(zero_q.any()) or (not exclude_self and UnitRows.has_zero_row(R))
            Q = UnitRows(Q, lift)
            R = Q if exclude_self else UnitRows(R, lift)
        elif max(_abs_max(Q), _abs_max(R)) >= 2.0 ** 1021:
            # differences of values this large overflow (1e308 - -1e308): work on the data
            # times 2**-3, the same order (exact but for subnormals, which the float64
            # brute force below loses anyway at this scale)
            Q = np.ldexp(np.asarray(Q, dtype=np.float64), -3)
            R = Q if exclude_self else np.ldexp(np.asarray(R, dtype=np.float64), -3)
        self.Q, self.R, self.metric = Q, R, metric
        self.d = d = Q.shape[1]
        self.exact = False
        #: Brute-force distances times ``2**frame_exp`` are in frame units.
        self.frame_exp = 0
        sets = (R,) if exclude_self else (Q, R)
        lo = np.min([X.min(axis=0) for X in sets], axis=0).astype(np.float64)
        hi = np.max([X.max(axis=0) for X in sets], axis=0).astype(np.float64)
        sub = np.asarray(R[:: max(1, R.shape[0] // _SAMPLE)], np.float64)
        centre = np.median(sub, axis=0)
        # Brute-force frame: the largest |x| just below 2**M.
        peak = max(float(np.max(np.abs(lo))), float(np.max(np.abs(hi))))
        m_ref = int((1020 - math.log2(d)) // 2)
        self.e_ref = m_ref - math.frexp(peak)[1] if peak > 0 else 0
        grid = _grid_step(sets, float(np.max(hi - lo)))
        if grid is not None:
            centre = np.round(centre / grid) * grid
            exp = -math.frexp(grid)[1] + 1  # 2**exp == 1 / grid
        else:
            spread = max(float(np.max(hi - centre)), float(np.max(centre - lo)))
            m = int((122 - math.log2(d)) // 2)
            exp = m - math.frexp(spread)[1] if spread > 0 else 0
        # Off a grid a float64 frame is built in float64; on a grid z holds integers below
        # 2**23, exact in float32, widened below once the frame is known not to be exact.
        dtype = np.float64 if wide and grid is None else np.float32
        # the frame's values straight into the two factors of the search's product (below)
        Zq, self.q_sq = self._to_frame(Q, centre, exp, dtype)
        if exclude_self:
            Zr, self.r_sq64 = None, self.q_sq
        else:
            Zr, self.r_sq64 = self._to_frame(R, centre, exp, dtype, transposed=True)
        self.q_norm, self.r_norm = np.sqrt(self.q_sq), np.sqrt(self.r_sq64)
        self.r_norm_max = float(self.r_norm.max()) if self.r_norm.size else 0.0
        if grid is not None:
            reach = float(np.max(self.q_norm)) + float(np.max(self.r_norm))
            self.exact = reach * reach <= 2.0 ** 24 * (1 - 2.0 ** -30)
        #: A float64 frame (see ``wide``), and the unit roundoffs of its product and its ``z``.
        self.wide = bool(wide) and not self.exact
        if self.wide and Zq.dtype != np.float64:
            Zq = Zq.astype(np.float64)
            Zr = None if Zr is None else Zr.astype(np.float64)
        if Zr is None:
            Zr = np.empty((d + 1, Zq.shape[0]), dtype=Zq.dtype)
            Zr[:d] = Zq[:, :d].T
        # The search values ||z_r||^2 - 2 <z_q, z_r> as one product, [-2 z_q, 1] . [z_r,
        # ||z_r||^2]: a dot product of d + 1 terms, within the bound above (the -2 is exact),
        # at half the cost of a product plus a broadcast addition of the norms (addmm).
        Zr[d] = self.r_sq64  # rounded to the frame's dtype
        Zq[:, :d] *= -2
        Zq[:, d] = 1
        self.q_factor = torch.from_numpy(Zq).to(device)  # (n_q, d + 1)
        self.r_factor = torch.from_numpy(Zr).to(device)  # (d + 1, n_ref): read fastest this way
        self.n_ref, self.dtype = Zr.shape[1], self.q_factor.dtype
        self.u = _U64 if self.wide else _U32
        self.u1 = self.u + 2 * _U64
        self.g1 = _gamma(d + 3, self.u) * (1 + 2.0 ** -20)
        self.g64 = _gamma(d + 3, _U64)
        self.zeta = (2 * d + 6) * _SUB32
        self.eta = 2 * math.sqrt(d) * _SUB32 * (1 + 2.0 ** -20)
        self.slack = math.sqrt(d) * _SUB32
        # Underflow of the brute force, in frame units: (d + 3) 2**-1074 k**2.
        self.frame_exp = 2 * (exp - self.e_ref)
        with np.errstate(over="ignore", under="ignore"):
            self.zeta64 = float(np.ldexp(float(d + 3), -1074 + self.frame_exp))

    # ------------------------------------------------------------------ frame
    @staticmethod
    def _to_frame(X, centre, exp, dtype, transposed=False):
        """``z = fl((X - centre) * 2**exp)`` in ``dtype``, with one free column, and float64 ``||z||^2``.

        Returns a host array of shape ``(n, d + 1)``, or ``(d + 1, n)`` when
        ``transposed``, whose last column (row) is left for the caller (zero until then: a
        cast of the frame to float64 reads it), and ``sq``.
        """
        n, d = X.shape
        out = np.empty((d + 1, n) if transposed else (n, d + 1), dtype=dtype)
        if transposed:
            out[d] = 0.0
        else:
            out[:, d] = 0.0
        sq = np.empty(n)
        step = max(1, _CHUNK // max(d, 1))
        for start in range(0, n, step):
            part = np.array(X[start:start + step], dtype=np.float64, order="C")
            part -= centre
            np.ldexp(part, exp, out=part)
            z = part.astype(dtype).astype(np.float64)  # z, rounded to the frame's dtype
            if transposed:
                out[:d, start:start + step] = z.T
            else:
                out[start:start + step, :d] = z
            sq[start:start + step] = np.einsum("ij,ij->i", z, z)
        return out, sq

    def distances(self, rows, exclude_self, out=None):
        """Search values of the queries ``rows`` (a slice or an int array) to every reference.

        On the device, in the frame's dtype (float64 when ``wide``). ``out``: a
        ``(n_rows, n_ref)`` tensor of that dtype to write them into.
        """
        if not isinstance(rows, slice):
            rows = torch.as_tensor(rows, device=self.q_factor.device)
        # ||q - r||^2 - ||q||^2 = ||r||^2 - 2 <q, r>: same ranking per query.
        D = torch.mm(self.q_factor[rows], self.r_factor, out=out)
        if exclude_self:
            own = (torch.arange(*rows.indices(self.q_factor.shape[0]), device=D.device)
                   if isinstance(rows, slice) else rows)
            D[torch.arange(D.shape[0], device=D.device), own] = _INF
        return D

    # ----------------------------------------------------------------- bounds
    def estimate(self, vals, qrows):
        """Float64 search value ``v`` (the squared distance estimate, frame units)."""
        v = vals.astype(np.float64)
        v += self.q_sq[qrows][:, None]
        return v

    def _widen(self, lo, hi, v, E):
        w = _WIDEN * (np.abs(v) + E)
        with np.errstate(invalid="ignore"):
            lo = lo - _WIDEN * np.abs(lo) - w
            hi = hi + _WIDEN * np.abs(hi) + w
            infinite = ~np.isfinite(v)
            lo[infinite], hi[infinite] = _INF, _INF
        return lo, hi

    def intervals(self, v, qrows, idx):
        """``[lo, hi]`` containing each candidate's brute-force distance (frame units)."""
        if self.exact:
            return v, v
        return self._bounds(v, self.q_norm[qrows][:, None], self.r_norm[idx])

    def slacks(self, v_first, v_last, qrows, b_max):
        """Per query, ``(s_hi, s_lo)`` with ``hi <= v + s_hi`` and ``lo >= v - s_lo``.

        Valid for every candidate of the query whose search value lies in
        ``[v_first, v_last]`` and whose reference norm is at most ``b_max``:
        ``hi(v) - v`` and ``v - lo(v)`` grow with ``b`` and, on each side of 0,
        with ``|v|``, so their largest values lie at the two ends, computed with
        ``b_max``. Two comparisons per candidate then replace its interval.
        """
        if self.exact:
            zero = np.zeros_like(v_first)
            return zero, zero
        v = np.stack([v_first, v_last], axis=1)
        b = np.stack([b_max, b_max], axis=1)
        lo, hi = self._bounds(v, self.q_norm[qrows][:, None], b)
        with np.errstate(invalid="ignore"):
            s_hi = np.max(hi - v, axis=1) * (1 + _WIDEN)
            s_lo = np.max(v - lo, axis=1) * (1 + _WIDEN)
        return s_hi, s_lo

    def reach(self, v_last, qrows):
        """Per query, a bound on ``||z_r||`` of every reference whose search value is at most ``v_last``.

        ``||z_r|| <= ||z_q|| + t`` and ``t^2 <= v + E`` (the error bound above, taken
        at the largest reference norm ``B``), capped at ``B``: what the slacks need of
        a query's listed candidates without reading their norms.
        """
        a = self.q_norm[qrows]
        B = self.r_norm_max
        with np.errstate(invalid="ignore", over="ignore"):
            E = self.g1 * (B * B + 2 * a * B) + self.g64 * (a * a + np.abs(v_last)) + self.zeta
            b = (a + np.sqrt(np.maximum(v_last + E, 0.0))) * (1 + _WIDEN)
        return np.where(b < B, b, B)  # NaN-free: an infinite or NaN bound gives B

    def _bounds(self, v, a, b):
        """``[lo, hi]`` for search values ``v``, query norms ``a``, reference norms ``b``."""
        with np.errstate(invalid="ignore"):
            E = self.g1 * (b * b + 2 * a * b) + self.g64 * (a * a + np.abs(v)) + self.zeta
            t_lo = np.sqrt(np.maximum(v - E, 0.0))
            t_hi = np.sqrt(np.maximum(v + E, 0.0))
            delta = self.u1 * (a + b + 2 * self.slack) / (1 - self.u1) * (1 + _WIDEN) + self.eta
            s_lo = np.maximum(t_lo - delta, 0.0)
            s_hi = t_hi + delta
            lo = s_lo * s_lo * (1 - self.g64) - self.zeta64
            hi = s_hi * s_hi * (1 + self.g64) + self.zeta64
        return self._widen(lo, hi, v, E)

    def beyond(self, v_last, qrows):
        """Lower bound on the brute-force distance of every reference with value >= ``v_last``."""
        if self.exact:
            return v_last
        a = self.q_norm[qrows]
        G = (self.g1 + self.g64) / (1 - self.g64)
        zeta = self.zeta / (1 - self.g64)
        with np.errstate(invalid="ignore"):
            # (1 + G) t^2 + 4 G a t + 4 G a^2 + zeta >= v: the smallest such t >= 0.
            inner = (1 + G) * (v_last - zeta) - 4 * G * a * a
            t = np.maximum((np.sqrt(np.maximum(inner, 0.0)) - 2 * G * a) / (1 + G), 0.0)
            a_bound = (a + self.slack) / (1 - self.u1) * (1 + _WIDEN)
            s = np.maximum((t - 2 * self.u1 * a_bound - self.eta) / (1 + self.u1), 0.0)
            lo = s * s * (1 - self.g64) - self.zeta64
        E = G * (2 * a + np.sqrt(np.maximum(v_last, 0.0))) ** 2 + zeta
        return self._widen(lo, lo, v_last, E)[0]

    # -------------------------------------------------------------- float64
    def exact_distances(self, qi, rj):
        """Brute-force float64 distances of the pairs ``(Q[qi], R[rj])`` (see module doc)."""
        out = np.empty(qi.shape[0])
        step = max(1, _CHUNK // self.d)
        for start in range(0, qi.shape[0], step):
            A = np.array(self.Q[qi[start:start + step]], dtype=np.float64)
            B = np.array(self.R[rj[start:start + step]], dtype=np.float64)
            np.ldexp(A, self.e_ref, out=A)
            np.ldexp(B, self.e_ref, out=B)
            B -= A
            lift = getattr(self.Q, "lift", False)
            # the sum over the data's own coordinates (with the lift's too, numpy summed
            # d + 1 terms in another order: a zero row elsewhere moved other pairs' last bit)
            part = np.sum(B[:, :-1] * B[:, :-1] if lift else B * B, axis=1)
            if lift:  # a zero row: exactly 2 (also between two)
                zero_a, zero_b = A[:, -1] != 0, (A[:, -1] + B[:, -1]) != 0
                part = np.where(zero_a | zero_b, np.ldexp(2.0, 2 * self.e_ref), part)
            out[start:start + step] = part
        return out
