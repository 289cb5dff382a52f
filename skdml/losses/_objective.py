"""A metric loss plus a weighted regulariser: the objective every skdml learner minimises."""

from __future__ import annotations

import torch

from ._base import MetricLoss, propagate_non_finite
from .jrs import JRSRegularizer

__all__ = ["MetricObjective"]


class MetricObjective:
    """``loss(z, y) + weight * regularizer(representation, y)``, one wiring for every learner.

    The regulariser sees the representation the metric loss works on: the
    unit-normalised embeddings for a loss that declares
    ``normalize_embeddings`` (triplet, binomial, AM-Softmax), the raw ones
    otherwise; for JRS, the joint representation
    ``[*layers, embeddings, class cosines]``
    (:meth:`~skdml.losses.JRSRegularizer.representations`). So a given
    ``weight`` means the same in :class:`~skdml.ECAML`, :class:`~skdml.JRD` and
    :class:`~skdml.DeepMetricTransformer`.

    Parameters
    ----------
    loss : callable
        ``loss(embeddings, labels) -> scalar tensor``.
    regularizer : callable or None, default=None
        ``regularizer(representation, labels) -> scalar tensor``.
    weight : float, default=0.0
        Weight of the regulariser; 0 switches it off.

    Examples
    --------
    >>> import torch
    >>> from skdml.losses import BinomialDevianceLoss, EnergyConfusion
    >>> objective = MetricObjective(BinomialDevianceLoss(), EnergyConfusion(), weight=0.5)
    >>> z, y = torch.tensor([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0]]), torch.tensor([0, 0, 1])
    >>> total, terms = objective(z, y)
    >>> sorted(terms)
    ['metric_loss', 'regularizer']
    >>> bool(torch.isclose(total, terms["metric_loss"] + 0.5 * terms["regularizer"]))
    True
    """

    def __init__(self, loss, regularizer=None, weight=0.0):
        self.loss = loss
        self.regularizer = regularizer
        self.weight = float(weight)

    @property
    def regularized(self):
        """Whether the regulariser contributes (present with a positive weight)."""
        return self.regularizer is not None and self.weight > 0

    def regularization(self, embeddings, labels, *, layers=None, cosines=None):
        """The unweighted regulariser on the representation the loss works on."""
        if isinstance(self.regularizer, JRSRegularizer):
            if isinstance(self.loss, MetricLoss) and self.loss.normalize_embeddings:
                # unit rows for AM-Softmax (JRD Eq. 9); rows the learner normalised already
                # (linear JRD, a normalising deep head) are kept bit for bit
                norms = torch.linalg.vector_norm(embeddings.detach(), dim=1, keepdim=True)
                near_unit = (norms - 1).abs() <= 8 * torch.finfo(embeddings.dtype).eps
                embeddings = torch.where(near_unit, embeddings, self.loss.prepare(embeddings))
            reps = self.regularizer.representations(layers, embeddings, self.loss)
            if cosines is not None and hasattr(self.loss, "class_cosines"):
                reps[-1] = cosines
            return self.regularizer(reps, labels)
        if isinstance(self.loss, MetricLoss):
            embeddings = self.loss.prepare(embeddings)
        return self.regularizer(embeddings, labels)

    def __call__(self, embeddings, labels, *, regularizer_embeddings=None, layers=None):
        """Return ``(total, terms)``; ``terms`` holds the unweighted parts by name.

        ``regularizer_embeddings`` (default: ``embeddings``) lets a learner give
        the regulariser another view of the same embeddings, e.g. one whose
        gradient stops at the embedding layer (ECAML applies EC to the fc layer
        only). ``layers`` are the extra JRS layers.
        """
        cosines = None
        if hasattr(self.loss, "class_cosines") and isinstance(self.regularizer, JRSRegularizer):
            cosines = self.loss.class_cosines(embeddings)  # computed once, used twice
            value = self.loss(embeddings, labels, cosines=cosines)
        else:
            value = self.loss(embeddings, labels)
        if not isinstance(value, torch.Tensor) or value.ndim != 0:
            what = f"a tensor of shape {tuple(value.shape)}" if isinstance(value, torch.Tensor) \
                else type(value).__name__
            raise TypeError(f"The loss must return a scalar torch.Tensor; {self.loss!r} returned "
                            f"{what}.")
        if not isinstance(self.loss, MetricLoss):  # a foreign loss may mask a NaN embedding
            value = propagate_non_finite(value, embeddings)
        terms = {"metric_loss": value}
        total = value
        if self.regularized:
            reg_in = embeddings if regularizer_embeddings is None else regularizer_embeddings
            reg = self.regularization(reg_in, labels, layers=layers,
                                      cosines=cosines if regularizer_embeddings is None else None)
            terms["regularizer"] = reg
            total = total + self.weight * reg
        return total, terms
