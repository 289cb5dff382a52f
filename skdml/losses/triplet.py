"""Triplet loss on unit-normalised embeddings (ECAML Eq. 8)."""

from __future__ import annotations

import torch.nn.functional as F

from .._utils._params import check_params, non_negative_real
from ._base import MetricLoss, pairwise_sq_dists, same_class_masks

__all__ = ["TripletLoss"]

#: On an accelerator, up to this batch size the (n, n, n) triplet tensor is formed densely
#: (no host sync); otherwise the (anchor, positive) pairs are gathered first: memory and work
#: O(n^2 K) instead of O(n^3), and on the CPU the gather's synchronisation costs nothing.
_DENSE_MAX = 256


class TripletLoss(MetricLoss):
    r"""Triplet loss with squared L2 distances on the unit sphere (ECAML Eq. 8).

    For every valid triplet ``(a, p, n)`` of the batch (``y_a == y_p``,
    ``a != p``, ``y_n != y_a``), with :math:`\hat x = x / \|x\|_2`,

    .. math::

        \ell_{apn} = \left[\|\hat x_a - \hat x_p\|_2^2
                     - \|\hat x_a - \hat x_n\|_2^2 + m\right]_+ .

    Parameters
    ----------
    margin : float, default=0.1
        The margin :math:`m >= 0`; ECAML reports that 0.1 works best.
    reduction : {"mean", "sum", "mean_nonzero"}, default="mean"
        ``"mean"`` averages over every valid triplet of the batch (equal to
        pytorch-metric-learning's ``TripletMarginLoss`` with ``MeanReducer``);
        ``"mean_nonzero"`` averages over the triplets with a positive loss only
        (``AvgNonZeroReducer``) and is 0 when none is active; ``"sum"`` sums.

    Notes
    -----
    A batch without any valid triplet (a single class, or no class with two
    samples) gives a loss of exactly 0 that is still attached to the graph.

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

    normalize_embeddings = True

    def __init__(self, margin: float = 0.1, reduction: str = "mean"):
        super().__init__(reduction)
        check_params("TripletLoss", {"margin": [non_negative_real()]}, {"margin": margin})
        self.margin = float(margin)

    def extra_repr(self) -> str:
        return f"margin={self.margin}, reduction={self.reduction!r}"

    def tuple_losses(self, x, labels):
        dist = pairwise_sq_dists(x)
        pos, neg = same_class_masks(labels)
        if x.device.type != "cpu" and x.shape[0] <= _DENSE_MAX:
            violation = dist[:, :, None] - dist[:, None, :] + self.margin  # [a, p, n]
            weights = pos[:, :, None] & neg[:, None, :]
            return F.relu(violation), weights
        anchor, positive = pos.nonzero(as_tuple=True)
        violation = dist[anchor, positive][:, None] - dist[anchor] + self.margin
        return F.relu(violation), neg[anchor]
