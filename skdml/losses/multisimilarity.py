"""Multi-similarity loss with its pair mining (Wang et al., CVPR 2019)."""

from __future__ import annotations

import torch

from .._utils._params import (check_params, finite_real, non_negative_real,
                              positive_real)
from ._base import MetricLoss, same_class_masks

__all__ = ["MultiSimilarityLoss", "multi_similarity_pairs"]


def multi_similarity_pairs(similarities, labels, epsilon=0.1):
    r"""The pairs kept by multi-similarity mining, as boolean ``(n, n)`` masks.

    For an anchor :math:`i`, a positive :math:`j` is kept when
    :math:`S_{ij} - \epsilon < \max_{k:\,y_k \neq y_i} S_{ik}` (it is not safely
    more similar than the hardest negative), and a negative :math:`j` when
    :math:`S_{ij} + \epsilon > \min_{k \neq i:\,y_k = y_i} S_{ik}` (it is not
    safely less similar than the hardest positive). An anchor without
    negatives keeps no positive and one without positives keeps no negative.
    This is the mining step of the paper (Eq. 5-6) and of
    pytorch-metric-learning's ``MultiSimilarityMiner``.

    Parameters
    ----------
    similarities : torch.Tensor of shape (n, n)
        Cosine similarities (no gradient is needed: the masks are constants).
    labels : torch.Tensor of shape (n,)
        Integer labels.
    epsilon : float, default=0.1
        The margin :math:`\epsilon` of the mining rule.

    Returns
    -------
    positives, negatives : torch.Tensor of shape (n, n), dtype bool

    Examples
    --------
    >>> import torch
    >>> S = torch.tensor([[1.0, 0.9, 0.2], [0.9, 1.0, 0.85], [0.2, 0.85, 1.0]])
    >>> pos, neg = multi_similarity_pairs(S, torch.tensor([0, 0, 1]))
    >>> pos.int().tolist(), neg.int().tolist()
    ([[0, 0, 0], [1, 0, 0], [0, 0, 0]], [[0, 0, 0], [0, 0, 1], [0, 0, 0]])
    """
    S = similarities.detach()
    pos, neg = same_class_masks(labels)
    # Python scalars, not tensors built here: a new CUDA tensor is a copy from the host
    hardest_neg = torch.where(neg, S, float("-inf")).amax(dim=1, keepdim=True)  # no negative
    hardest_pos = torch.where(pos, S, float("inf")).amin(dim=1, keepdim=True)  # no positive
    return pos & (S - epsilon < hardest_neg), neg & (S + epsilon > hardest_pos)


class MultiSimilarityLoss(MetricLoss):
    r"""Multi-similarity loss on cosine similarities, with pair mining (Wang et al., 2019).

    For every anchor :math:`i` of the batch, with cosine similarities
    :math:`S_{ik}`, its (mined) positives :math:`P_i` and negatives :math:`N_i`,

    .. math::

        \ell_i = \frac{1}{\alpha} \log\Big(1 + \sum_{k \in P_i}
                 e^{-\alpha (S_{ik} - \lambda)}\Big)
               + \frac{1}{\beta} \log\Big(1 + \sum_{k \in N_i}
                 e^{\beta (S_{ik} - \lambda)}\Big),

    where :math:`\alpha` is ``alpha``, :math:`\beta` is ``beta`` and
    :math:`\lambda` is ``base`` (Eq. 7 of the paper). The soft weights of the
    two log-sum-exps weigh every pair by its own similarity *and* by its
    relative similarity to the anchor's other pairs; the mining step
    (:func:`multi_similarity_pairs`) keeps only the informative pairs first.

    Parameters
    ----------
    alpha : float, default=2.0
        Scale of the positive pairs (the paper's value).
    beta : float, default=50.0
        Scale of the negative pairs (the paper's value).
    base : float, default=0.5
        The similarity margin :math:`\lambda` (paper: 0.5; pytorch-metric-learning's ``base``).
    epsilon : float, default=0.1
        Margin of the mining rule (paper: 0.1).
    mining : bool, default=True
        Mine the pairs first (the paper's method). ``False`` uses every pair.
    reduction : {"mean", "sum", "mean_nonzero"}, default="mean"
        Over the anchors of the batch: ``"mean"`` averages over all of them
        (anchors without a kept pair count as 0), as the paper and
        pytorch-metric-learning's ``MultiSimilarityLoss`` do.

    Notes
    -----
    The loss reads no value back to the host (the mining is a pair of masks).
    With ``mining=True`` it equals pytorch-metric-learning's
    ``MultiSimilarityLoss()(z, y, MultiSimilarityMiner()(z, y))`` (tested),
    except that pytorch-metric-learning returns 0 when mining keeps at most
    one positive and one negative pair in the whole batch.

    Examples
    --------
    >>> import torch
    >>> from skdml.losses import MultiSimilarityLoss
    >>> x = torch.tensor([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0], [0.6, 0.8]])
    >>> y = torch.tensor([0, 0, 1, 1])
    >>> round(MultiSimilarityLoss()(x, y).item(), 4)
    0.3394
    >>> round(MultiSimilarityLoss(mining=False)(x, y).item(), 4)
    0.4988
    """

    normalize_embeddings = True

    def __init__(self, alpha: float = 2.0, beta: float = 50.0, base: float = 0.5,
                 epsilon: float = 0.1, mining: bool = True, reduction: str = "mean"):
        super().__init__(reduction)
        check_params("MultiSimilarityLoss", {
            "alpha": [positive_real()], "beta": [positive_real()], "base": [finite_real()],
            "epsilon": [non_negative_real()], "mining": ["boolean"]},
            {"alpha": alpha, "beta": beta, "base": base, "epsilon": epsilon, "mining": mining})
        self.alpha, self.beta, self.base = float(alpha), float(beta), float(base)
        self.epsilon, self.mining = float(epsilon), bool(mining)

    def extra_repr(self) -> str:
        return (f"alpha={self.alpha}, beta={self.beta}, base={self.base}, "
                f"epsilon={self.epsilon}, mining={self.mining}, reduction={self.reduction!r}")

    def tuple_losses(self, x, labels):
        S = x @ x.T
        if self.mining:
            pos, neg = multi_similarity_pairs(S, labels, self.epsilon)
        else:
            pos, neg = same_class_masks(labels)
        pos_term = _log1p_sum_exp(-self.alpha * (S - self.base), pos) / self.alpha
        neg_term = _log1p_sum_exp(self.beta * (S - self.base), neg) / self.beta
        losses = pos_term + neg_term
        return losses, torch.ones_like(losses)


def _log1p_sum_exp(values, mask):
    """Row-wise ``log(1 + sum_{mask} exp(values))``, stable (0 for a row without a kept pair)."""
    masked = torch.where(mask, values, float("-inf"))
    zero = values.new_zeros(values.shape[0], 1)
    return torch.logsumexp(torch.cat([masked, zero], dim=1), dim=1)
