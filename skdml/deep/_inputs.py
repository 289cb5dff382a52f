"""What happens to an input before the backbone: resizing, standardisation (learned), augmentation.

* :class:`Resize` brings images to the size a backbone asks for (its
  ``input_size`` attribute): the default ConvNet upsamples images smaller than
  16 pixels, a pretrained network may ask for 224x224. It is the first layer of
  the fitted network, and training augments the resized image.
* :class:`Standardize` is the first layer of the fitted network: it holds the
  per-channel (images) or per-feature (vectors) mean and scale learned in
  ``fit`` as buffers, so ``transform``, pickles, checkpoints and a user who
  calls ``module_`` directly all apply the same standardisation, on any
  device. Its statistics are computed in float64, so inputs scaled by 1e-12
  or 1e30 give the same network input as the original data (the fix of the
  "scale collapse").
* :class:`RandomAffine` is the light augmentation of image batches during
  training: a random rotation, scaling and shift per image, in plain torch
  (``affine_grid`` + ``grid_sample``), drawn from torch's generator (seeded
  by the fit's ``random_state``).
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .._utils import evenly_spaced

__all__ = ["RandomAffine", "Resize", "Standardize", "fit_standardize", "own_resize", "resize_for"]

#: Items of a ``Dataset`` read to estimate the standardisation (evenly spaced).
DATASET_SAMPLE = 2048
#: Values converted to float64 at a time when computing statistics of arrays (8 MB).
_CHUNK_VALUES = 2 ** 20
#: Training rows (evenly spaced) whose principal axes give :class:`Standardize`'s projection.
PROJECTION_ROWS = 1024
#: ``fit_standardize(scale="auto")``: features whose largest standard deviation is at most
#: this many times their median one share a unit (one scale for all). Features in different
#: units differ by orders of magnitude (wine: 388x, breast cancer: 7,800x); features of one
#: unit may differ by more than 10x (``make_classification``'s informative features against
#: its noise ones: 14x), and scaling those one by one blows the noise up to the signal's size.
COMMON_UNIT_RATIO = 100.0


class Standardize(nn.Module):
    """``(x - mean) / scale`` with fixed (buffer) statistics, then an optional fixed projection.

    Parameters
    ----------
    mean, scale : array-like
        Statistics of the shape of one sample with singleton spatial axes:
        ``(d,)`` for vectors, ``(C, 1, 1)`` for images.
    components : array-like of shape (d, m), default=None
        Vectors only: the standardised input is multiplied by this matrix
        (orthonormal columns, the leading principal axes of the standardised
        training inputs; see :func:`fit_standardize`), so the network sees
        ``m`` coordinates instead of ``d``.

    Examples
    --------
    >>> import torch
    >>> layer = Standardize([1.0, 2.0], [2.0, 4.0])
    >>> layer(torch.tensor([[3.0, 6.0]]))
    tensor([[1., 1.]])
    >>> Standardize([1.0, 2.0], [2.0, 4.0], components=[[1.0], [0.0]])(torch.tensor([[3.0, 6.0]]))
    tensor([[1.]])
    """

    def __init__(self, mean, scale, components=None):
        super().__init__()
        self.register_buffer("mean", torch.as_tensor(np.asarray(mean), dtype=torch.float32)[None])
        self.register_buffer("scale", torch.as_tensor(np.asarray(scale), dtype=torch.float32)[None])
        self.register_buffer("components", None if components is None else
                             torch.as_tensor(np.asarray(components), dtype=torch.float32))

    def __setstate__(self, state):  # pickles from before ``components`` existed
        super().__setstate__(state)
        self._buffers.setdefault("components", None)

    @property
    def out_features(self):
        """Width of the output for vectors (``None``: the input's own)."""
        return None if self.components is None else int(self.components.shape[1])

    def forward(self, x):
        x = (x - self.mean) / self.scale
        return x if self.components is None else x @ self.components


class Resize(nn.Module):
    """Bilinear resizing of image batches ``(n, C, H, W)`` to ``size``; a no-op at that size.

    Bilinear interpolation mixes neighbouring pixels with weights that sum to
    one, so it commutes with the per-channel :class:`Standardize` that follows
    it. A batch already at ``size`` (e.g. one resized before augmentation)
    passes through unchanged.

    Parameters
    ----------
    size : tuple of int
        ``(H, W)`` of the output.

    Examples
    --------
    >>> import torch
    >>> Resize((32, 32))(torch.zeros(2, 1, 8, 8)).shape
    torch.Size([2, 1, 32, 32])
    """

    def __init__(self, size):
        super().__init__()
        self.size = tuple(int(s) for s in size)
        if len(self.size) != 2 or min(self.size) < 1:
            raise ValueError(f"input_size must be (H, W) with positive sides, got {size!r}.")

    def extra_repr(self):
        return f"size={self.size}"

    def forward(self, x):
        if x.ndim != 4 or tuple(x.shape[-2:]) == self.size:
            return x
        return F.interpolate(x, size=self.size, mode="bilinear", align_corners=False)


def own_resize(input_size):
    """``(input_size, layer)`` for a backbone that resizes its own input (standalone use).

    ``(None, nn.Identity())`` when ``input_size`` is ``None``; else the size as a
    tuple of ints and its :class:`Resize`.
    """
    if input_size is None:
        return None, nn.Identity()
    layer = Resize(input_size)
    return layer.size, layer


def resize_for(backbone, input_shape):
    """The :class:`Resize` layer a backbone asks for, or ``None``.

    A backbone with an ``input_size`` attribute ``(H, W)`` (the default
    :class:`~skdml.deep.ConvNet` for small images,
    :class:`~skdml.deep.FeatureExtractor` when given one) gets its images
    resized to it, unless they already have that size. Vectors never are.
    """
    size = getattr(backbone, "input_size", None)
    if size is None or len(input_shape) != 3:
        return None
    layer = Resize(size)
    return None if layer.size == tuple(input_shape[1:]) else layer


def _moments(source, indices, input_shape):
    """Float64 mean and standard deviation of each channel / feature, two chunked passes."""
    axes = (0,) if len(input_shape) == 1 else (0, 2, 3)
    unchecked = not isinstance(source, torch.Tensor)  # arrays were checked finite already
    if unchecked:
        from ._data import first_items

        picked = evenly_spaced(indices, DATASET_SAMPLE)
        source, indices = first_items(_Subset(source, picked), len(picked)), np.arange(
            len(picked))

    rows = max(1, _CHUNK_VALUES // max(1, int(np.prod(input_shape))))

    def chunks():  # small chunks: the float64 copy stays in the allocator's cache
        for i in range(0, len(indices), rows):
            x = source[indices[i:i + rows]].detach().cpu().double()
            yield x.unsqueeze(1) if x.ndim == len(input_shape) else x  # grey (n, H, W)

    total, count = 0.0, 0
    for x in chunks():
        if unchecked and not bool(torch.isfinite(x.float()).all()):  # the network's float32
            raise ValueError("Input X contains NaN or infinity, or a value too large for "
                             "float32 (an item of the training data); every input value must "
                             "be finite in float32.")
        total = total + x.sum(dim=axes)
        count += x.numel() // (x.shape[1] if x.ndim > 1 else 1)
    mean = total / count
    var = sum(((x - _expand(mean, x.ndim)) ** 2).sum(dim=axes) for x in chunks()) / count
    return mean, var.sqrt()


def _expand(stat, ndim):
    return stat[None] if ndim == 2 else stat[None, :, None, None]


class _Subset:
    def __init__(self, dataset, indices):
        self.dataset, self.indices = dataset, indices

    def __len__(self):
        return len(self.indices)

    def __getitem__(self, i):
        return self.dataset[int(self.indices[i])]


def fit_standardize(source, indices, input_shape, *, scale="feature", n_axes=None):
    """A :class:`Standardize` layer learned from ``source[indices]`` (a tensor) or a Dataset.

    Images get one mean and scale per channel; vectors one per feature (as
    scikit-learn's ``StandardScaler``). A feature (or channel) that is
    constant in the training data (up to float32 rounding) is centred and
    divided by the largest scale; data whose every feature is constant are
    refused.
    ``Dataset`` statistics are estimated on at most 2048 evenly spaced items
    of ``indices``.

    Parameters
    ----------
    source : torch.Tensor or Dataset
        The inputs.
    indices : array-like of int
        The training rows of ``source``.
    input_shape : tuple of int
        Shape of one model input: ``(d,)`` or ``(C, H, W)``.
    scale : {"feature", "auto"}, default="feature"
        ``"auto"`` (vectors): one scale for every feature (the root mean
        square of their standard deviations, as the linear learners' working
        space) when the features share a unit, i.e. the largest standard
        deviation is at most :data:`COMMON_UNIT_RATIO` (100) times the median
        one (pixels, features already normalised, informative and noise
        features of one unit), so that the input's own geometry is kept; one
        per feature otherwise (features in different units, as most tabular
        data).
    n_axes : int, default=None
        Vectors in a tensor only: also turn the scaled vectors to their
        leading ``n_axes`` principal axes (:class:`Standardize`'s
        ``components``; all of them, a rotation, when ``d <= n_axes``),
        estimated on at most 1024 evenly spaced training rows (no more
        axes than rows). The first coordinates then carry the most variance
        and the network's cost no longer grows with ``d``.

    Returns
    -------
    layer : Standardize

    Raises
    ------
    ValueError
        When every feature (channel) of the training data is constant, e.g.
        when the input underflowed to zero in float32.
    """
    mean, std = _moments(source, np.asarray(indices), input_shape)
    top = float(std.max())
    if not np.isfinite(top) or not bool(torch.isfinite(mean).all()):  # finite items (above)
        raise ValueError("The training inputs are too large to standardise (their variance "
                         "overflows float64); rescale X.")
    if top == 0.0:
        raise ValueError(
            "Every feature of the training inputs is constant after conversion to float32 "
            "(values below about 1e-45 become 0, and a variation below float32's resolution "
            "of a large offset is lost), so nothing can be learned from them. Check the data, "
            "subtract the offset, or rescale X.")
    # a feature constant up to float32 rounding is centred and divided by the largest scale,
    # so that its rounding noise is not blown up to unit size. Rounding noise: float64
    # values on either side of a float32 rounding boundary, a spread of at most one unit in
    # the last place (2**-23 of the value), so a standard deviation below 2 of them; 1e-6
    # of the value (17 of them) also caught real features (1e6 + N(0, 0.4): 20-50 float32
    # values), whose information was then divided by another feature's scale
    constant = std <= 2.0 ** -22 * mean.abs()
    varying = std[~(constant | (std == 0))]
    if varying.numel() == 0:
        raise ValueError(
            "Every feature of the training inputs is constant up to float32 rounding (their "
            "spread is below 2 units in the last place of their values, e.g. a large offset "
            "with a tiny variation), so nothing can be learned from them. Subtract the "
            "offset, or rescale X.")
    if scale == "auto" and len(input_shape) == 1 and \
            float(varying.max()) <= COMMON_UNIT_RATIO * float(varying.quantile(0.5)):
        std = torch.full_like(std, float(varying.pow(2).sum().div(std.numel()).sqrt()))
    else:
        std = torch.where(constant | (std == 0), torch.full_like(std, top), std)
    shape = (-1,) if len(input_shape) == 1 else (-1, 1, 1)
    layer = Standardize(mean.reshape(shape).numpy(), std.reshape(shape).numpy())
    if n_axes is not None and len(input_shape) == 1 and isinstance(source, torch.Tensor):
        layer.components = _principal_axes(layer, source, np.asarray(indices), n_axes)
    return layer


def _principal_axes(layer, source, indices, n_axes):
    """``(d, m)`` leading principal axes of the standardised ``source[indices]`` (float32).

    From the eigenvectors of the smaller of the two Gram matrices, in float64 (an
    eigendecomposition of at most :data:`PROJECTION_ROWS` squared); axes of a zero
    variance are dropped, so ``m <= min(n_axes, d, rows - 1)``.
    """
    picked = evenly_spaced(indices, PROJECTION_ROWS)
    x = layer(source[picked].detach().cpu().float()).double()
    x = x - x.mean(dim=0, keepdim=True)
    wide = x.shape[1] > x.shape[0]
    from .._utils import thread_limits
    with thread_limits(1):  # a threaded LAPACK eigh waited 10-30 s on a loaded 2-core machine
        values, vectors = torch.linalg.eigh(x @ x.T if wide else x.T @ x)
    values, vectors = values.flip(0), vectors.flip(1)  # decreasing variance
    m = int(min(n_axes, x.shape[1], max(1, x.shape[0] - 1),
                max(1, int((values > 1e-10 * values[0].clamp_min(1e-300)).sum()))))
    if wide:  # right singular vectors from the left ones
        axes = x.T @ vectors[:, :m] / values[:m].sqrt()
    else:
        axes = vectors[:, :m]
    return axes.float().contiguous()


class RandomAffine:
    """Random rotation, scaling and shift of each image of a batch (training only).

    Parameters
    ----------
    degrees : float, default=10.0
        Rotations drawn uniformly in ``[-degrees, degrees]``.
    translate : float, default=0.1
        Shifts drawn uniformly in ``[-translate, translate]`` of the image
        size, along each axis.
    scale : float, default=0.1
        Zoom factors drawn uniformly in ``[1 - scale, 1 + scale]``.

    Notes
    -----
    Pixels brought in from outside the image repeat its border
    (``padding_mode="border"``), which is the background for digits,
    characters and objects on a plain ground. The rotation is drawn in the
    sampling grid's coordinates, which span ``[-1, 1]`` on both axes: on a
    non-square image it also stretches along one axis, by up to the aspect
    ratio's deviation times ``sin(degrees)`` (about 4 % for AT&T's 112 x 92
    faces at 10 degrees). The transform is drawn with
    torch's generator on the batch's device and costs one ``grid_sample``.

    Examples
    --------
    >>> import torch
    >>> augment = RandomAffine(degrees=0, translate=0, scale=0)
    >>> x = torch.rand(2, 1, 8, 8)
    >>> torch.allclose(augment(x), x, atol=1e-5)
    True
    """

    def __init__(self, degrees=10.0, translate=0.1, scale=0.1):
        self.degrees, self.translate, self.scale = float(degrees), float(translate), float(scale)

    def __repr__(self):
        return (f"RandomAffine(degrees={self.degrees}, translate={self.translate}, "
                f"scale={self.scale})")

    def __call__(self, x):
        if x.ndim != 4:
            return x
        n = x.shape[0]

        def uniform(*shape):
            return torch.rand(*shape, device=x.device, dtype=x.dtype) * 2 - 1

        angle = uniform(n) * (self.degrees * math.pi / 180)
        zoom = 1 + uniform(n) * self.scale
        shift = uniform(n, 2) * (2 * self.translate)  # grid coordinates span [-1, 1]
        cos, sin = torch.cos(angle) / zoom, torch.sin(angle) / zoom
        theta = torch.stack([torch.stack([cos, -sin, shift[:, 0]], 1),
                             torch.stack([sin, cos, shift[:, 1]], 1)], 1)
        grid = F.affine_grid(theta, list(x.shape), align_corners=False)
        return F.grid_sample(x, grid, mode="bilinear", padding_mode="border",
                             align_corners=False)
