"""Sohn's multi-class N-pair loss with a raw dot product (ECAML Eq. 9)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ._common import check_embeddings_labels, same_class_masks, zero_loss

__all__ = ["NPairLoss"]


class NPairLoss(nn.Module):
    r"""Multi-class N-pair loss (Sohn, 2016; ECAML Eq. 9) with a raw dot product.

    With ``tuples="all"`` (default) every ordered pair ``(i, p)`` of distinct
    samples of the same class is an (anchor, positive) pair, and every sample
    of another class is a negative of the anchor:

    .. math::

        \ell_{ip} = \log\Big(1 + \sum_{j:\, y_j \neq y_i}
                    \exp(x_i^\top x_j - x_i^\top x_p)\Big),

    and the loss is the mean of :math:`\ell_{ip}` over those pairs. On an
    N-pair batch (two samples per class) this is ECAML's Eq. 9 with every
    sample as an anchor, divided by the batch size; on a ``P x K`` batch each
    anchor is used once with each of its ``K - 1`` positives.

    With ``tuples="sohn"`` the batch is reduced to Sohn's original N-pair
    tuple: one (anchor, positive) pair per class, namely its first two samples
    in batch order, and the negatives of an anchor are the *positives* of the
    other classes, i.e. a softmax cross-entropy over the ``N x N`` matrix
    ``anchors @ positives.T`` with the diagonal as target, averaged over the
    classes. This is exactly pytorch-metric-learning's ``NPairsLoss`` (whose
    default distance is the raw dot product).

    Parameters
    ----------
    tuples : {"all", "sohn"}, default="all"
        Which (anchor, positive, negatives) tuples the batch provides, see above.
    l2_reg : float, default=0.0
        Weight of Sohn's embedding regulariser ``mean_i ||x_i||^2`` added to the
        loss. Sohn (2016) uses a small value (e.g. 0.002) because the raw dot
        product is unbounded; ECAML does not mention it, hence 0 by default.

    Notes
    -----
    A batch without any (anchor, positive) pair gives 0 (plus the l2 term),
    still attached to the graph. An anchor whose class fills the whole batch
    has no negative and contributes ``log(1) = 0``.

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

    def __init__(self, tuples: str = "all", l2_reg: float = 0.0):
        super().__init__()
        if tuples not in ("all", "sohn"):
            raise ValueError(f"tuples must be 'all' or 'sohn', got {tuples!r}.")
        if l2_reg < 0:
            raise ValueError(f"l2_reg must be non-negative, got {l2_reg}.")
        self.tuples = tuples
        self.l2_reg = float(l2_reg)

    def extra_repr(self) -> str:
        return f"tuples={self.tuples!r}, l2_reg={self.l2_reg}"

    def forward(self, embeddings: torch.Tensor, labels) -> torch.Tensor:
        labels = check_embeddings_labels(embeddings, labels)
        if self.tuples == "all":
            loss = self._all_pairs(embeddings, labels)
        else:
            loss = self._sohn(embeddings, labels)
        if self.l2_reg > 0 and embeddings.shape[0] > 0:
            loss = loss + self.l2_reg * (embeddings * embeddings).sum(dim=1).mean()
        return loss

    @staticmethod
    def _all_pairs(x, labels):
        pos, neg = same_class_masks(labels)
        if not bool(pos.any()):
            return zero_loss(x)
        sim = x @ x.T
        # log(1 + sum_j exp(s_ij - s_ip)) = logsumexp([s_ip, s_ij...]) - s_ip
        neg_lse = torch.logsumexp(sim.masked_fill(~neg, float("-inf")), dim=1)  # (n,)
        anchor, positive = pos.nonzero(as_tuple=True)
        s_ap = sim[anchor, positive]
        both = torch.stack([s_ap, neg_lse[anchor]], dim=0)
        losses = torch.logsumexp(both, dim=0) - s_ap
        return losses.mean()

    @staticmethod
    def _sohn(x, labels):
        n = labels.shape[0]
        if n == 0:
            return zero_loss(x)
        order = torch.arange(n, device=labels.device)
        # first and second occurrence of each class in batch order
        classes, inverse = torch.unique(labels, return_inverse=True)
        big = torch.full((classes.shape[0],), n, device=labels.device, dtype=torch.long)
        first = big.scatter_reduce(0, inverse, order, reduce="amin")
        rest = torch.where(order == first[inverse], n, order)
        second = big.scatter_reduce(0, inverse, rest, reduce="amin")
        has_pair = second < n
        if not bool(has_pair.any()):
            return zero_loss(x)
        anchors, positives = x[first[has_pair]], x[second[has_pair]]
        logits = anchors @ positives.T
        targets = torch.arange(logits.shape[0], device=x.device)
        return F.cross_entropy(logits, targets)
