"""The base every skdml loss and regulariser shares: input checks, tuples, one reduction.

A loss here is a :class:`torch.nn.Module` computed in three steps:

1. :meth:`MetricLoss.forward` checks the batch once (2-D floating embeddings,
   one integer label per row) and, when the loss declares
   ``normalize_embeddings = True``, puts the embeddings on the unit sphere;
2. :meth:`MetricLoss.tuple_losses` returns the loss of every tuple the batch
   offers (triplets, pairs, samples, class pairs...) with a weight per tuple
   (0 for "not a tuple", so dense masked forms need no boolean gather);
3. :meth:`MetricLoss.reduce` applies the reduction, one vocabulary for all:

   - ``"mean"``: the weighted mean over the tuples, ``sum(w l) / sum(w)``;
   - ``"sum"``: the weighted sum ``sum(w l)`` (the papers' literal sums);
   - ``"mean_nonzero"``: the weighted sum over the number of tuples with a
     positive loss (pytorch-metric-learning's ``AvgNonZeroReducer``).

A batch without any tuple gives an exact 0 that is still attached to the
graph, so ``backward()`` works and gives zero gradients. A batch holding a NaN
or an infinite embedding gives a NaN loss, whatever the loss (mining or a
mask could otherwise drop the bad row and return a finite value), so the
learners' non-finite guard stops the fit. No reduction reads a value back to
the host: a loss never synchronises with the device.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

__all__ = ["MetricLoss", "REDUCTIONS", "abs_max", "batch_mean", "check_embeddings_labels",
           "pairwise_sq_dists",
           "propagate_non_finite", "same_class_masks", "zero_loss"]

#: The reduction vocabulary of every loss.
REDUCTIONS = ("mean", "sum", "mean_nonzero")


def check_embeddings_labels(embeddings, labels, *, name="embeddings"):
    """Validate a batch and return ``labels`` as an int64 tensor on the embeddings' device.

    Parameters
    ----------
    embeddings : torch.Tensor of shape (n_samples, n_dims)
        Floating point batch.
    labels : torch.Tensor or array-like of shape (n_samples,)
        Integer class labels of any integer dtype.
    name : str, default="embeddings"
        Name used in error messages.

    Returns
    -------
    labels : torch.Tensor of shape (n_samples,), dtype int64

    Examples
    --------
    >>> import torch
    >>> check_embeddings_labels(torch.zeros(2, 3), [1, 0])
    tensor([1, 0])
    """
    if not isinstance(embeddings, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(embeddings).__name__}.")
    if embeddings.ndim != 2:
        raise ValueError(
            f"{name} must be a 2D tensor (n_samples, n_dims), got shape {tuple(embeddings.shape)}."
        )
    if not embeddings.is_floating_point():
        raise ValueError(f"{name} must have a floating dtype, got {embeddings.dtype}.")
    if not isinstance(labels, torch.Tensor) and np.size(labels) == 0:
        labels = np.zeros(0, dtype=np.int64)  # an empty list reads as float: no labels at all
    try:
        labels = torch.as_tensor(labels, device=embeddings.device)
    except (TypeError, ValueError) as exc:  # strings, objects: torch's own words do not say
        raise ValueError(f"labels must be integer class codes (encode strings first, e.g. "
                         f"with sklearn's LabelEncoder); got {exc}") from exc
    if labels.is_floating_point() or labels.is_complex() or labels.dtype == torch.bool:
        raise ValueError(f"labels must have an integer dtype, got {labels.dtype}.")
    if labels.ndim != 1:
        raise ValueError(f"labels must be a 1D tensor, got shape {tuple(labels.shape)}.")
    if labels.shape[0] != embeddings.shape[0]:
        raise ValueError(
            f"{name} and labels have different lengths: "
            f"{embeddings.shape[0]} != {labels.shape[0]}."
        )
    return labels.long()


def propagate_non_finite(value, inputs):
    """``value``, or NaN where ``inputs`` (a tensor or a list of them) hold a NaN or an inf.

    The test stays on the device (no host synchronisation); the gradient of a
    finite batch is unchanged.

    Examples
    --------
    >>> import torch
    >>> propagate_non_finite(torch.tensor(0.5), torch.tensor([[1.0, float("nan")]]))
    tensor(nan)
    >>> propagate_non_finite(torch.tensor(0.5), [torch.ones(2, 2)])
    tensor(0.5000)
    """
    tensors = inputs if isinstance(inputs, (list, tuple)) else [inputs]
    tensors = [t for t in tensors if isinstance(t, torch.Tensor) and t.is_floating_point()]
    if not tensors or not isinstance(value, torch.Tensor):
        return value
    finite = torch.stack([torch.isfinite(t.detach()).all() for t in tensors]).all()
    return torch.where(finite, value, float("nan"))


def zero_loss(*tensors):
    """A scalar zero that is still connected to the graph of ``tensors``."""
    out = None
    for tensor in tensors:
        term = tensor.sum() * 0.0
        out = term if out is None else out + term
    return out


def batch_mean(x):
    """The detached mean of the rows of ``x``, summed as ``x / n``: finite for any finite ``x``
    (``x.mean`` sums first, which overflows from about 1e37 in float32 with 32 rows)."""
    return (x.detach() / x.shape[0]).sum(dim=0)


def pairwise_sq_dists(x, y=None):
    """Squared Euclidean distances ``||x_i - y_j||^2``, clamped at zero.

    Uses the Gram expansion (no ``(n, n, d)`` tensor) and no square root, so the
    gradient is finite everywhere, including at zero distance. The points are
    centred first (on ``x``'s mean, a detached constant: distances and gradients
    are unchanged): the expansion of uncentred float32 points cancels their offset's
    squares (at an offset of 1e4, LMNN read 43.8 for 11.4).
    """
    centre = batch_mean(x) if x.shape[0] else None
    if y is None:
        x = y = x if centre is None else x - centre
    elif centre is not None:
        x, y = x - centre, y - centre
    x_sq = (x * x).sum(dim=1)
    y_sq = x_sq if y is x else (y * y).sum(dim=1)
    d = x_sq[:, None] + y_sq[None, :] - 2.0 * (x @ y.T)
    return d.clamp_min(0.0)


def same_class_masks(labels):
    """Boolean ``(n, n)`` masks of positive pairs (same class, i != j) and negative pairs."""
    same = labels[:, None] == labels[None, :]
    eye = torch.eye(labels.shape[0], dtype=torch.bool, device=labels.device)
    return same & ~eye, ~same


def abs_max(x, floor=0.0):
    """The largest ``|x|`` (detached, at least ``floor``; ``floor`` for an empty tensor)."""
    if x.numel() == 0:
        return x.new_full((), max(floor, 1.0)).detach()
    return x.detach().abs().amax().clamp_min(floor)


def unit_rows(x):
    """Rows scaled to unit L2 norm, robust to huge or tiny norms (no overflow in the norm)."""
    if x.numel() == 0:
        return x
    peak = x.detach().abs().amax(dim=1, keepdim=True)
    # a zero row is divided by 1: it stays 0 with the bounded gradient of x / 1 (a clamp at
    # the smallest normal number gave gradients of 1e38 there, and left subnormal rows short)
    peak = torch.where(peak > 0, peak, torch.ones_like(peak))
    scaled = x / peak  # largest entry of each row is +-1 (or the row is 0)
    return scaled / torch.linalg.vector_norm(scaled, dim=1, keepdim=True).clamp_min(1.0)


_LOW_PRECISION = (torch.float16, torch.bfloat16)


def _low_precision(inputs):
    """The dtype of ``inputs`` (a tensor, or the first of a list) if float16 / bfloat16."""
    first = inputs[0] if isinstance(inputs, (list, tuple)) and inputs else inputs
    dtype = getattr(first, "dtype", None)
    return dtype if dtype in _LOW_PRECISION else None


def _widened(obj):
    """``obj`` with its float16 / bfloat16 tensors (also in lists and tuples) as float32."""
    if isinstance(obj, torch.Tensor):
        return obj.float() if obj.dtype in _LOW_PRECISION else obj
    if isinstance(obj, (list, tuple)):
        return type(obj)(_widened(item) for item in obj)
    return obj


class MetricLoss(nn.Module):
    """Base class of the skdml losses and regularisers.

    Subclasses implement :meth:`tuple_losses` and may set the class attributes
    ``normalize_embeddings`` (the loss is defined on unit-norm embeddings;
    :meth:`forward` normalises them, and learners take a regulariser on the
    same representation) and ``reductions`` (the subset of :data:`REDUCTIONS`
    that makes sense for the loss).

    Parameters
    ----------
    reduction : {"mean", "sum", "mean_nonzero"}, default="mean"
        How the tuple losses are reduced to a scalar (see the module docstring).

    Examples
    --------
    >>> import torch
    >>> class Spread(MetricLoss):
    ...     def tuple_losses(self, embeddings, labels):
    ...         return embeddings.pow(2).sum(dim=1), torch.ones_like(labels, dtype=torch.float)
    >>> Spread()(torch.tensor([[1.0, 0.0], [0.0, 3.0]]), [0, 1])
    tensor(5.)
    >>> Spread(reduction="sum")(torch.tensor([[1.0, 0.0], [0.0, 3.0]]), [0, 1])
    tensor(10.)
    """

    #: The loss is defined on unit-norm embeddings (``forward`` normalises them).
    normalize_embeddings = False
    #: Reductions this loss accepts.
    reductions = REDUCTIONS

    def __init__(self, reduction: str = "mean"):
        super().__init__()
        if reduction not in self.reductions:
            raise ValueError(
                f"reduction must be one of {self.reductions} for {type(self).__name__}, "
                f"got {reduction!r}.")
        self.reduction = reduction

    def prepare(self, embeddings):
        """The representation the loss works on: unit rows if ``normalize_embeddings``."""
        return unit_rows(embeddings) if self.normalize_embeddings else embeddings

    def tuple_losses(self, embeddings, labels):  # pragma: no cover - abstract
        """Return ``(losses, weights)``: per-tuple losses and weights of the same shape."""
        raise NotImplementedError

    def reduce(self, losses, weights):
        """Reduce per-tuple ``losses`` with ``weights`` (0 = not a tuple) to a scalar.

        ``losses`` must be computed from the embeddings (so that the result
        stays on the graph even when no tuple exists: it is then an exact 0).
        """
        weights = weights.to(losses.dtype)
        # where, not a product: an infinite loss on a non-tuple (weight 0) must not give NaN
        total = torch.where(weights != 0, losses * weights, 0.0).sum()
        if self.reduction == "sum":
            return total
        if self.reduction == "mean":
            count = weights.sum()
        else:
            count = ((losses > 0) & (weights > 0)).sum().to(losses.dtype)
        # no tuple: total is an exact 0 and 0 / tiny stays 0 (no host sync)
        return total / count.clamp_min(torch.finfo(losses.dtype).tiny)

    def __call__(self, embeddings, *args, **kwargs):
        """``forward``, then NaN if any embedding is NaN or infinite (every loss alike).

        float16 and bfloat16 inputs are computed in float32 and the value returned in
        their dtype: sums and counts over a batch's tuples (107,520 triplets in 128
        samples) overflow float16's 65,504, which gave 0, NaN or inf.
        """
        low = _low_precision(embeddings)
        if low is not None:
            embeddings, args = _widened(embeddings), _widened(args)
            kwargs = {key: _widened(value) for key, value in kwargs.items()}
        value = propagate_non_finite(super().__call__(embeddings, *args, **kwargs), embeddings)
        return value if low is None else value.to(low)

    def forward(self, embeddings, labels):
        labels = check_embeddings_labels(embeddings, labels)
        if embeddings.shape[0] == 0:
            return zero_loss(embeddings, *self.parameters())
        x = self.prepare(embeddings)
        losses, weights = self.tuple_losses(x, labels)
        return self.reduce(losses, weights)

    def extra_repr(self) -> str:
        return f"reduction={self.reduction!r}"
