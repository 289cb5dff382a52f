"""Cost and gradient of SUML (Dutta, Harandi and Sekhar, AAAI 2020).

Notation (the paper's ``L`` is ``d x l``; ``components_`` is its transpose):

* ``X`` (n, d) data, triplets ``(a, p, n)`` of row indices;
* ``S = [S1; S2]`` (2d, d); a synthetic point is ``S^T [u; v] = S1^T u + S2^T v``;
* ``L`` (d, l).

Fast form
---------
In every one of the five cases the concatenations ``c, c+, c-`` share their
first block (``x_a`` in cases 1, 2, 4, 5 and ``x_p`` in case 3), so every
distance the objective needs is a distance between second blocks:
``s - s+ = S2^T (x_u - x_v)``. With ``B = X_u S2`` computed once on the unique
points ``X_u`` of the triplets and ``G = B L``, each triplet only needs the two
difference rows ``u = B_a - B_p``, ``w = B_p - B_n`` (and ``U, W`` from ``G``):

====  ==========================================  =====================================
case  synthesis loss ``s_c``                        metric loss ``m_c``
====  ==========================================  =====================================
1     ``sp(k|u/2 + w|^2 - |u|^2)``                 ``sp(|U|^2 - k|U/2 + W|^2)``
2     ``sp((t - 1)|w|^2)``                         ``sp((1 - t)|W|^2)``
3     ``sp(k|u + w/2|^2 - |w|^2)``                 ``sp(|W|^2 - k|U + W/2|^2)``
4     ``-|w|^2``                                   ``|W|^2``
5     ``|w|^2``                                    ``-|W|^2``
====  ==========================================  =====================================

with ``sp(x) = log(1 + e^x)``, ``t = tan^2(angle)``, ``k = 4t``. (Case 2's
``c- = c+`` makes ``s- - s_m = (s+ - s)/2``.) The gradient wrt ``S1`` is exactly
zero, as in the paper's gradient formulas (``delta_ap``, ``delta_an``,
``delta_nm`` all have a zero first block). The gradient wrt the rows of ``B``
(and of ``G``) is ``K @ B`` for a sparse symmetric ``K`` made of one 3x3 block per
triplet, whose pattern is precomputed. One cost+gradient evaluation costs
``4 N d^2 + 6 N d l`` FLOPs in dense products plus ``O(|T| (d + l))``.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from scipy.special import expit, log_softmax

__all__ = ["sample_triplets", "SUMLObjective", "torch_objective", "torch_fast_objective"]


def sample_triplets(n_samples, n_triplets, random_state):
    """Draw ``n_triplets`` random triplets of three distinct row indices.

    Parameters
    ----------
    n_samples : int
        Number of rows to draw from (at least 3).
    n_triplets : int
    random_state : numpy.random.RandomState

    Returns
    -------
    triplets : ndarray of shape (n_triplets, 3), dtype int64
    """
    if n_samples < 3:
        raise ValueError(f"Triplets of three distinct rows need at least 3 rows; got {n_samples}.")
    triplets = random_state.randint(0, n_samples, size=(n_triplets, 3)).astype(np.int64)
    while True:
        bad = ((triplets[:, 0] == triplets[:, 1]) | (triplets[:, 0] == triplets[:, 2])
               | (triplets[:, 1] == triplets[:, 2]))
        n_bad = int(bad.sum())
        if n_bad == 0:
            return triplets
        triplets[bad] = random_state.randint(0, n_samples, size=(n_bad, 3))


def _flush(coef, rtol=1e-10):
    """Zero the entries of ``coef`` below ``rtol`` times its largest magnitude."""
    coef = np.asarray(coef)
    big = np.abs(coef).max(initial=0.0)
    tiny = max(float(big) * rtol, float(np.finfo(coef.dtype).tiny)
               if np.issubdtype(coef.dtype, np.floating) else 0.0)
    return np.where(np.abs(coef) < tiny, 0.0, coef).astype(coef.dtype, copy=False)


def _softplus(x):
    return np.logaddexp(0.0, x)


class SUMLObjective:
    """Cost and analytic Euclidean gradient of Eq. (1), averaged over triplets.

    ``J(L, S) = mean_i H_i + ortho_weight * ||L^T L - I||_F^2`` where ``H_i`` is
    the entropy term of triplet ``i``: ``-sum_c p_c log p_c`` with
    ``p_c = sigmoid(-l_c)`` (``probability="sigmoid"``, the paper as written) or
    ``p = softmax(-l)`` over the five cases (``probability="softmax"``).

    Parameters
    ----------
    X : ndarray of shape (n_samples, d)
    triplets : ndarray of shape (n_triplets, 3)
    angle : float
        Angle in degrees.
    ortho_weight : float
    probability : {"sigmoid", "softmax"}
    """

    def __init__(self, X, triplets, *, angle=40.0, ortho_weight=0.5, probability="sigmoid"):
        uniq, inverse = np.unique(np.asarray(triplets).ravel(), return_inverse=True)
        inverse = inverse.reshape(-1, 3)
        self.X_u = np.ascontiguousarray(X[uniq])
        self.dtype = self.X_u.dtype
        self.ia, self.ip, self.in_ = (np.ascontiguousarray(inverse[:, j]) for j in range(3))
        self.n_triplets = inverse.shape[0]
        n_u = self.X_u.shape[0]
        # The gradient wrt the rows of B is K @ B with K = sum_i of a symmetric 3x3 block on
        # rows (a_i, p_i, n_i). Its CSR pattern is fixed by the triplets: precompute it and
        # the slot of each of the 9 |T| block entries, so that K costs one bincount.
        ia, ip, in_ = self.ia, self.ip, self.in_
        rows = np.concatenate([ia, ia, ia, ip, ip, ip, in_, in_, in_])
        cols = np.concatenate([ia, ip, in_, ia, ip, in_, ia, ip, in_])
        keys, self._slot = np.unique(rows.astype(np.int64) * n_u + cols, return_inverse=True)
        self._K_indices = (keys % n_u).astype(np.int32)
        self._K_indptr = np.concatenate(
            [[0], np.cumsum(np.bincount(keys // n_u, minlength=n_u))]).astype(np.int32)
        self._n_u = n_u
        self.t = float(np.tan(np.deg2rad(angle)) ** 2)
        self.k = 4.0 * self.t
        self.ortho_weight = float(ortho_weight)
        self.probability = probability
        self.n_evaluations = 0  # forward passes (cost)
        self.n_gradients = 0  # backward passes (gradient), each after a forward pass
        self._forward_key = None
        self._forward_state = None
        self._cache_key = None
        self._cache_value = None

    # ------------------------------------------------------------------ pieces
    def _norms(self, u, w):
        """The four squared norms |u|^2, |w|^2, |u/2+w|^2, |u+w/2|^2 per triplet."""
        q1 = np.einsum("ij,ij->i", u, u)
        q2 = np.einsum("ij,ij->i", w, w)
        uw = np.einsum("ij,ij->i", u, w)
        q3 = 0.25 * q1 + q2 + uw
        q4 = q1 + 0.25 * q2 + uw
        return q1, q2, q3, q4

    def _case_terms(self, q, Q):
        """Arguments of the softplus terms and the five losses ``l_c``."""
        t, k = self.t, self.k
        fs1 = k * q[2] - q[0]
        fm1 = Q[0] - k * Q[2]
        fs2 = (t - 1.0) * q[1]
        fm2 = (1.0 - t) * Q[1]
        fs3 = k * q[3] - q[1]
        fm3 = Q[1] - k * Q[3]
        l4 = Q[1] - q[1]
        losses = np.stack([_softplus(fs1) + _softplus(fm1), _softplus(fs2) + _softplus(fm2),
                           _softplus(fs3) + _softplus(fm3), l4, -l4], axis=1)
        return (fs1, fm1, fs2, fm2, fs3, fm3), losses

    def _entropy(self, losses):
        """Per-triplet entropy and its derivative wrt each ``l_c``."""
        if self.probability == "sigmoid":
            log_p = -_softplus(losses)
            p = np.exp(log_p)
            entropy = -(p * log_p).sum(axis=1)
            d_losses = p * (1.0 - p) * (1.0 + log_p)
        else:
            log_p = log_softmax(-losses, axis=1)
            p = np.exp(log_p)
            entropy = -(p * log_p).sum(axis=1)
            d_losses = p * (log_p + entropy[:, None])
        return entropy, d_losses

    def _differences(self, M):
        """``u = M_a - M_p`` and ``w = M_p - M_n`` per triplet (two gathers reused in place)."""
        Ma = np.take(M, self.ia, axis=0)
        Mp = np.take(M, self.ip, axis=0)
        u = np.subtract(Ma, Mp, out=Ma)
        np.take(M, self.in_, axis=0, out=self._buffer(M))
        w = np.subtract(Mp, self._buffers[M.shape[1], M.dtype], out=Mp)
        return u, w

    def _buffer(self, M):
        key = (M.shape[1], M.dtype)
        if not hasattr(self, "_buffers"):
            self._buffers = {}
        if key not in self._buffers:
            self._buffers[key] = np.empty((self.n_triplets, M.shape[1]), dtype=M.dtype)
        return self._buffers[key]

    # --------------------------------------------------------------- public
    def case_losses(self, L, S):
        """The five ``l_c`` of every triplet, shape (n_triplets, 5)."""
        d = self.X_u.shape[1]
        L = np.asarray(L, dtype=self.dtype)
        B = self.X_u @ np.ascontiguousarray(S[d:], dtype=self.dtype)
        G = B @ L
        _, losses = self._case_terms(self._norms(*self._differences(B)),
                                     self._norms(*self._differences(G)))
        return losses

    def _forward(self, L, S):
        """Cost and the intermediate state the gradient needs (cached for one point)."""
        # pymanopt's line search may hand back float64 points: mixed-dtype products
        # leave BLAS (measured 10-50x slower), so cast to the objective's dtype.
        L = np.ascontiguousarray(L, dtype=self.dtype)
        S = np.ascontiguousarray(S, dtype=self.dtype)
        key = (L.tobytes(), S.tobytes())
        if self._forward_key == key:
            return self._forward_state
        self.n_evaluations += 1
        d = self.X_u.shape[1]
        B = self.X_u @ np.ascontiguousarray(S[d:])
        G = B @ L
        u, w = self._differences(B)
        U, W = self._differences(G)
        q, Q = self._norms(u, w), self._norms(U, W)
        f, losses = self._case_terms(q, Q)
        entropy, g = self._entropy(losses)
        cost = float(entropy.mean())
        R = None
        if self.ortho_weight:
            R = L.T @ L
            R[np.diag_indices_from(R)] -= 1.0
            cost += self.ortho_weight * float(np.sum(R * R))
        state = dict(key=key, L=L, S=S, B=B, G=G, f=f, g=g, R=R, cost=cost)
        self._forward_key, self._forward_state = key, state
        return state

    def cost(self, L, S):
        """The objective only (no gradient: the line search's trial points need no more)."""
        return self._forward(L, S)["cost"]

    def cost_grad(self, L, S):
        """Return ``(cost, grad_L, grad_S)`` (Euclidean gradients)."""
        state = self._forward(L, S)
        if self._cache_key == state["key"]:
            return self._cache_value
        self.n_gradients += 1
        L, S, B, G, R = state["L"], state["S"], state["B"], state["G"], state["R"]
        fs1, fm1, fs2, fm2, fs3, fm3 = state["f"]
        d = self.X_u.shape[1]
        g = state["g"] / self.n_triplets
        # dJ/dq_j (data side) and dJ/dQ_j (embedding side).
        s1, m1 = g[:, 0] * expit(fs1), g[:, 0] * expit(fm1)
        s2, m2 = g[:, 1] * expit(fs2), g[:, 1] * expit(fm2)
        s3, m3 = g[:, 2] * expit(fs3), g[:, 2] * expit(fm3)
        g45 = g[:, 3] - g[:, 4]
        c = (-s1, (self.t - 1.0) * s2 - s3 - g45, self.k * s1, self.k * s3)
        C = (m1, (1.0 - self.t) * m2 + m3 + g45, -self.k * m1, -self.k * m3)
        # Negligible coefficients (saturated sigmoids) are zeroed: in float32 they are
        # often subnormal, and subnormal arithmetic made evaluations ~10x slower.
        c = tuple(_flush(ci) for ci in c)
        C = tuple(_flush(ci) for ci in C)
        dG = np.asarray(self._gradient_operator(C) @ G)
        dB = np.asarray(self._gradient_operator(c) @ B)
        dB += dG @ L.T
        grad_S = np.zeros_like(S)
        grad_S[d:] = self.X_u.T @ dB
        grad_L = B.T @ dG
        if R is not None:
            grad_L += (4.0 * self.ortho_weight) * (L @ R)
        value = (state["cost"], grad_L.astype(self.dtype, copy=False),
                 grad_S.astype(self.dtype, copy=False))
        self._cache_key, self._cache_value = state["key"], value
        return value

    def _gradient_operator(self, c):
        """Sparse ``K`` with ``dJ/dB = K @ B``.

        For ``J = sum_i c1|u|^2 + c2|w|^2 + c3|u/2+w|^2 + c4|u+w/2|^2``.

        With ``v3 = u/2 + w``, ``v4 = u + w/2``: ``dJ/du = a u + b w`` and
        ``dJ/dw = b u + g w`` where ``a = 2 c1 + c3/2 + 2 c4``, ``b = c3 + c4``,
        ``g = 2 c2 + 2 c3 + c4/2``. As ``u = (e_a - e_p)^T B`` and
        ``w = (e_p - e_n)^T B``, triplet ``i`` adds to ``K`` the block
        ``[[a, b-a, -b], [b-a, a-2b+g, b-g], [-b, b-g, g]]`` on rows ``(a_i, p_i, n_i)``.
        No (|T|, d) temporaries are formed.
        """
        c1, c2, c3, c4 = c
        a = 2.0 * c1 + 0.5 * c3 + 2.0 * c4
        b = c3 + c4
        g = 2.0 * c2 + 2.0 * c3 + 0.5 * c4
        vals = np.concatenate([a, b - a, -b, b - a, a - 2.0 * b + g, b - g, -b, b - g, g])
        data = np.bincount(self._slot, weights=vals, minlength=self._K_indices.shape[0])
        return sp.csr_matrix((data.astype(self.dtype, copy=False), self._K_indices,
                              self._K_indptr), shape=(self._n_u, self._n_u))

    def flops_per_evaluation(self, n_components):
        """Analytic FLOP count of one :meth:`cost_grad` (dense products + per-triplet work)."""
        return self.flops_forward(n_components) + self.flops_backward(n_components)

    def flops_forward(self, n_components):
        """Analytic FLOP count of one cost-only evaluation (:meth:`cost`)."""
        n_u, d = self.X_u.shape
        return 2 * n_u * d * d + 2 * n_u * d * n_components + self.n_triplets * 20 * (
            d + n_components)

    def flops_backward(self, n_components):
        """Analytic FLOP count of the gradient part of :meth:`cost_grad`."""
        n_u, d = self.X_u.shape
        return 2 * n_u * d * d + 4 * n_u * d * n_components + self.n_triplets * 20 * (
            d + n_components)


def torch_objective(X, triplets, L, S, *, angle=40.0, ortho_weight=0.5, probability="sigmoid"):
    """The same objective in torch, for autodiff (tests and the speed comparison).

    Written independently of :class:`SUMLObjective`: it forms the synthetic
    points ``s = S1^T u + S2^T v`` of every case from the paper's
    concatenations (on the unique points, then gathered), and lets autograd do
    the rest. ``X``, ``L``, ``S`` are torch tensors; ``triplets`` is (T, 3) int.
    """
    import torch
    import torch.nn.functional as F

    uniq, inverse = np.unique(np.asarray(triplets).ravel(), return_inverse=True)
    inverse = torch.as_tensor(inverse.reshape(-1, 3))
    Xu = X[torch.as_tensor(uniq)]
    d = X.shape[1]
    A, B = Xu @ S[:d], Xu @ S[d:]
    a, p, n = inverse[:, 0], inverse[:, 1], inverse[:, 2]
    k = 4.0 * float(np.tan(np.deg2rad(angle)) ** 2)

    def synth(i, j):  # S^T [x_i; x_j]
        return A[i] + B[j]

    def sq(x):
        return (x * x).sum(dim=1)

    def triplet_case(s, s_pos, s_neg):
        s_mid = 0.5 * (s + s_pos)
        f_s = k * sq(s_neg - s_mid) - sq(s - s_pos)
        f_m = sq(s @ L - s_pos @ L) - k * sq(s_neg @ L - s_mid @ L)
        return F.softplus(f_s) + F.softplus(f_m)

    l1 = triplet_case(synth(a, a), synth(a, p), synth(a, n))
    l2 = triplet_case(synth(a, n), synth(a, p), synth(a, p))
    l3 = triplet_case(synth(p, p), synth(p, n), synth(p, a))
    s4, s4p = synth(a, p), synth(a, n)
    l4 = -sq(s4 - s4p) + sq(s4 @ L - s4p @ L)
    l5 = sq(s4 - s4p) - sq(s4 @ L - s4p @ L)
    losses = torch.stack([l1, l2, l3, l4, l5], dim=1)
    if probability == "sigmoid":
        log_p = -F.softplus(losses)
    else:
        log_p = torch.log_softmax(-losses, dim=1)
    entropy = -(log_p.exp() * log_p).sum(dim=1).mean()
    R = L.T @ L - torch.eye(L.shape[1], dtype=L.dtype)
    return entropy + ortho_weight * (R * R).sum(), losses


def torch_fast_objective(X_u, ia, ip, in_, L, S2, *, angle=40.0, ortho_weight=0.5,
                         probability="sigmoid"):
    """The fast (precompute-and-gather) form in torch, for the autodiff speed comparison.

    Same computation graph as :meth:`SUMLObjective.cost_grad`, gradient by autograd.
    ``X_u`` (N_u, d) unique points, ``ia, ip, in_`` int64 index tensors, ``S2`` (d, d).
    """
    import torch
    import torch.nn.functional as F

    t = float(np.tan(np.deg2rad(angle)) ** 2)
    k = 4.0 * t
    B = X_u @ S2
    G = B @ L

    def norms(M):
        Ma, Mp, Mn = M[ia], M[ip], M[in_]
        u, w = Ma - Mp, Mp - Mn
        q1, q2, uw = (u * u).sum(1), (w * w).sum(1), (u * w).sum(1)
        return q1, q2, 0.25 * q1 + q2 + uw, q1 + 0.25 * q2 + uw

    q, Q = norms(B), norms(G)
    l4 = Q[1] - q[1]
    losses = torch.stack([
        F.softplus(k * q[2] - q[0]) + F.softplus(Q[0] - k * Q[2]),
        F.softplus((t - 1.0) * q[1]) + F.softplus((1.0 - t) * Q[1]),
        F.softplus(k * q[3] - q[1]) + F.softplus(Q[1] - k * Q[3]),
        l4, -l4], dim=1)
    log_p = -F.softplus(losses) if probability == "sigmoid" else torch.log_softmax(-losses, 1)
    entropy = -(log_p.exp() * log_p).sum(dim=1).mean()
    R = L.T @ L - torch.eye(L.shape[1], dtype=L.dtype)
    return entropy + ortho_weight * (R * R).sum()
