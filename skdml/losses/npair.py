"""Sohn's multi-class N-pair loss with a raw dot product (ECAML Eq. 9)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .._utils._params import check_params, non_negative_real
from ._base import MetricLoss, abs_max, same_class_masks

__all__ = ["NPairLoss"]


def _scaled(x):
    """``(x / s, s**2)`` with ``s`` the batch's largest absolute entry (detached, >= 1).

    Dot products ``x_i^T x_j = s^2 (x_i / s)^T (x_j / s)``: the scaled products lie in
    [-d, d] and the factor ``s^2`` is applied in float64 to *differences* of them, so
    embeddings of any finite norm give a finite loss (or ``inf`` beyond float64's range),
    never ``inf - inf = NaN``.
    """
    s = abs_max(x, 1.0).to(torch.float64)
    return (x / s.to(x.dtype)).to(torch.float64), s * s


def _times(s2, t):
    """``s2 * t`` with ``inf * 0 = 0``: the scaled differences at their own maximum (0) stay
    0 when ``s2`` overflows float64, so the loss is ``inf`` there, never NaN."""
    return torch.where(t == 0, torch.zeros_like(t), s2 * t)


class NPairLoss(MetricLoss):
    r"""Multi-class N-pair loss (Sohn, 2016; ECAML Eq. 9) with a raw dot product.

    With ``tuples="all"`` (default) every ordered pair ``(i, p)`` of distinct
    samples of the same class is an (anchor, positive) pair, and every sample
    of another class is a negative of the anchor:

    .. math::

        \ell_{ip} = \log\Big(1 + \sum_{j:\, y_j \neq y_i}
                    \exp(x_i^\top x_j - x_i^\top x_p)\Big),

    reduced over those pairs. On an N-pair batch (two samples per class) the
    mean is ECAML's Eq. 9 with every sample as an anchor, divided by the batch
    size; on a ``P x K`` batch each anchor is used once with each of its
    ``K - 1`` positives.

    With ``tuples="sohn"`` the batch is reduced to Sohn's original N-pair
    tuple: one (anchor, positive) pair per class, its first two samples in
    batch order, and the negatives of an anchor are the *positives* of the
    other classes, i.e. a softmax cross-entropy over the ``N x N`` matrix
    ``anchors @ positives.T`` with the diagonal as target, averaged over the
    classes. This is exactly pytorch-metric-learning's ``NPairsLoss`` with
    ``distance=DotProductSimilarity(normalize_embeddings=False)``, the raw dot
    product (its default distance normalises the embeddings first).

    Parameters
    ----------
    tuples : {"all", "sohn"}, default="all"
        Which (anchor, positive, negatives) tuples the batch provides, see above.
    l2_reg : float, default=0.0
        Weight of Sohn's embedding regulariser ``mean_i ||x_i||^2`` added to the
        loss. Sohn (2016) uses a small value (e.g. 0.002) because the raw dot
        product is unbounded; ECAML does not mention it, hence 0 by default.
    reduction : {"mean", "sum"}, default="mean"
        Reduction over the (anchor, positive) pairs (``tuples="all"``; Sohn's
        tuples are always averaged over the classes).

    Notes
    -----
    A batch without any (anchor, positive) pair gives 0 (plus the l2 term),
    still attached to the graph. An anchor whose class fills the whole batch
    has no negative and contributes ``log(1) = 0``. The pair terms are computed
    in float64 on rescaled embeddings, so the loss is finite for embeddings of
    any norm whose products float64 can hold.

    Examples
    --------
    >>> import torch
    >>> from skdml.losses import NPairLoss
    >>> x = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.0, 1.0]])
    >>> y = torch.tensor([0, 0, 1, 1])
    >>> round(NPairLoss()(x, y).item(), 4)  # log(1 + 2 exp(-1))
    0.5514
    >>> round(NPairLoss(tuples="sohn")(x, y).item(), 4)  # log(1 + exp(-1))
    0.3133
    """

    reductions = ("mean", "sum")

    def __init__(self, tuples: str = "all", l2_reg: float = 0.0, reduction: str = "mean"):
        super().__init__(reduction)
        if tuples not in ("all", "sohn"):
            raise ValueError(f"tuples must be 'all' or 'sohn', got {tuples!r}.")
        check_params("NPairLoss", {"l2_reg": [non_negative_real()]}, {"l2_reg": l2_reg})
        self.tuples = tuples
        self.l2_reg = float(l2_reg)

    def extra_repr(self) -> str:
        return f"tuples={self.tuples!r}, l2_reg={self.l2_reg}, reduction={self.reduction!r}"

    def forward(self, embeddings, labels):
        loss = super().forward(embeddings, labels)
        if self.l2_reg > 0 and embeddings.shape[0] > 0:
            loss = loss + self.l2_reg * (embeddings * embeddings).sum(dim=1).mean()
        return loss

    def tuple_losses(self, x, labels):
        if self.tuples == "sohn":
            return self._sohn(x, labels)
        pos, neg = same_class_masks(labels)
        xs, s2 = _scaled(x)
        sim = xs @ xs.T
        # l_ip = softplus(LSE_j s2 sim_ij - s2 sim_ip), the LSE taken around the largest
        # negative similarity a_i (no -inf anywhere: finite values and gradients)
        a = sim.masked_fill(~neg, float("-inf")).amax(dim=1, keepdim=True)
        has_neg = neg.any(dim=1, keepdim=True)
        a = torch.where(has_neg, a, torch.zeros_like(a))
        shifted = torch.where(neg, sim, a) - a  # <= 0 on negatives, 0 elsewhere
        summed = torch.where(neg, torch.exp(_times(s2, shifted)), torch.zeros_like(sim)).sum(
            dim=1, keepdim=True)  # in [1, n] for an anchor with negatives
        r = torch.log(torch.where(has_neg, summed, torch.ones_like(summed)))
        losses = torch.where(has_neg, F.softplus(_times(s2, a - sim) + r),
                             torch.zeros_like(sim))
        return losses.to(x.dtype), pos

    def _sohn(self, x, labels):
        n = labels.shape[0]
        order = torch.arange(n, device=labels.device)
        classes, inverse = torch.unique(labels, return_inverse=True)
        big = torch.full((classes.shape[0],), n, device=labels.device, dtype=torch.long)
        first = big.scatter_reduce(0, inverse, order, reduce="amin")
        rest = torch.where(order == first[inverse], n, order)
        second = big.scatter_reduce(0, inverse, rest, reduce="amin")
        has_pair = second < n
        if n == 0 or not bool(has_pair.any()):
            return x[:0, 0], x.new_zeros(0)  # no tuple: empty, but on the graph
        xs, s2 = _scaled(x)
        dots = xs[first[has_pair]] @ xs[second[has_pair]].T
        # cross-entropy of s2 * dots against the diagonal, around each row's largest dot
        top = dots.amax(dim=1, keepdim=True)
        r = torch.log(torch.exp(_times(s2, dots - top)).sum(dim=1))
        losses = (_times(s2, top[:, 0] - dots.diagonal()) + r).to(x.dtype)
        return losses, torch.ones_like(losses)

    def reduce(self, losses, weights):
        if self.tuples == "sohn":  # Sohn's tuples: always the mean over the classes
            return (losses * weights).sum() / weights.sum().clamp_min(1.0)
        return super().reduce(losses, weights)
