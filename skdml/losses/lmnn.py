"""Large-margin nearest-neighbour loss (Weinberger & Saul, JMLR 2009), on minibatches."""

from __future__ import annotations

from numbers import Real

import torch
import torch.nn.functional as F

from .._utils._params import (StrictInterval, check_params, non_negative_real,
                              positive_int)
from ._base import MetricLoss, abs_max, batch_mean, pairwise_sq_dists, same_class_masks

__all__ = ["LMNNLoss"]


class LMNNLoss(MetricLoss):
    r"""Large-margin nearest-neighbour (LMNN) loss on the squared distances of a batch.

    For every anchor :math:`a` of the batch, its *target neighbours*
    :math:`T(a)` are its ``n_neighbors`` nearest samples of the same class in
    the batch (under the current embedding; the choice is not differentiated),
    and the anchor's loss is LMNN's cost (Weinberger & Saul 2009, Eq. 13)
    restricted to the batch:

    .. math::

        \ell_a = (1 - \mu) \sum_{t \in T(a)} d_{at}
                 + \mu \sum_{t \in T(a)} \sum_{n:\, y_n \neq y_a}
                   \left[m + d_{at} - d_{an}\right]_+,

    with :math:`d_{ij} = \|z_i - z_j\|_2^2`, the margin :math:`m` (``margin``)
    and :math:`\mu` (``push_weight``). The *pull* term gathers each sample's
    target neighbours; the *push* term keeps every sample of another class
    (an impostor) at least the margin farther than them. What k-NN rewards
    is exactly this: the nearest neighbours of a sample share its class.

    Parameters
    ----------
    n_neighbors : int or None, default=3
        Target neighbours per anchor, chosen as the nearest positives of the
        batch (all of them when the anchor has fewer); ``None``: every
        positive of the batch. LMNN's ``k`` (3 in metric-learn).
    margin : float, default=1.0
        The margin :math:`m`, in squared-distance units (LMNN's 1). The loss
        is not scale-invariant: it fixes the scale of the embedding.
    push_weight : float, default=0.5
        :math:`\mu` in [0, 1], the weight of the push term (LMNN's 0.5).
    normalize : bool, default=False
        Work on unit-normalised embeddings (then ``margin`` is in squared
        chordal units, at most 4).
    reduction : {"mean", "sum", "mean_nonzero"}, default="mean"
        Over the anchors that have a target neighbour: ``"sum"`` is LMNN's
        literal cost on the batch, ``"mean"`` divides it by the number of
        such anchors, ``"mean_nonzero"`` by the number with a positive loss.

    Notes
    -----
    The target neighbours are chosen in the embedding being learned, batch
    by batch (LMNN fixes them in the input space, once, over the whole data
    set: a P x K batch does not hold a sample's global neighbours). The
    distances are squared, so the gradient is finite everywhere. An anchor
    without a positive in the batch contributes nothing; one without a
    negative contributes its pull term only.

    References
    ----------
    K. Q. Weinberger and L. K. Saul. Distance Metric Learning for Large
    Margin Nearest Neighbor Classification. JMLR 10, 2009.

    Examples
    --------
    >>> import torch
    >>> from skdml.losses import LMNNLoss
    >>> z = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 1.5], [0.0, 3.0]])
    >>> y = torch.tensor([0, 0, 1, 1])
    >>> loss = LMNNLoss(n_neighbors=1, margin=1.0, push_weight=0.5, reduction="sum")
    >>> # pull: 0.5 * (1 + 1 + 2.25 + 2.25); push: only anchor 2 (target 3 at 2.25)
    >>> # has an impostor inside the margin, sample 0 at 2.25: 0.5 * [1 + 2.25 - 2.25]_+
    >>> round(loss(z, y).item(), 4)
    3.75
    """

    reductions = ("mean", "sum", "mean_nonzero")

    def __init__(self, n_neighbors: int | None = 3, margin: float = 1.0,
                 push_weight: float = 0.5, normalize: bool = False, reduction: str = "mean"):
        super().__init__(reduction)
        check_params("LMNNLoss", {
            "n_neighbors": [positive_int(), None], "margin": [non_negative_real()],
            "push_weight": [StrictInterval(Real, 0, 1, closed="both")],
            "normalize": ["boolean"]},
            {"n_neighbors": n_neighbors, "margin": margin, "push_weight": push_weight,
             "normalize": normalize})
        self.n_neighbors = None if n_neighbors is None else int(n_neighbors)
        self.margin = float(margin)
        self.push_weight = float(push_weight)
        self.normalize = bool(normalize)

    @property
    def normalize_embeddings(self):
        return self.normalize

    def extra_repr(self) -> str:
        return (f"n_neighbors={self.n_neighbors}, margin={self.margin}, "
                f"push_weight={self.push_weight}, normalize={self.normalize}, "
                f"reduction={self.reduction!r}")

    def target_neighbors(self, dist, pos):
        """``(index, valid)``, both ``(n, k)``: each anchor's nearest positives (by ``dist``).

        ``valid`` is False where an anchor has fewer than ``k`` positives.
        """
        n = dist.shape[0]
        k = n - 1 if self.n_neighbors is None else min(self.n_neighbors, max(n - 1, 1))
        masked = torch.where(pos, dist.detach(), torch.full_like(dist, float("inf")))
        index = masked.topk(k, dim=1, largest=False).indices
        return index, pos.gather(1, index)

    def tuple_losses(self, z, labels):
        # squared distances of large embeddings overflow (inf - inf in the Gram expansion):
        # computed on z / c (c: the power of two at or above the largest |z|, when above 1;
        # exact, so the same bits as unscaled where nothing overflows) with the margin m / c^2,
        # and the losses scaled back by c twice, so the value is the true one or +inf
        if z.shape[0]:  # distances do not move with a translation: centred, nothing cancels
            z = z - batch_mean(z)
        c = torch.exp2(torch.ceil(torch.log2(abs_max(z, floor=1.0))))
        dist = pairwise_sq_dists(z / c)
        pos, neg = same_class_masks(labels)
        if z.shape[0] < 2:
            return dist.sum(dim=1) * c * c, torch.zeros_like(dist[:, 0])
        index, valid = self.target_neighbors(dist, pos)
        valid = valid.to(dist.dtype)
        d_target = dist.gather(1, index)  # (n, k)
        pull = (d_target * valid).sum(dim=1)
        # [m + d_at - d_an]_+ over (t, n): an (n, k, n) tensor
        hinge = F.relu(self.margin / (c * c) + d_target[:, :, None] - dist[:, None, :])
        weight = valid[:, :, None] * neg[:, None, :].to(dist.dtype)
        push = (hinge * weight).sum(dim=(1, 2))
        losses = (1.0 - self.push_weight) * pull + self.push_weight * push
        return losses * c * c, (valid.sum(dim=1) > 0).to(dist.dtype)
