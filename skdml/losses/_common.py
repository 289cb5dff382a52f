"""Input checks and small tensor helpers shared by every loss and regulariser."""

from __future__ import annotations

import torch

__all__ = ["check_embeddings_labels", "zero_loss", "pairwise_sq_dists", "same_class_masks"]


def check_embeddings_labels(embeddings, labels, *, name="embeddings"):
    """Validate a batch and return ``labels`` as an int64 tensor on the right device.

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
    """
    if not isinstance(embeddings, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(embeddings).__name__}.")
    if embeddings.ndim != 2:
        raise ValueError(
            f"{name} must be a 2D tensor (n_samples, n_dims), got shape {tuple(embeddings.shape)}."
        )
    if not embeddings.is_floating_point():
        raise ValueError(f"{name} must have a floating dtype, got {embeddings.dtype}.")
    labels = torch.as_tensor(labels, device=embeddings.device)
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


def zero_loss(*tensors):
    """A scalar zero that is still connected to the graph of ``tensors``.

    ``loss.backward()`` then works (and gives zero gradients) on batches where a
    loss has no valid tuple, instead of failing on a constant.
    """
    out = None
    for tensor in tensors:
        term = tensor.sum() * 0.0
        out = term if out is None else out + term
    return out


def pairwise_sq_dists(x, y=None):
    """Squared Euclidean distances ``||x_i - y_j||^2``, clamped at zero.

    Uses the Gram expansion (no ``(n, n, d)`` tensor) and no square root, so the
    gradient is finite everywhere, including at zero distance.
    """
    y = x if y is None else y
    x_sq = (x * x).sum(dim=1)
    y_sq = x_sq if y is x else (y * y).sum(dim=1)
    d = x_sq[:, None] + y_sq[None, :] - 2.0 * (x @ y.T)
    return d.clamp_min(0.0)


def same_class_masks(labels):
    """Boolean ``(n, n)`` masks of positive pairs (same class, i != j) and negative pairs."""
    same = labels[:, None] == labels[None, :]
    eye = torch.eye(labels.shape[0], dtype=torch.bool, device=labels.device)
    return same & ~eye, ~same
