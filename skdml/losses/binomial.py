"""Binomial deviance loss on cosine similarities (ECAML Eq. 10, DeML Eq. 5)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ._common import check_embeddings_labels, same_class_masks, zero_loss

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
    pos, neg = same_class_masks(labels.long())
    n_pos = pos.sum().clamp_min(1).double()
    n_neg = neg.sum().clamp_min(1).double()
    return pos.double() / n_pos + neg.double() / n_neg


class BinomialDevianceLoss(nn.Module):
    r"""Binomial deviance loss on cosine similarities (ECAML Eq. 10).

    For every ordered pair ``i != j`` of the batch, with the cosine similarity
    :math:`D_{ij} = x_i^\top x_j / (\|x_i\| \|x_j\|)`, :math:`s_{ij} = 1` for
    a same-class pair (else 0) and :math:`\eta_{ij} = 1` if :math:`s_{ij} = 1`
    else ``eta``,

    .. math::

        \ell_{ij} = \log\left(1 + e^{-(2 s_{ij} - 1)\,\alpha\,(D_{ij} - \beta)\,\eta_{ij}}\right)

    (computed with ``softplus``). ECAML writes the loss as the plain sum over
    pairs; the reduction makes the batch-size dependence explicit:

    Parameters
    ----------
    alpha : float, default=2.0
        Scale :math:`\alpha` (ECAML and DeML).
    beta : float, default=0.5
        Translation :math:`\beta` (ECAML and DeML).
    eta : float, default=25.0
        Penalty on negative pairs :math:`\eta` (ECAML: 25; DeML uses 35).
    reduction : {"mean", "sum", "balanced"}, default="mean"
        ``"mean"``: Eq. 10 divided by the number of pairs ``n (n - 1)``;
        ``"sum"``: the literal Eq. 10; ``"balanced"``: the DeML / BIER weighting
        ``1 / w_pq`` (mean over positive pairs + mean over negative pairs),
        the same as passing ``pair_weights=deml_pair_weights(labels)``.

    Notes
    -----
    The diagonal ``i == j`` is excluded (it is a constant with zero gradient).
    ``forward(embeddings, labels, pair_weights=None)``: when an ``(n, n)``
    tensor ``pair_weights`` is given, the loss is
    :math:`\sum_{i \neq j} w_{ij} \ell_{ij}` and ``reduction`` is ignored; use
    :func:`deml_pair_weights` for DeML's Eq. 5 (whose outer average over the
    DeML learners is the caller's business). A batch of fewer than two samples
    gives 0 attached to the graph.

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

    def __init__(
        self,
        alpha: float = 2.0,
        beta: float = 0.5,
        eta: float = 25.0,
        reduction: str = "mean",
    ):
        super().__init__()
        if reduction not in ("mean", "sum", "balanced"):
            raise ValueError(
                f"reduction must be 'mean', 'sum' or 'balanced', got {reduction!r}."
            )
        self.alpha = float(alpha)
        self.beta = float(beta)
        self.eta = float(eta)
        self.reduction = reduction

    def extra_repr(self) -> str:
        return (
            f"alpha={self.alpha}, beta={self.beta}, eta={self.eta}, "
            f"reduction={self.reduction!r}"
        )

    def pair_losses(self, embeddings: torch.Tensor, labels) -> torch.Tensor:
        """The ``(n, n)`` matrix of pair losses :math:`\\ell_{ij}` (diagonal set to 0)."""
        labels = check_embeddings_labels(embeddings, labels)
        x = F.normalize(embeddings, p=2, dim=1)
        cos = x @ x.T
        pos, neg = same_class_masks(labels)
        sign = pos.to(cos.dtype) - neg.to(cos.dtype)  # 2 s_ij - 1 off the diagonal, 0 on it
        eta = torch.where(neg, self.eta, 1.0).to(cos.dtype)
        losses = F.softplus(-sign * self.alpha * (cos - self.beta) * eta)
        return losses.masked_fill(~(pos | neg), 0.0)

    def forward(self, embeddings: torch.Tensor, labels, pair_weights=None) -> torch.Tensor:
        labels = check_embeddings_labels(embeddings, labels)
        n = embeddings.shape[0]
        if n < 2:
            return zero_loss(embeddings)
        losses = self.pair_losses(embeddings, labels)
        if pair_weights is not None:
            pair_weights = torch.as_tensor(
                pair_weights, dtype=losses.dtype, device=losses.device
            )
            if pair_weights.shape != (n, n):
                raise ValueError(
                    f"pair_weights must have shape ({n}, {n}), got {tuple(pair_weights.shape)}."
                )
            return (losses * pair_weights).sum()
        if self.reduction == "sum":
            return losses.sum()
        if self.reduction == "mean":
            return losses.sum() / (n * (n - 1))
        weights = deml_pair_weights(labels).to(dtype=losses.dtype, device=losses.device)
        return (losses * weights).sum()
