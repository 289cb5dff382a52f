"""Additive-margin softmax (AM-Softmax / CosFace) with learnable class proxies."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .._utils._params import (check_params, non_negative_real, positive_int,
                              positive_real)
from ._base import MetricLoss, check_embeddings_labels, unit_rows, zero_loss

__all__ = ["AMSoftmaxLoss"]


class AMSoftmaxLoss(MetricLoss):
    r"""Additive-margin softmax loss (Wang et al., 2018) as used by JRD (Eq. 11).

    With normalised embeddings :math:`\hat x_i` and normalised proxies
    :math:`\hat w_c`, :math:`\cos_{ic} = \hat w_c^\top \hat x_i` and

    .. math::

        \ell_i = -\log \frac{e^{s(\cos_{i y_i} - m)}}
                 {e^{s(\cos_{i y_i} - m)} + \sum_{c \neq y_i} e^{s \cos_{ic}}},

    reduced over the batch. Equal to pytorch-metric-learning's
    ``CosFaceLoss(num_classes, embedding_size, margin=m, scale=s)`` when its
    ``W`` (shape ``(embedding_dim, n_classes)``) equals ``proxies.T``.

    Parameters
    ----------
    n_classes : int
        Number of classes ``C``; labels must lie in ``[0, C)``.
    embedding_dim : int
        Dimension ``d`` of the embeddings.
    scale : float, default=20.0
        The scale ``s`` (JRD fixes it to 20).
    margin : float, default=0.1
        The additive margin ``m`` (JRD cross-validates it: 0.1 on CUB and SOP,
        0.05 on CARS).
    reduction : {"mean", "sum"}, default="mean"
        Reduction over the samples.

    Attributes
    ----------
    proxies : torch.nn.Parameter of shape (n_classes, embedding_dim)
        The learnable class proxies :math:`w_c` (un-normalised), initialised
        i.i.d. standard normal (as pytorch-metric-learning does); seed torch
        or call :meth:`reset_parameters` with a generator for reproducibility.

    Examples
    --------
    >>> import torch
    >>> from skdml.losses import AMSoftmaxLoss
    >>> loss = AMSoftmaxLoss(n_classes=2, embedding_dim=2, scale=20.0, margin=0.1)
    >>> with torch.no_grad():
    ...     loss.proxies.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0]]))
    Parameter containing:...
    >>> x = torch.tensor([[2.0, 0.0], [0.0, 3.0]])
    >>> loss.class_cosines(x)
    tensor([[1., 0.],
            [0., 1.]], grad_fn=<MmBackward0>)
    >>> round(loss(x, torch.tensor([0, 1])).item(), 5)  # log(1 + exp(-20 * 0.9))
    0.0
    >>> round(loss(x, torch.tensor([1, 0])).item(), 3)  # log(1 + exp(20 * 1.1))
    22.0
    """

    normalize_embeddings = True
    reductions = ("mean", "sum")

    def __init__(self, n_classes: int, embedding_dim: int, scale: float = 20.0,
                 margin: float = 0.1, reduction: str = "mean"):
        super().__init__(reduction)
        check_params("AMSoftmaxLoss", {
            "n_classes": [positive_int()], "embedding_dim": [positive_int()],
            "scale": [positive_real()], "margin": [non_negative_real()]},
            {"n_classes": n_classes, "embedding_dim": embedding_dim, "scale": scale,
             "margin": margin})
        self.n_classes = int(n_classes)
        self.embedding_dim = int(embedding_dim)
        self.scale = float(scale)
        self.margin = float(margin)
        self.proxies = nn.Parameter(torch.empty(self.n_classes, self.embedding_dim))
        self.reset_parameters()

    def reset_parameters(self, generator: torch.Generator | None = None) -> None:
        """Draw the proxies from a standard normal (optionally from ``generator``)."""
        with torch.no_grad():
            self.proxies.normal_(generator=generator)

    def extra_repr(self) -> str:
        return (f"n_classes={self.n_classes}, embedding_dim={self.embedding_dim}, "
                f"scale={self.scale}, margin={self.margin}, reduction={self.reduction!r}")

    def class_cosines(self, embeddings: torch.Tensor) -> torch.Tensor:
        """Cosines ``(n, n_classes)`` between the embeddings and the normalised proxies.

        This is JRD's class-level representation :math:`x^+` (JRD Eq. 9).
        """
        if embeddings.ndim != 2 or embeddings.shape[1] != self.embedding_dim:
            raise ValueError(
                f"embeddings must have shape (n, {self.embedding_dim}), "
                f"got {tuple(embeddings.shape)}."
            )
        proxies = self.proxies.to(dtype=embeddings.dtype, device=embeddings.device)
        return unit_rows(embeddings) @ F.normalize(proxies, dim=1).T

    def _check_label_range(self, labels):
        # Only where reading the labels costs no device synchronisation.
        if labels.device.type == "cpu" and labels.numel() and (
                int(labels.min()) < 0 or int(labels.max()) >= self.n_classes):
            raise ValueError(
                f"labels must lie in [0, {self.n_classes}), got values in "
                f"[{int(labels.min())}, {int(labels.max())}].")

    def forward(self, embeddings: torch.Tensor, labels, cosines=None) -> torch.Tensor:
        """Loss of a batch; pass ``cosines=class_cosines(embeddings)`` to reuse them."""
        labels = check_embeddings_labels(embeddings, labels)
        self._check_label_range(labels)
        if embeddings.shape[0] == 0:
            return zero_loss(embeddings, self.proxies).to(embeddings.dtype)
        if cosines is None:
            cosines = self.class_cosines(embeddings)
        losses, weights = self._losses(cosines, labels)
        return self.reduce(losses, weights)

    def tuple_losses(self, x, labels):
        return self._losses(self.class_cosines(x), labels)

    def _losses(self, cosines, labels):
        one_hot = F.one_hot(labels, self.n_classes).to(cosines.dtype)
        logits = self.scale * (cosines - self.margin * one_hot)
        losses = F.cross_entropy(logits, labels, reduction="none")
        return losses, torch.ones_like(losses)
