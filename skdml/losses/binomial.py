"""Binomial deviance loss on cosine similarities (ECAML Eq. 10, DeML Eq. 5)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .._utils._params import check_params, finite_real, positive_real
from ._base import MetricLoss, check_embeddings_labels, same_class_masks

__all__ = ["BinomialDevianceLoss", "deml_pair_weights"]


def deml_pair_weights(labels) -> torch.Tensor:
    r"""DeML's pair weights :math:`1 / w_{pq}` (DeML Eq. 5).

    :math:`w_{pq}` is the number of positive pairs of the batch when ``p`` and
    ``q`` share a class, else the number of negative pairs (ordered pairs,
    ``p != q``). The diagonal is 0. With these weights the weighted sum of
    pair losses is the mean over positive pairs plus the mean over negative
    pairs.

    Parameters
    ----------
    labels : torch.Tensor of shape (n_samples,)
        Integer labels.

    Returns
    -------
    weights : torch.Tensor of shape (n_samples, n_samples), dtype float64
        Cast it to the embeddings' dtype if needed (the loss does).

    Examples
    --------
    >>> import torch
    >>> from skdml.losses import deml_pair_weights
    >>> deml_pair_weights(torch.tensor([0, 0, 1]))
    tensor([[0.0000, 0.5000, 0.2500],
            [0.5000, 0.0000, 0.2500],
            [0.2500, 0.2500, 0.0000]], dtype=torch.float64)
    """
    labels = torch.as_tensor(labels)
    # the shared label check (float labels are refused, not truncated into one class)
    labels = check_embeddings_labels(
        torch.zeros(labels.shape[0] if labels.ndim else 0, 1, device=labels.device), labels,
        name="the batch")
    pos, neg = same_class_masks(labels)
    n_pos = pos.sum().clamp_min(1).double()
    n_neg = neg.sum().clamp_min(1).double()
    return pos.double() / n_pos + neg.double() / n_neg


class BinomialDevianceLoss(MetricLoss):
    r"""Binomial deviance loss on cosine similarities (ECAML Eq. 10).

    For every ordered pair ``i != j`` of the batch, with the cosine similarity
    :math:`D_{ij}`, :math:`s_{ij} = 1` for a same-class pair (else 0) and
    :math:`\eta_{ij} = 1` if :math:`s_{ij} = 1` else ``negative_weight``,

    .. math::

        \ell_{ij} = \log\left(1 + e^{-(2 s_{ij} - 1)\,\alpha\,(D_{ij} - \beta)\,\eta_{ij}}\right)

    where :math:`\alpha` is ``scale`` and :math:`\beta` is ``margin``.

    Parameters
    ----------
    scale : float, default=2.0
        The paper's :math:`\alpha` (ECAML and DeML).
    margin : float, default=0.5
        The paper's :math:`\beta`, the cosine that separates positives from
        negatives (ECAML and DeML).
    negative_weight : float, default=25.0
        The paper's :math:`\eta` on negative pairs (ECAML: 25; DeML: 35).
    pair_weighting : {"uniform", "balanced"}, default="uniform"
        ``"uniform"``: every pair weighs 1. ``"balanced"``: positive pairs weigh
        ``1 / n_positive_pairs`` and negative pairs ``1 / n_negative_pairs``
        (BIER / DeML Eq. 5, see :func:`deml_pair_weights`).
    reduction : {"mean", "sum"}, default="mean"
        ``"sum"`` with uniform weights is the literal Eq. 10; ``"mean"`` divides
        it by the ``n (n - 1)`` ordered pairs; with balanced weights ``"sum"``
        is DeML's Eq. 5 (mean over positive pairs + mean over negative pairs)
        and ``"mean"`` half of it.

    Notes
    -----
    The diagonal ``i == j`` is excluded (a constant with zero gradient).
    ``forward(embeddings, labels, pair_weights=W)`` with an ``(n, n)`` tensor
    returns :math:`\sum_{i \neq j} W_{ij} \ell_{ij}` and ignores the weighting
    and the reduction.

    Examples
    --------
    >>> import torch
    >>> from skdml.losses import BinomialDevianceLoss
    >>> x = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    >>> y = torch.tensor([0, 0, 1])
    >>> loss = BinomialDevianceLoss()
    >>> round(loss(x, y).item(), 4)
    0.1044
    >>> round(loss(x, y, pair_weights=torch.ones(3, 3)).item(), 4)  # the plain sum
    0.6265
    """

    normalize_embeddings = True
    reductions = ("mean", "sum")

    def __init__(self, scale: float = 2.0, margin: float = 0.5, negative_weight: float = 25.0,
                 pair_weighting: str = "uniform", reduction: str = "mean"):
        super().__init__(reduction)
        check_params("BinomialDevianceLoss", {
            "scale": [positive_real()], "margin": [finite_real()],
            "negative_weight": [positive_real()]},
            {"scale": scale, "margin": margin, "negative_weight": negative_weight})
        if pair_weighting not in ("uniform", "balanced"):
            raise ValueError(
                f"pair_weighting must be 'uniform' or 'balanced', got {pair_weighting!r}.")
        self.scale = float(scale)
        self.margin = float(margin)
        self.negative_weight = float(negative_weight)
        self.pair_weighting = pair_weighting

    def extra_repr(self) -> str:
        return (f"scale={self.scale}, margin={self.margin}, "
                f"negative_weight={self.negative_weight}, "
                f"pair_weighting={self.pair_weighting!r}, reduction={self.reduction!r}")

    def pair_losses(self, embeddings, labels):
        """The ``(n, n)`` matrix of pair losses :math:`\\ell_{ij}` (diagonal set to 0)."""
        labels = check_embeddings_labels(embeddings, labels)
        return self._pair_losses(self.prepare(embeddings), labels)[0]

    def _pair_losses(self, x, labels):
        same = labels[:, None] == labels[None, :]
        # positives: softplus(-a (D - b)); negatives: softplus(a eta (D - b))
        coef = torch.where(same, -self.scale, self.scale * self.negative_weight).to(x.dtype)
        losses = F.softplus(coef * (x @ x.T - self.margin))
        off_diagonal = ~torch.eye(len(labels), dtype=torch.bool, device=labels.device)
        return losses * off_diagonal, same & off_diagonal, ~same

    def tuple_losses(self, x, labels):
        losses, pos, neg = self._pair_losses(x, labels)
        if self.pair_weighting == "uniform":
            return losses, pos | neg
        pos_w, neg_w = pos.to(losses.dtype), neg.to(losses.dtype)
        weights = pos_w / pos_w.sum().clamp_min(1.0) + neg_w / neg_w.sum().clamp_min(1.0)
        return losses, weights

    def forward(self, embeddings, labels, pair_weights=None):
        if pair_weights is None:
            return super().forward(embeddings, labels)
        labels = check_embeddings_labels(embeddings, labels)
        n = embeddings.shape[0]
        losses = self._pair_losses(self.prepare(embeddings), labels)[0]
        pair_weights = torch.as_tensor(pair_weights, dtype=losses.dtype, device=losses.device)
        if pair_weights.shape != (n, n):
            raise ValueError(
                f"pair_weights must have shape ({n}, {n}), got {tuple(pair_weights.shape)}.")
        return (losses * pair_weights).sum() + embeddings.sum() * 0.0
