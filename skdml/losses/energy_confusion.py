"""Energy Confusion regulariser (ECAML Eq. 3 and Eq. 11)."""

from __future__ import annotations

import torch
from torch import nn

from ._common import check_embeddings_labels, zero_loss

__all__ = ["EnergyConfusion", "class_pair_energies"]


def class_pair_energies(embeddings: torch.Tensor, labels) -> torch.Tensor:
    r"""Expected squared distances between the classes of a batch (ECAML Eq. 3).

    .. math::

        E_{IJ} = \frac{1}{n_I n_J} \sum_{i \in I} \sum_{j \in J} \|x_i - x_j\|_2^2
               = \overline{\|x\|^2}_I + \overline{\|x\|^2}_J - 2\,\mu_I^\top \mu_J,

    computed from class means in ``O(n d + C^2 d)`` (no ``(n, n)`` matrix) and
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
    """
    labels = check_embeddings_labels(embeddings, labels)
    classes, inverse = torch.unique(labels, return_inverse=True)
    n_classes = classes.shape[0]
    if n_classes == 0:
        return embeddings.new_zeros((0, 0)) + zero_loss(embeddings)
    # distances are translation invariant: centring first avoids the cancellation
    # of mean ||x||^2 - ||mu||^2 when the batch sits far from the origin
    embeddings = embeddings - embeddings.mean(dim=0).detach()
    one_hot = torch.nn.functional.one_hot(inverse, n_classes).to(embeddings.dtype)
    counts = one_hot.sum(dim=0)
    means = (one_hot.T @ embeddings) / counts[:, None]
    mean_sq = (one_hot.T @ (embeddings * embeddings).sum(dim=1)) / counts
    energies = mean_sq[:, None] + mean_sq[None, :] - 2.0 * (means @ means.T)
    return energies.clamp_min(0.0)


class EnergyConfusion(nn.Module):
    r"""Energy Confusion regulariser of ECAML (Eq. 3; log form Eq. 11).

    For each ordered pair of different classes ``(I, J)`` present in the batch,
    :math:`L_{ec}(X_I, X_J)` is the expected squared Euclidean distance between
    an embedding of class ``I`` and one of class ``J`` (uniform over the
    samples, :math:`p_{ij} = 1 / (n_I n_J)`), see :func:`class_pair_energies`.
    The regulariser is

    .. math::

        \sum_{I \neq J} L_{ec}(X_I, X_J) \quad\text{or, with ``log=True``,}\quad
        \sum_{I \neq J} \log(1 + L_{ec}(X_I, X_J)).

    It enters the objective with ``+lambda`` (the caller multiplies): its
    gradient pulls the embeddings of different classes *together*, the
    "confusion" that ECAML uses against over-fitting the seen classes.

    Parameters
    ----------
    log : bool, default=True
        Use the ``log(1 + EC)`` form of ECAML Eq. 11 (the paper's choice for
        numerical stability).
    reduction : {"sum", "mean"}, default="sum"
        ``"sum"`` over ordered class pairs ``I != J`` as written in ECAML
        Eq. 7/11 (each unordered pair counted twice); ``"mean"`` divides by the
        number of ordered class pairs, making the weight independent of the
        number of classes per batch.

    Notes
    -----
    The distance is taken on the embeddings as given (ECAML applies EC to the
    fc-layer output); normalise them first if the metric loss works on the
    sphere. A batch with fewer than two classes gives 0 attached to the graph.

    Examples
    --------
    >>> import torch
    >>> from skdml.losses import EnergyConfusion
    >>> x = torch.tensor([[0.0, 0.0], [0.0, 2.0], [3.0, 0.0]])
    >>> y = torch.tensor([0, 0, 1])
    >>> EnergyConfusion(log=False)(x, y)  # 2 * (9 + 13) / 2
    tensor(22.)
    >>> round(EnergyConfusion()(x, y).item(), 4)  # 2 * log(1 + 11)
    4.9698
    """

    def __init__(self, log: bool = True, reduction: str = "sum"):
        super().__init__()
        if reduction not in ("sum", "mean"):
            raise ValueError(f"reduction must be 'sum' or 'mean', got {reduction!r}.")
        self.log = bool(log)
        self.reduction = reduction

    def extra_repr(self) -> str:
        return f"log={self.log}, reduction={self.reduction!r}"

    def forward(self, embeddings: torch.Tensor, labels) -> torch.Tensor:
        labels = check_embeddings_labels(embeddings, labels)
        energies = class_pair_energies(embeddings, labels)
        n_classes = energies.shape[0]
        if n_classes < 2:
            return zero_loss(embeddings)
        off = ~torch.eye(n_classes, dtype=torch.bool, device=energies.device)
        terms = energies[off]
        if self.log:
            terms = torch.log1p(terms)
        return terms.sum() if self.reduction == "sum" else terms.mean()
