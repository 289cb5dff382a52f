"""A metric loss applied to each of several learners of one embedding (DeML Eq. 5)."""

from __future__ import annotations

import torch

from .._utils._params import check_params, positive_int
from ._base import MetricLoss, unit_rows
from .binomial import BinomialDevianceLoss

__all__ = ["DecoupledLoss"]


class DecoupledLoss(MetricLoss):
    r"""A metric loss on each learner's part of the embedding, averaged (DeML Eq. 5).

    The embedding is the concatenation of ``n_learners`` equal parts (the I x J
    CA learners of :class:`~skdml.deep.DeML`, in order); the loss of every part
    is computed on its own, and the ``"mean"`` reduction averages them:

    .. math::

        L_{metric} = \frac{1}{IJ} \sum_{i,j} \sum_{p \neq q} \frac{1}{w_{pq}}
        \log\left(1 + e^{-(2 s_{pq} - 1)\,\alpha\,(D^{(i,j)}_{pq} - \beta)\,\gamma_{pq}}\right)

    with the cosine :math:`D^{(i,j)}_{pq}` of learner ``(i, j)``. The default
    inner loss is this binomial deviance with the paper's :math:`\alpha = 2`,
    :math:`\beta = 0.5`, :math:`\gamma = 35` on negative pairs, and
    :math:`w_{pq}` the number of positive (negative) pairs:
    ``BinomialDevianceLoss(scale=2, margin=0.5, negative_weight=35,
    pair_weighting="balanced", reduction="sum")``.

    Parameters
    ----------
    n_learners : int
        Number of equal parts of the embedding.
    loss : callable, default=None
        The loss of one part, ``loss(part, labels) -> scalar tensor``
        (``None``: DeML's binomial deviance above).
    reduction : {"mean", "sum"}, default="mean"
        Average (Eq. 5) or sum of the learners' losses.

    Notes
    -----
    The learner losses need the labels, so they are a loss here and not an
    auxiliary output of the network; the network's label-free terms (Eq. 4
    and 6) are its auxiliary losses. ``prepare`` normalises each part (when
    the inner loss works on unit vectors), so a regulariser in
    :class:`~skdml.losses.MetricObjective` sees what the learners' losses see.

    Examples
    --------
    >>> import torch
    >>> from skdml.losses import BinomialDevianceLoss, DecoupledLoss
    >>> z = torch.randn(6, 8, generator=torch.Generator().manual_seed(0))
    >>> y = torch.tensor([0, 0, 1, 1, 2, 2])
    >>> loss = DecoupledLoss(n_learners=2)
    >>> parts = [loss.loss(z[:, :4], y), loss.loss(z[:, 4:], y)]
    >>> bool(torch.isclose(loss(z, y), (parts[0] + parts[1]) / 2))
    True
    """

    reductions = ("mean", "sum")

    def __init__(self, n_learners, loss=None, reduction="mean"):
        super().__init__(reduction)
        check_params("DecoupledLoss", {"n_learners": [positive_int()]},
                     {"n_learners": n_learners})
        self.n_learners = int(n_learners)
        self.loss = BinomialDevianceLoss(scale=2.0, margin=0.5, negative_weight=35.0,
                                         pair_weighting="balanced", reduction="sum") \
            if loss is None else loss

    def extra_repr(self):
        return f"n_learners={self.n_learners}, reduction={self.reduction!r}"

    def split(self, embeddings):
        """The learners' parts of a (n, d) embedding (a ValueError if d is not a multiple)."""
        d = embeddings.shape[1]
        if d % self.n_learners:
            raise ValueError(f"The embedding has {d} dimensions, not a multiple of "
                             f"n_learners={self.n_learners}.")
        return embeddings.split(d // self.n_learners, dim=1)

    def prepare(self, embeddings):
        if not getattr(self.loss, "normalize_embeddings", False) or embeddings.numel() == 0:
            return embeddings
        return torch.cat([unit_rows(part) for part in self.split(embeddings)], dim=1)

    def tuple_losses(self, x, labels):
        losses = torch.stack([self.loss(part, labels) for part in self.split(x)])
        return losses, torch.ones_like(losses)
