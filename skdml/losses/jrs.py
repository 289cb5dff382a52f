"""Joint Representation Similarity regulariser (JRD, Chu et al. 2020, Eq. 8-11)."""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

import torch

from .._utils._params import check_params
from ._base import (MetricLoss, abs_max, batch_mean, check_embeddings_labels, pairwise_sq_dists,
                    same_class_masks, zero_loss)

__all__ = ["JRSRegularizer"]


class JRSRegularizer(MetricLoss):
    r"""Joint Representation Similarity (JRS) regulariser of JRD (Eq. 8-11).

    Given ``L`` representations :math:`x^1, \dots, x^L` of the same batch (JRD
    uses the input / pooling features, the DML embedding and the class-level
    cosines), the regulariser is the mean, over the ``N_pairs`` ordered pairs
    ``(i, j)`` of samples of different classes, of the product over layers of
    kernels:

    .. math::

        \frac{1}{N_{pairs}} \sum_{I \neq J} \sum_{i \in I} \sum_{j \in J}
        \prod_{l=1}^{L} k_l(x_i^l, x_j^l).

    This is JRD Eq. 10 (the estimate of Eq. 8 re-weighted by :math:`n_I n_J`)
    divided by :math:`N_{pairs}` as in Eq. 11 (``reduction="mean"``, the one
    semantics of :class:`~skdml.JRD` and :class:`~skdml.DeepMetricTransformer`). The kernel of layer ``l`` is a
    mixture (sum) of Gaussians

    .. math::

        k_l(x, x') = \sum_{k=1}^{K} \exp\left(-\frac{\|x - x'\|_2^2}{b_k \tau_l}\right),

    with :math:`b = (0.5, 1, 2)` (``K = 3``) on every layer except the
    last representation, which uses the single kernel :math:`b = (1,)`
    (``single_kernel_layers=(-1,)``): the class-level one when the loss has
    class proxies (JRD's cosines), else the embedding itself. The
    bandwidth :math:`\tau_l` is self-adaptive: the mean squared distance
    between distinct samples of the batch in layer ``l``.

    Parameters
    ----------
    bandwidths : sequence of float, default=(0.5, 1.0, 2.0)
        Multipliers :math:`b_k` of :math:`\tau_l` for the multi-kernel layers.
    single_kernel_layers : sequence of int, default=(-1,)
        Indices (negative allowed) of the layers that use one kernel with
        bandwidth :math:`\tau_l` (JRD: the class-level representation, the
        last one). ``()`` uses the mixture on every layer.
    detach_tau : bool, default=True
        Treat :math:`\tau_l` as a constant in the gradient. JRD calls it a
        "self-adaptive parameter" (a bandwidth, not an objective term); the
        multi-kernel MMD code it builds on computes it from ``.data``.
        With ``False`` the gradient also flows through :math:`\tau_l`.
    layer_weights : sequence of float or None, default=None
        Optional exponent per layer, ``prod_l k_l ** w_l`` (JRD has none:
        all 1). A weight of 0 removes a layer.
    reduction : {"mean", "sum"}, default="mean"
        Reduction over the ordered pairs of samples of different classes.
    layers : str or list of str, default=None
        For :class:`~skdml.DeepMetricTransformer` only: names (fnmatch
        patterns allowed) of backbone sub-modules whose outputs join the joint
        representation, captured with forward hooks during ``fit``;
        ``None`` uses the backbone's output. The linear :class:`~skdml.JRD`
        uses its input.

    Notes
    -----
    ``forward(representations, labels)`` takes a list of ``(n, d_l)`` tensors.
    Squared distances use the Gram expansion clamped at 0 (no square root), so
    gradients are finite at zero distance; each layer is rescaled first (the
    kernels only see ``d / tau``), so representations of any finite norm work.
    :meth:`representations` builds JRD's list from a learner's layers, its
    embedding and, when the metric loss has ``class_cosines``, the class level. :math:`\tau_l` is clamped below by
    the dtype's ``eps`` for a batch of identical points. A batch without any
    pair of different classes gives 0 attached to the graph.

    Examples
    --------
    >>> import torch
    >>> from skdml.losses import JRSRegularizer
    >>> x = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    >>> y = torch.tensor([0, 0, 1])
    >>> jrs = JRSRegularizer(single_kernel_layers=())
    >>> round(jrs([x], y).item(), 4)  # one layer, tau = 4 / 3
    1.064
    >>> round(JRSRegularizer()([x, x], y).item(), 4)  # mixture x single kernel
    0.4097
    """

    def __init__(
        self,
        bandwidths: Sequence[float] = (0.5, 1.0, 2.0),
        single_kernel_layers: Sequence[int] = (-1,),
        detach_tau: bool = True,
        layer_weights: Sequence[float] | None = None,
        reduction: str = "mean",
        layers: str | Sequence[str] | None = None,
    ):
        super().__init__(reduction)
        if layers is not None and not (isinstance(layers, str) or (
                isinstance(layers, Sequence) and all(isinstance(n, str) for n in layers))):
            raise ValueError(f"layers must be a module name or a list of them, got {layers!r}.")
        self.layers = layers if layers is None or isinstance(layers, str) else tuple(layers)
        for name, values in (("bandwidths", bandwidths),
                             ("single_kernel_layers", single_kernel_layers)):
            if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
                raise ValueError(f"{name} must be a sequence of numbers, got {values!r}.")
        if not all(isinstance(i, numbers.Integral) and not isinstance(i, bool)
                   for i in single_kernel_layers):
            raise ValueError("single_kernel_layers must be layer indices (integers), got "
                             f"{tuple(single_kernel_layers)!r}.")
        bandwidths = tuple(float(b) for b in bandwidths)
        if not bandwidths or not all(math.isfinite(b) and b > 0 for b in bandwidths):
            raise ValueError(f"bandwidths must be finite positive numbers, got {bandwidths}.")
        if layer_weights is not None and not all(
                math.isfinite(float(w)) and float(w) >= 0 for w in layer_weights):
            raise ValueError(f"layer_weights must be finite non-negative numbers, got "
                             f"{tuple(layer_weights)}.")
        check_params("JRSRegularizer", {"detach_tau": ["boolean"]}, {"detach_tau": detach_tau})
        self.bandwidths = bandwidths
        self.single_kernel_layers = tuple(int(i) for i in single_kernel_layers)
        self.detach_tau = bool(detach_tau)
        self.layer_weights = (
            None if layer_weights is None else tuple(float(w) for w in layer_weights)
        )

    def extra_repr(self) -> str:
        return (
            f"bandwidths={self.bandwidths}, single_kernel_layers={self.single_kernel_layers}, "
            f"detach_tau={self.detach_tau}, layer_weights={self.layer_weights}, "
            f"reduction={self.reduction!r}" + ("" if self.layers is None else f", layers={self.layers!r}")
        )

    def layer_kernel(self, x: torch.Tensor, multi: bool = True) -> torch.Tensor:
        """The ``(n, n)`` kernel matrix of one layer with its self-adaptive bandwidth."""
        n = x.shape[0]
        if n:  # distances do not move with a translation: centred, nothing cancels
            x = x - batch_mean(x)
        scale = abs_max(x, torch.finfo(x.dtype).tiny)
        d = pairwise_sq_dists(x / scale)  # the kernel only sees d / tau: scale-free
        # mean over the n (n - 1) off-diagonal pairs (the diagonal is ~0, removed exactly)
        tau = (d.sum() - d.diagonal().sum()) / (n * (n - 1)) if n > 1 else d.new_ones(())
        if self.detach_tau:
            tau = tau.detach()
        tau = tau.clamp_min(torch.finfo(d.dtype).eps)
        mults = self.bandwidths if multi else (1.0,)
        return sum(torch.exp(-d / (b * tau)) for b in mults)

    reductions = ("mean", "sum")

    @staticmethod
    def representations(layers, embeddings, loss=None):
        """JRD's joint representation: ``[*layers, embeddings, class level]``.

        The class level, :math:`x^+`, is ``loss.class_cosines(embeddings)`` when the
        metric loss has proxies (AM-Softmax); it is omitted otherwise.
        """
        reps = [layer.flatten(1) for layer in (layers or [])] + [embeddings]
        if hasattr(loss, "class_cosines"):
            reps.append(loss.class_cosines(embeddings))
        return reps

    def forward(self, representations, labels) -> torch.Tensor:
        if isinstance(representations, torch.Tensor):
            representations = [representations]
        representations = list(representations)
        if not representations:
            raise ValueError("representations must be a non-empty list of (n, d_l) tensors.")
        labels = check_embeddings_labels(representations[0], labels, name="representations[0]")
        for i, rep in enumerate(representations[1:], start=1):
            check_embeddings_labels(rep, labels, name=f"representations[{i}]")
        losses, weights = self.tuple_losses(representations, labels)
        return self.reduce(losses, weights)

    def tuple_losses(self, representations, labels):
        n_layers = len(representations)
        single = set()
        for idx in self.single_kernel_layers:
            if not -n_layers <= idx < n_layers:
                raise ValueError(
                    f"single_kernel_layers index {idx} is out of range for {n_layers} layers."
                )
            single.add(idx % n_layers)
        weights = self.layer_weights
        if weights is not None and len(weights) != n_layers:
            raise ValueError(
                f"layer_weights has {len(weights)} entries for {n_layers} representations."
            )
        _, neg = same_class_masks(labels)
        product = None
        for l, rep in enumerate(representations):
            if weights is not None and weights[l] == 0:
                continue
            k = self.layer_kernel(rep, multi=l not in single)
            if weights is not None and weights[l] != 1:
                k = k ** weights[l]
            product = k if product is None else product * k
        if product is None:
            product = zero_loss(*representations).expand(neg.shape)
        return product, neg
