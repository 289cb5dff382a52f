"""Backbones in plain ``torch.nn`` (no torchvision): MLP, ConvNet, small CNN, small ResNet.

Every backbone maps a batch to a feature tensor of shape (n, out_features); the
embedding head of :class:`~skdml.deep.DeepMetricTransformer` is added on top.
Sub-modules carry stable names (``"blocks.0"``, ``"pool"``...) so that they can
be named in ``JRSRegularizer(layers=...)`` and in ``optimizer_params["param_groups"]``.
:class:`FeatureExtractor` wraps a network the user already has (a pretrained torchvision or timm model, for
example) with its own input normalisation and a feature layer chosen by name.
"""

from __future__ import annotations

import math
from numbers import Integral, Real

import torch
from torch import nn

from .._utils._params import StrictInterval, check_params, positive_int
from ._inputs import own_resize

__all__ = ["ConvNet", "FeatureExtractor", "MLP", "SmallCNN", "SmallResNet",
           "default_backbone"]


def _check_widths(owner, name, widths):
    """``widths`` as a non-empty tuple of ints >= 1 (a ``ValueError`` naming ``owner`` else)."""
    try:
        widths = tuple(widths)
    except TypeError:
        raise ValueError(f"{owner}: {name} must be a tuple of ints >= 1; got {widths!r}.") \
            from None
    if not widths:
        raise ValueError(f"{owner}: {name} must hold at least one width; got ().")
    for w in widths:
        check_params(owner, {name: [positive_int()]}, {name: w})
    return tuple(int(w) for w in widths)


def _image_size(owner, name, size):
    """``(H, W)`` from an int (a square) or a pair of ints >= 1."""
    if isinstance(size, Integral) and not isinstance(size, bool):
        size = (size, size)
    try:
        size = tuple(size)
    except TypeError:
        size = None
    if size is None or len(size) != 2 or not all(
            positive_int().is_satisfied_by(s) for s in size):
        raise ValueError(f"{owner}: {name} must be (H, W), two ints >= 1 (or one int for a "
                         f"square image); got {size!r}.")
    return tuple(int(s) for s in size)


def _channels_last(x):
    """An image batch (n, C, H, W) in channels-last memory format (same values, NHWC layout).

    :class:`ConvNet` and :class:`SmallCNN` keep their weights and activations in
    this layout: oneDNN (CPU) and cuDNN then use their NHWC kernels, which made
    a training step of the ConvNet 1.3-1.5x faster on CPU at 8x8 to 64x64
    inputs (``python benchmarks/bench_deep.py --memory-format``).
    :class:`SmallResNet` stays in NCHW: with torch 2.13's CPU build and one
    thread, the backward pass of a 1x1 stride-2 convolution with 2 to 6 input
    channels in NHWC corrupted the heap (its shortcut convolutions are such
    layers at small widths). On CUDA, ``DeepMetricTransformer`` puts every
    network's weights in channels-last (``skdml.deep._network.place``), SmallResNet
    included. Any other tensor is returned as it is.
    """
    return x.contiguous(memory_format=torch.channels_last) if x.ndim == 4 else x


class MLP(nn.Module):
    """A fully connected network for vector inputs: (Linear, BatchNorm, ReLU) blocks.

    Parameters
    ----------
    in_features : int
        Input dimension.
    hidden : tuple of int, default=(256, 256)
        Width of each hidden block. ``out_features`` is the last width.
    dropout : float, default=0.0
        Dropout after each block.
    skip : bool, default=False
        Return the input beside the last block's output (concatenated), so that
        the embedding head starts from a random projection of the input itself
        and learns what the blocks add. ``out_features`` is then
        ``in_features + hidden[-1]``. The default vector backbone uses it: with
        few training classes a plain MLP discards what tells unseen classes
        apart (sklearn's digits, 5 training classes: unseen-class Recall@1 0.82
        plain, 0.89 with the skip; see the deep learner's user guide).

    Examples
    --------
    >>> import torch
    >>> net = MLP(10, hidden=(16, 8))
    >>> net.eval()(torch.zeros(3, 10)).shape
    torch.Size([3, 8])
    >>> MLP(10, hidden=(16, 8), skip=True).eval()(torch.zeros(3, 10)).shape
    torch.Size([3, 18])
    """

    def __init__(self, in_features, hidden=(256, 256), dropout=0.0, skip=False):
        super().__init__()
        check_params("MLP", {"in_features": [positive_int()],
                             "dropout": [StrictInterval(Real, 0, 1, closed="left")]},
                     {"in_features": in_features, "dropout": dropout})
        hidden = _check_widths("MLP", "hidden", hidden)
        layers, width = [], int(in_features)
        for h in hidden:
            block = [nn.Linear(width, h), nn.BatchNorm1d(h), nn.ReLU(inplace=True)]
            if dropout:
                block.append(nn.Dropout(dropout))
            layers.append(nn.Sequential(*block))
            width = h
        self.blocks = nn.Sequential(*layers)
        self.skip = bool(skip)
        self.in_features = int(in_features)
        self.out_features = width + (int(in_features) if self.skip else 0)

    def forward(self, x):
        x = x.flatten(1)
        out = self.blocks(x)
        return torch.cat([x, out], dim=1) if self.skip else out


class ConvNet(nn.Module):
    """The 4-block ConvNet of few-shot and metric learning on characters and digits.

    Each block is conv 3x3 (``width`` channels) - BatchNorm - ReLU - max-pool
    2x2 (Vinyals et al., 2016; Snell et al., 2017); the last feature map is
    flattened (64 features for 28x28 inputs). A block whose input is already
    1 pixel wide skips its pooling, so any image of at least 1x1 works (8x8
    digits: 8, 4, 2, 1, 1). Weights and activations are kept in channels-last
    memory format (same values; a faster training step on CPU, see
    ``_channels_last``).

    Parameters
    ----------
    in_channels : int
        Channels of the input images (n, C, H, W).
    image_size : int or tuple of int
        ``(H, W)`` of the inputs (decides where pooling stops); an int ``n``
        means ``(n, n)``.
    width : int, default=64
        Channels of every block.
    n_blocks : int, default=4
        Number of blocks.
    input_size : tuple of int, default=None
        Resize (bilinear) every input to this ``(H, W)`` first, and size the
        blocks for it. The attribute of the same name tells
        :class:`~skdml.DeepMetricTransformer` to resize images before it
        augments them (:class:`~skdml.deep.Resize`, the first layer of the
        fitted network). :func:`default_backbone` sets it for images smaller
        than 16 pixels.

    Notes
    -----
    The layers run conv - BatchNorm - max-pool - ReLU: a ReLU commutes with a
    max-pool (both are monotone), so this is the same function as the
    published order, with the same gradients, and the ReLU runs on a quarter
    of the pixels (a training step 3-11 % faster on CPU; the deep learner's
    :doc:`benchmark report </reports/deep>`).
    Saved weights are interchangeable with the published order: only
    parameter-free layers moved.

    Examples
    --------
    >>> import torch
    >>> net = ConvNet(1, (28, 28))
    >>> net.eval()(torch.zeros(2, 1, 28, 28)).shape
    torch.Size([2, 64])
    >>> ConvNet(1, (8, 8)).eval()(torch.zeros(2, 1, 8, 8)).shape
    torch.Size([2, 64])
    >>> ConvNet(1, (8, 8), input_size=(32, 32)).eval()(torch.zeros(2, 1, 8, 8)).shape
    torch.Size([2, 256])
    """

    def __init__(self, in_channels, image_size, width=64, n_blocks=4, input_size=None):
        super().__init__()
        check_params("ConvNet", {"in_channels": [positive_int()], "width": [positive_int()],
                                 "n_blocks": [positive_int()]},
                     {"in_channels": in_channels, "width": width, "n_blocks": n_blocks})
        image_size = _image_size("ConvNet", "image_size", image_size)
        if input_size is not None:
            input_size = _image_size("ConvNet", "input_size", input_size)
        self.input_size, self.resize = own_resize(input_size)
        h, w = image_size if input_size is None else input_size
        blocks, c = [], int(in_channels)
        for _ in range(int(n_blocks)):
            block = [nn.Conv2d(c, width, 3, padding=1), nn.BatchNorm2d(width)]
            if min(h, w) >= 2:  # pool, then ReLU: the same function, see the Notes
                block.append(nn.MaxPool2d(2))
                h, w = h // 2, w // 2
            block.append(nn.ReLU(inplace=True))
            blocks.append(nn.Sequential(*block))
            c = width
        self.blocks = nn.Sequential(*blocks)
        self.out_features = c * h * w
        self.to(memory_format=torch.channels_last)  # see _channels_last()

    def forward(self, x):
        return self.blocks(_channels_last(self.resize(x))).flatten(1)


def _conv_block(c_in, c_out):
    return nn.Sequential(nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out),
                         nn.ReLU(inplace=True))


class SmallCNN(nn.Module):
    """A small VGG-style CNN for images: (conv-BN-ReLU, max-pool) stages, global pooling.

    Parameters
    ----------
    in_channels : int
        Channels of the input images (n, C, H, W).
    widths : tuple of int, default=(32, 64, 128)
        Channels of each stage; every stage but the last halves the resolution.
    global_pool : bool, default=True
        Average the last feature map over space (translation invariant, size
        ``widths[-1]``); ``False`` flattens it instead (keeps the layout, which
        helps on small aligned images such as digits; size depends on H, W).

    Notes
    -----
    Weights and activations are kept in channels-last memory format, as in
    :class:`ConvNet`.

    Examples
    --------
    >>> import torch
    >>> net = SmallCNN(1, widths=(4, 8))
    >>> net.eval()(torch.zeros(2, 1, 16, 16)).shape
    torch.Size([2, 8])
    """

    def __init__(self, in_channels, widths=(32, 64, 128), global_pool=True):
        super().__init__()
        check_params("SmallCNN", {"in_channels": [positive_int()]}, {"in_channels": in_channels})
        widths = _check_widths("SmallCNN", "widths", widths)
        stages, c = [], int(in_channels)
        for i, w in enumerate(widths):
            stage = [_conv_block(c, w)]
            if i < len(widths) - 1:
                stage.append(nn.MaxPool2d(2, ceil_mode=True))
            stages.append(nn.Sequential(*stage))
            c = w
        self.blocks = nn.Sequential(*stages)
        self.pool = nn.AdaptiveAvgPool2d(1) if global_pool else nn.Identity()
        self.out_features = c if global_pool else None  # None: found by a dry forward pass
        self.to(memory_format=torch.channels_last)  # see _channels_last()

    def forward(self, x):
        return self.pool(self.blocks(_channels_last(x))).flatten(1)


class BasicBlock(nn.Module):
    """The two-convolution residual block of ResNet-18/34."""

    def __init__(self, c_in, c_out, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.relu = nn.ReLU(inplace=True)
        self.shortcut = nn.Identity()
        if stride != 1 or c_in != c_out:
            self.shortcut = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride=stride, bias=False),
                                          nn.BatchNorm2d(c_out))

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + self.shortcut(x))


class SmallResNet(nn.Module):
    """A ResNet-style network (stem, stages of :class:`BasicBlock`, global pooling).

    Parameters
    ----------
    in_channels : int
        Channels of the input images.
    widths : tuple of int, default=(64, 128, 256, 512)
        Channels of each stage; every stage after the first halves the resolution.
    blocks_per_stage : int, default=2
        Residual blocks per stage (2 with the default widths is ResNet-18's body).

    Examples
    --------
    >>> import torch
    >>> net = SmallResNet(3, widths=(4, 8), blocks_per_stage=1)
    >>> net.eval()(torch.zeros(2, 3, 16, 16)).shape
    torch.Size([2, 8])
    """

    def __init__(self, in_channels, widths=(64, 128, 256, 512), blocks_per_stage=2):
        super().__init__()
        check_params("SmallResNet", {"in_channels": [positive_int()],
                                     "blocks_per_stage": [positive_int()]},
                     {"in_channels": in_channels, "blocks_per_stage": blocks_per_stage})
        widths = _check_widths("SmallResNet", "widths", widths)
        self.in_channels = int(in_channels)
        self.stem = nn.Sequential(nn.Conv2d(in_channels, widths[0], 3, padding=1, bias=False),
                                  nn.BatchNorm2d(widths[0]), nn.ReLU(inplace=True))
        stages, c = [], widths[0]
        for i, w in enumerate(widths):
            blocks = [BasicBlock(c, w, stride=1 if i == 0 else 2)]
            blocks += [BasicBlock(w, w) for _ in range(blocks_per_stage - 1)]
            stages.append(nn.Sequential(*blocks))
            c = w
        self.stages = nn.Sequential(*stages)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.out_features = c
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x):  # kept in NCHW: see _channels_last()
        if x.dim() != 4 or x.shape[1] != self.in_channels:
            channels = x.shape[1] if x.dim() == 4 else 1
            raise ValueError(
                f"SmallResNet({self.in_channels}) takes images of {self.in_channels} channels, "
                f"(n, {self.in_channels}, H, W); it got a batch of shape {tuple(x.shape)}. "
                f"Build it for these images: SmallResNet({channels}).")
        return self.pool(self.stages(self.stem(x))).flatten(1)


class _Stop(Exception):
    """Raised by the feature hook to skip the layers after the feature layer."""


class FeatureExtractor(nn.Module):
    """Use any network (e.g. a pretrained one) as a backbone.

    Adds the network's own input normalisation in front of it and takes the
    features from a layer chosen by name; the layers after it are not run.
    Freeze or fine-tune parts of it through ``optimizer_params["param_groups"]`` of
    :class:`~skdml.deep.DeepMetricTransformer`, whose parameter names are
    ``backbone.module.<name in the wrapped network>``.

    Parameters
    ----------
    module : torch.nn.Module
        The network, e.g. ``torchvision.models.resnet18(weights=...)``.
    layer : str, default=None
        Name (as in ``module.named_modules()``) of the sub-module whose output
        is the feature; ``None`` uses the output of ``module``.
    mean, std : sequence of float, default=None
        Per-channel input normalisation the network was trained with (for
        torchvision's ImageNet models ``(0.485, 0.456, 0.406)`` and
        ``(0.229, 0.224, 0.225)``, on inputs in [0, 1]). With it, the
        estimator's ``standardize="auto"`` leaves the input alone.
    pool : bool, default=True
        Average a 4-D feature map ``(n, C, H, W)`` over space to ``(n, C)``;
        ``False`` returns the map as it is (the estimator then flattens it to
        ``(n, C * H * W)``).
    input_size : tuple of int, default=None
        ``(H, W)`` the network was trained at (e.g. ``(224, 224)``): images are
        resized to it (bilinear) before the normalisation;
        :class:`~skdml.DeepMetricTransformer` then resizes before it augments.

    Attributes
    ----------
    normalizes_input : bool
        Whether the wrapper normalises its input (``mean`` given).

    Examples
    --------
    >>> import torch
    >>> from torch import nn
    >>> net = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 6 * 6, 10))
    >>> features = FeatureExtractor(net, layer="1", mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25))
    >>> features(torch.rand(2, 3, 8, 8)).shape
    torch.Size([2, 8])
    """

    def __init__(self, module, layer=None, mean=None, std=None, pool=True, input_size=None):
        super().__init__()
        self.input_size, self.resize = own_resize(input_size)
        if not isinstance(module, nn.Module):
            raise TypeError(f"module must be a torch.nn.Module, got {type(module).__name__}.")
        names = dict(module.named_modules())
        if layer is not None and layer not in names:
            available = [n for n in names if n]
            raise ValueError(f"layer={layer!r} is not a sub-module of the network; available: "
                             f"{available[:30]}{' ...' if len(available) > 30 else ''}")
        if (mean is None) != (std is None):
            raise ValueError("Give both mean and std (the input normalisation), or neither.")
        self.module, self.layer, self.pool = module, layer, bool(pool)
        self.normalizes_input = mean is not None
        if self.normalizes_input:
            mean_t = torch.as_tensor(mean, dtype=torch.float32).reshape(1, -1, 1, 1)
            std_t = torch.as_tensor(std, dtype=torch.float32).reshape(1, -1, 1, 1)
            if not bool((std_t > 0).all()):
                raise ValueError("std must be positive.")
            self.register_buffer("mean", mean_t)
            self.register_buffer("std", std_t)

    def extra_repr(self):
        return f"layer={self.layer!r}, normalizes_input={self.normalizes_input}, pool={self.pool}"

    def forward(self, x):
        x = self.resize(x)
        if self.normalizes_input:
            x = (x - self.mean) / self.std
        if self.layer is None:
            out = self.module(x)
        else:
            captured = []

            def hook(_module, _inputs, output):
                captured.append(output[0] if isinstance(output, (tuple, list)) else output)
                raise _Stop

            handle = self.module.get_submodule(self.layer).register_forward_hook(hook)
            try:
                self.module(x)
            except _Stop:
                pass
            finally:
                handle.remove()
            if not captured:
                raise RuntimeError(f"The layer {self.layer!r} did not run in the forward pass.")
            out = captured[0]
        if isinstance(out, torch.Tensor) and out.ndim == 4 and self.pool:
            return out.mean(dim=(2, 3))
        return out


#: :func:`default_backbone`: images whose shorter side is below this are upsampled ...
SMALL_IMAGE = 16
#: ... so that their shorter side becomes this.
UPSAMPLED_SIDE = 32


def default_backbone(input_shape):
    """The backbone used when ``backbone=None``: an MLP for vectors, the 4-block ConvNet for images.

    The MLP has two blocks of width ``clip(2**ceil(log2 d), 32, 256)`` and a
    skip connection (``skip=True``): the head sees the input beside the blocks'
    output. Images whose shorter side is below 16 pixels, where the ConvNet's
    four poolings would end on a 1-pixel map, are upsampled so that it is 32
    (``input_size``; 8x8 digits become 32x32 and end on a 2x2 map): on
    scikit-learn's digits this is what lets the ConvNet beat raw pixels on
    unseen digits (see the deep learner's user guide).

    Parameters
    ----------
    input_shape : tuple of int
        Shape of one sample: ``(d,)`` or ``(C, H, W)``.

    Examples
    --------
    >>> type(default_backbone((10,))).__name__, type(default_backbone((1, 16, 16))).__name__
    ('MLP', 'ConvNet')
    >>> default_backbone((1, 8, 8)).input_size, default_backbone((1, 16, 16)).input_size
    ((32, 32), None)
    """
    if len(input_shape) == 1:
        d = int(input_shape[0])
        width = int(min(256, max(32, 2 ** math.ceil(math.log2(max(d, 1))))))
        return MLP(d, hidden=(width, width), skip=True)
    return ConvNet(int(input_shape[0]), input_shape[1:],
                   input_size=upsampled_size(input_shape[1:]))


def upsampled_size(image_size):
    """The ``input_size`` of the default ConvNet for images of ``(H, W)``, or ``None``.

    Examples
    --------
    >>> upsampled_size((8, 8)), upsampled_size((8, 12)), upsampled_size((16, 16))
    ((32, 32), (32, 48), None)
    """
    h, w = (int(s) for s in image_size)
    if min(h, w) >= SMALL_IMAGE:
        return None
    factor = UPSAMPLED_SIDE / min(h, w)
    return (int(round(h * factor)), int(round(w * factor)))
