"""DeML's object-attention module (Eq. 2-3) and the crop-and-zoom between scales.

Everything here is parameter-free and batched: one call handles a whole batch
of maps or images, with no Python loop over images or locations (the only loop
is over the ``n_steps`` steps of the random walk).
"""

from __future__ import annotations

from numbers import Integral

import torch
import torch.nn.functional as F
from sklearn.utils._param_validation import Interval, validate_params

__all__ = ["attention_boxes", "crop_and_zoom", "random_walk_attention", "resize_attention"]


@validate_params({"feature_map": [torch.Tensor], "n_steps": [Interval(Integral, 0, None,
                                                                          closed="left")]},
                 prefer_skip_nested_validation=True)
@torch.no_grad()
def random_walk_attention(feature_map, n_steps=10):
    r"""Object-attention maps by a random walk over the locations of a response map.

    DeML Eq. 2-3. Every spatial location :math:`a = (h, w)` of a map is a node
    of a complete directed graph with edge weights
    :math:`D_{ab} = \lVert u_a - u_b \rVert` (Euclidean distance of the
    C-dimensional features), normalised over each node's out-bound edges
    (rows sum to 1). Mass starts uniform, :math:`M_0 = 1 / (HW)`, and flows
    along the out-bound edges for ``n_steps`` steps,
    :math:`M \leftarrow D^\top M`: a Markov chain whose transition
    probabilities are proportional to feature dissimilarity, so mass collects
    on locations unlike their surroundings.

    Parameters
    ----------
    feature_map : torch.Tensor of shape (B, C, H, W)
        Response maps (any floating dtype; computed in float32, or float64
        for float64 input). Not differentiated: the module is parameter-free.
    n_steps : int, default=10
        Steps of the walk (the paper's :math:`T = 10`).

    Returns
    -------
    attention : torch.Tensor of shape (B, H, W)
        Non-negative maps that each sum to 1.

    Notes
    -----
    *Reading note.* The paper writes the update as :math:`M \leftarrow D M`
    with row-normalised :math:`D`; taken literally, the uniform start is a
    fixed point of that product (every row sums to 1) and nothing is
    attended. We use the Markov-chain reading the paper's remark gives (mass
    received along in-bound edges, eigenvector centrality):
    :math:`M \leftarrow D^\top M`. Because :math:`D` is symmetric before
    normalisation, the chain is reversible and its stationary distribution is
    :math:`\pi_a \propto \sum_b \lVert u_a - u_b \rVert`, which the walk
    approaches. A node whose distances are all 0 (a constant map) gets uniform
    out-bound edges, so a constant map gives the uniform attention.

    Memory is :math:`O(B (HW)^2)` (the transition matrices).

    Examples
    --------
    >>> import torch
    >>> from skdml.deep import random_walk_attention
    >>> u = 0.01 * torch.randn(1, 2, 4, 4, generator=torch.Generator().manual_seed(0))
    >>> u[0, :, 1, 2] += 3.0                     # one location unlike the others
    >>> m = random_walk_attention(u)
    >>> m.shape, round(float(m.sum()), 5), divmod(int(m.flatten().argmax()), 4)
    (torch.Size([1, 4, 4]), 1.0, (1, 2))
    """
    if feature_map.ndim != 4 or not feature_map.is_floating_point():
        raise ValueError(
            "feature_map must be a floating tensor of shape (B, C, H, W), got "
            f"{feature_map.dtype} of shape {tuple(feature_map.shape)}.")
    if not bool(torch.isfinite(feature_map).all()):
        raise ValueError("feature_map holds NaN or infinite values.")
    return _random_walk(feature_map, n_steps)


@torch.no_grad()
def _random_walk(feature_map, n_steps):
    """:func:`random_walk_attention` without the input checks (no host sync: DeML's forward)."""
    B, C, H, W = feature_map.shape
    n = H * W
    dtype = torch.float64 if feature_map.dtype == torch.float64 else torch.float32
    with torch.autocast(device_type=feature_map.device.type, enabled=False):
        u = feature_map.to(dtype).flatten(2).transpose(1, 2)  # (B, n, C)
        u = u - u.mean(dim=1, keepdim=True)  # distances are shift-invariant; less cancellation
        sq = (u * u).sum(-1)
        d2 = (sq[:, :, None] + sq[:, None, :] - 2.0 * (u @ u.transpose(1, 2))).clamp_min(0.0)
        off_diagonal = ~torch.eye(n, dtype=torch.bool, device=u.device)
        dist = torch.where(off_diagonal, d2, 0.0).sqrt()  # Eq. 2, D_aa = 0 exactly
        out_mass = dist.sum(-1, keepdim=True)
        transition = torch.where(out_mass > 0, dist / out_mass.clamp_min(torch.finfo(dtype).tiny),
                                 1.0 / n)
        mass = torch.full((B, 1, n), 1.0 / n, dtype=dtype, device=u.device)
        for _ in range(int(n_steps)):  # row vector: m^T <- m^T P, i.e. M <- P^T M (Eq. 3)
            mass = mass @ transition
        mass = mass / mass.sum(-1, keepdim=True)
    return mass.view(B, H, W)


def resize_attention(attention, size):
    """Bilinear resize of (B, h, w) maps to ``size`` = (H, W), each renormalised to sum 1."""
    out = F.interpolate(attention[:, None], size=tuple(size), mode="bilinear",
                        align_corners=False)[:, 0].clamp_min(0.0)
    total = out.sum(dim=(1, 2), keepdim=True)
    uniform = torch.full_like(out, 1.0 / (out.shape[1] * out.shape[2]))
    return torch.where(total > 0, out / total.clamp_min(torch.finfo(out.dtype).tiny), uniform)


def _first_last(mask):
    """First and last True index along the last axis of a (B, n) mask with a True per row."""
    n = mask.shape[-1]
    idx = torch.arange(n, device=mask.device)
    first = torch.where(mask, idx, n).amin(-1)
    last = torch.where(mask, idx, -1).amax(-1)
    return first, last


def attention_boxes(attention, *, threshold=0.5, min_size=8, within=None, image_size=None):
    """Boxes around the attended regions: (B, 4) ``(y0, x0, y1, x1)`` in [0, 1] image units.

    The attended region of a map is where it reaches ``threshold`` of its
    range above its minimum; the box is the smallest one with the image's
    aspect ratio that holds that region's bounding box and is at least
    ``min_size`` pixels on each side (in the pixels of the original image),
    centred on it and shifted to lie inside the image: it never leaves it.

    Parameters
    ----------
    attention : torch.Tensor of shape (B, H, W)
        Maps over the current scale's input.
    threshold : float, default=0.5
        Fraction of each map's range (max - min) above its minimum that counts
        as attended.
    min_size : int, default=8
        Minimum side of a box, in pixels of the original image.
    within : torch.Tensor of shape (B, 4), default=None
        The current input's box in the original image (``None``: the whole
        image); the result is composed with it (in original-image units).
    image_size : tuple of int, default=None
        (H, W) of the original image (default: the maps' size).

    Returns
    -------
    boxes : torch.Tensor of shape (B, 4)

    Examples
    --------
    >>> import torch
    >>> a = torch.zeros(1, 16, 16)
    >>> a[0, 2:6, 3:7] = 1.0
    >>> attention_boxes(a, min_size=4)
    tensor([[0.1250, 0.1875, 0.3750, 0.4375]])
    """
    B, H, W = attention.shape
    image_h, image_w = (H, W) if image_size is None else image_size
    lo = attention.amin(dim=(1, 2), keepdim=True)
    hi = attention.amax(dim=(1, 2), keepdim=True)
    mask = attention >= lo + threshold * (hi - lo)  # the maximum is always in
    y0, y1 = _first_last(mask.any(dim=2))
    x0, x1 = _first_last(mask.any(dim=1))
    dtype = attention.dtype if attention.is_floating_point() else torch.float32
    box = torch.stack([y0 / H, x0 / W, (y1 + 1) / H, (x1 + 1) / W], dim=1).to(dtype)
    if within is not None:  # from the current input's units to the original image's
        within = within.to(dtype)
        height, width = within[:, 2] - within[:, 0], within[:, 3] - within[:, 1]
        box = within[:, [0, 1, 0, 1]] + box * torch.stack([height, width, height, width], 1)
    centre_y, centre_x = (box[:, 0] + box[:, 2]) / 2, (box[:, 1] + box[:, 3]) / 2
    side = torch.maximum(box[:, 2] - box[:, 0], box[:, 3] - box[:, 1])
    side = side.clamp(min=min(1.0, max(min_size / image_h, min_size / image_w)), max=1.0)
    centre_y = torch.minimum(torch.maximum(centre_y, side / 2), 1 - side / 2)
    centre_x = torch.minimum(torch.maximum(centre_x, side / 2), 1 - side / 2)
    return torch.stack([centre_y - side / 2, centre_x - side / 2, centre_y + side / 2,
                        centre_x + side / 2], dim=1)


def crop_and_zoom(images, boxes, size=None):
    """Crop each image to its box and resize it (bilinear) to ``size`` (default: its own).

    Parameters
    ----------
    images : torch.Tensor of shape (B, C, H, W)
    boxes : torch.Tensor of shape (B, 4)
        ``(y0, x0, y1, x1)`` in [0, 1] image units (see :func:`attention_boxes`).
    size : tuple of int, default=None
        Output (H, W).

    Returns
    -------
    crops : torch.Tensor of shape (B, C, H, W)

    Examples
    --------
    >>> import torch
    >>> x = torch.arange(16.0).view(1, 1, 4, 4)
    >>> crop_and_zoom(x, torch.tensor([[0.5, 0.5, 1.0, 1.0]]), size=(2, 2))[0, 0]
    tensor([[10., 11.],
            [14., 15.]])
    """
    B, C, H, W = images.shape
    out_h, out_w = (H, W) if size is None else size
    boxes = boxes.to(images.dtype)
    theta = images.new_zeros(B, 2, 3)
    # affine_grid maps output coordinates in [-1, 1] to input coordinates in [-1, 1]
    theta[:, 0, 0] = boxes[:, 3] - boxes[:, 1]
    theta[:, 0, 2] = boxes[:, 1] + boxes[:, 3] - 1.0
    theta[:, 1, 1] = boxes[:, 2] - boxes[:, 0]
    theta[:, 1, 2] = boxes[:, 0] + boxes[:, 2] - 1.0
    grid = F.affine_grid(theta, [B, C, out_h, out_w], align_corners=False)
    return F.grid_sample(images, grid, mode="bilinear", padding_mode="border",
                         align_corners=False)
