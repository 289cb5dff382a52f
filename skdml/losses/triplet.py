"""Triplet loss on unit-normalised embeddings (ECAML Eq. 8)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ._common import check_embeddings_labels, pairwise_sq_dists, same_class_masks, zero_loss

__all__ = ["TripletLoss"]


class TripletLoss(nn.Module):
    r"""Triplet loss with squared L2 distances on the unit sphere (ECAML Eq. 8).

    For every valid triplet ``(a, p, n)`` of the batch (``y_a == y_p``,
    ``a != p``, ``y_n != y_a``), with :math:`\hat x = x / \|x\|_2`,

    .. math::

        \ell_{apn} = \left[\|\hat x_a - \hat x_p\|_2^2
                     - \|\hat x_a - \hat x_n\|_2^2 + m\right]_+ .

    Parameters
    ----------
    margin : float, default=0.1
        The margin :math:`m`; ECAML reports that 0.1 works best.
    reduction : {"all", "active"}, default="all"
        ``"all"`` averages over every valid triplet of the batch (equal to
        pytorch-metric-learning's ``TripletMarginLoss`` with ``MeanReducer``);
        ``"active"`` averages over the triplets with a positive loss only
        (``AvgNonZeroReducer``) and is 0 when none is active.

    Notes
    -----
    Triplets are formed as (anchor, positive) pairs x negatives of the anchor,
    so memory is ``O(n_pos_pairs * n)`` (``O(n^2 K)`` on a ``P x K`` batch),
    not ``O(n^3)``. A batch without
    any valid triplet (a single class, or no class with two samples) gives a
    loss of exactly 0 that is still attached to the graph, so ``backward()``
    works and yields zero gradients.

    Examples
    --------
    >>> import torch
    >>> from skdml.losses import TripletLoss
    >>> x = torch.tensor([[1.0, 0.0], [1.0, 0.1], [0.0, 1.0], [0.1, 1.0]])
    >>> y = torch.tensor([0, 0, 1, 1])
    >>> round(TripletLoss(margin=0.1)(x, y).item(), 4)
    0.0
    >>> round(TripletLoss(margin=2.5)(x, y).item(), 3)
    0.708
    """

    def __init__(self, margin: float = 0.1, reduction: str = "all"):
        super().__init__()
        if reduction not in ("all", "active"):
            raise ValueError(f"reduction must be 'all' or 'active', got {reduction!r}.")
        self.margin = float(margin)
        self.reduction = reduction

    def extra_repr(self) -> str:
        return f"margin={self.margin}, reduction={self.reduction!r}"

    def forward(self, embeddings: torch.Tensor, labels) -> torch.Tensor:
        labels = check_embeddings_labels(embeddings, labels)
        x = F.normalize(embeddings, p=2, dim=1)
        dist = pairwise_sq_dists(x)
        pos, neg = same_class_masks(labels)
        anchor, positive = pos.nonzero(as_tuple=True)  # all (a, p) pairs
        neg_of_pair = neg[anchor]  # (n_pairs, n): the negatives of each pair's anchor
        if anchor.numel() == 0 or not bool(neg_of_pair.any()):
            return zero_loss(embeddings)
        violation = dist[anchor, positive][:, None] - dist[anchor] + self.margin
        # masked sums instead of boolean gathers: faster forward and backward
        mask = neg_of_pair.to(violation.dtype)
        total = (F.relu(violation) * mask).sum()
        if self.reduction == "all":
            return total / mask.sum()
        n_active = ((violation > 0) & neg_of_pair).sum()
        if int(n_active) == 0:
            return zero_loss(embeddings)
        return total / n_active
