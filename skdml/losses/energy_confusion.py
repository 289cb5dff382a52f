"""Energy Confusion regulariser (ECAML Eq. 3 and Eq. 11)."""

from __future__ import annotations

import torch

from .._utils._params import check_params
from ._base import MetricLoss, abs_max, batch_mean, check_embeddings_labels, zero_loss

__all__ = ["EnergyConfusion", "class_pair_energies"]


def class_pair_energies(embeddings: torch.Tensor, labels) -> torch.Tensor:
    r"""Expected squared distances between the classes of a batch (ECAML Eq. 3).

    .. math::

        E_{IJ} = \frac{1}{n_I n_J} \sum_{i \in I} \sum_{j \in J} \|x_i - x_j\|_2^2
               = \overline{\|x\|^2}_I + \overline{\|x\|^2}_J - 2\,\mu_I^\top \mu_J,

    computed from class means in ``O(n d + C^2 d)`` after centring the batch,
    clamped at 0 against round-off.

    Parameters
    ----------
    embeddings : torch.Tensor of shape (n_samples, n_dims)
    labels : torch.Tensor of shape (n_samples,)

    Returns
    -------
    energies : torch.Tensor of shape (n_classes_in_batch, n_classes_in_batch)
        Classes in sorted label order; the diagonal holds the within-class
        expected distance ``2 * (mean ||x||^2 - ||mu||^2)`` (not used by EC).

    Examples
    --------
    >>> import torch
    >>> E = class_pair_energies(torch.tensor([[0.0], [2.0], [5.0]]), [0, 0, 1])
    >>> [[round(v, 4) for v in row] for row in E.tolist()]
    [[2.0, 17.0], [17.0, 0.0]]
    """
    labels = check_embeddings_labels(embeddings, labels)
    classes, inverse = torch.unique(labels, return_inverse=True)
    n_classes = classes.shape[0]
    if n_classes == 0:
        return embeddings.new_zeros((0, 0)) + zero_loss(embeddings)
    dtype = embeddings.dtype
    # squares of large values overflow (inf - inf: NaN): in units of s, a power of two at or
    # above the largest |x| when above 1 (exact; in float64, which holds 2**128), then
    # centred (the mean of x / s cannot overflow), scaled back in float64 (inf if too big)
    s = torch.exp2(torch.ceil(torch.log2(abs_max(embeddings, floor=1.0).double())))
    embeddings = (embeddings.double() / s).to(dtype)
    embeddings = embeddings - embeddings.mean(dim=0).detach()
    one_hot = torch.nn.functional.one_hot(inverse, n_classes).to(dtype)
    counts = one_hot.sum(dim=0)
    means = (one_hot.T @ embeddings) / counts[:, None]
    mean_sq = (one_hot.T @ (embeddings * embeddings).sum(dim=1)) / counts
    energies = mean_sq[:, None] + mean_sq[None, :] - 2.0 * (means @ means.T)
    return (energies.clamp_min(0.0).to(torch.float64) * s ** 2).to(dtype)


class EnergyConfusion(MetricLoss):
    r"""Energy Confusion regulariser of ECAML (Eq. 3; log form Eq. 11).

    For each ordered pair of different classes ``(I, J)`` present in the batch,
    :math:`L_{ec}(X_I, X_J)` is the expected squared Euclidean distance between
    an embedding of class ``I`` and one of class ``J`` (uniform over the
    samples, :math:`p_{ij} = 1 / (n_I n_J)`), see :func:`class_pair_energies`.
    The regulariser reduces, over the ordered class pairs,

    .. math::

        L_{ec}(X_I, X_J) \quad\text{or, with ``log=True``,}\quad
        \log(1 + L_{ec}(X_I, X_J)).

    It enters an objective with ``+lambda`` (the caller multiplies): its
    gradient pulls the embeddings of different classes *together*, the
    "confusion" that ECAML uses against over-fitting the seen classes.

    Parameters
    ----------
    log : bool, default=True
        Use the ``log(1 + EC)`` form of ECAML Eq. 11 (the paper's choice for
        numerical stability).
    reduction : {"mean", "sum"}, default="mean"
        ``"mean"`` over the ordered class pairs (the weight then does not grow
        with the number of classes per batch; skdml's one semantics, used by
        :class:`~skdml.ECAML` and :class:`~skdml.DeepMetricTransformer`
        alike); ``"sum"`` as written in ECAML Eq. 7/11 (each unordered pair
        counted twice).

    Notes
    -----
    The distance is taken on the embeddings as given (ECAML applies EC to the
    fc-layer output); learners pass the representation their metric loss works
    on (:meth:`MetricLoss.prepare`). The computation is dense over the batch
    (class means through the ``(n, n)`` class-averaging matrix, no device
    synchronisation) and rescaled, so embeddings of any finite norm give a
    finite value (``log=True``) or ``inf`` where the energy exceeds the
    dtype's range (``log=False``), never NaN. A batch with fewer than two
    classes gives 0 attached to the graph.

    Examples
    --------
    >>> import torch
    >>> from skdml.losses import EnergyConfusion
    >>> x = torch.tensor([[0.0, 0.0], [0.0, 2.0], [3.0, 0.0]])
    >>> y = torch.tensor([0, 0, 1])
    >>> EnergyConfusion(log=False, reduction="sum")(x, y)  # 2 * (9 + 13) / 2
    tensor(22.)
    >>> round(EnergyConfusion()(x, y).item(), 4)  # log(1 + 11)
    2.4849
    """

    reductions = ("mean", "sum")

    def __init__(self, log: bool = True, reduction: str = "mean"):
        super().__init__(reduction)
        check_params("EnergyConfusion", {"log": ["boolean"]}, {"log": log})
        self.log = bool(log)

    def extra_repr(self) -> str:
        return f"log={self.log}, reduction={self.reduction!r}"

    def tuple_losses(self, x, labels):
        x = x - batch_mean(x)  # distances are translation invariant (a mean that cannot overflow)
        s = abs_max(x, 1.0).to(torch.float64)  # scale (detached)
        x = x / s.to(x.dtype)
        same = labels[:, None] == labels[None, :]
        counts = same.sum(dim=1).to(x.dtype)
        average = same.to(x.dtype) / counts[:, None]  # row i: mean over the class of i
        means = average @ x  # mu_{c(i)}
        mean_sq = average @ (x * x).sum(dim=1)  # mean ||x||^2 over the class of i
        scaled = mean_sq[:, None] + mean_sq[None, :] - 2.0 * (means @ means.T)
        scaled = scaled.clamp_min(0.0).to(torch.float64)
        if self.log:  # log(1 + s^2 e) = 2 log s + log(s^-2 + e): finite where s^2 overflows
            terms = 2.0 * torch.log(s) + torch.log(s ** -2.0 + scaled)
        else:
            terms = scaled * (s * s)  # E_{c(i) c(j)}
        # each ordered class pair (I, J) is covered by n_I n_J sample pairs
        weights = (~same).to(x.dtype) / (counts[:, None] * counts[None, :])
        return terms.to(x.dtype), weights
