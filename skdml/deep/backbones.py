"""Default backbones in plain ``torch.nn`` (no torchvision): MLP, small CNN, small ResNet.

Every backbone maps a batch to a feature tensor of shape (n, out_features); the
embedding head of :class:`~skdml.deep.DeepMetricTransformer` is added on top.
Sub-modules carry stable names (``"blocks.0"``, ``"pool"``...) so that they can
be named in ``jrs_layers``.
"""

from __future__ import annotations

import math

from torch import nn

__all__ = ["MLP", "SmallCNN", "SmallResNet", "default_backbone"]


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

    Examples
    --------
    >>> import torch
    >>> net = MLP(10, hidden=(16, 8))
    >>> net.eval()(torch.zeros(3, 10)).shape
    torch.Size([3, 8])
    """

    def __init__(self, in_features, hidden=(256, 256), dropout=0.0):
        super().__init__()
        layers, width = [], int(in_features)
        for h in hidden:
            block = [nn.Linear(width, h), nn.BatchNorm1d(h), nn.ReLU(inplace=True)]
            if dropout:
                block.append(nn.Dropout(dropout))
            layers.append(nn.Sequential(*block))
            width = h
        self.blocks = nn.Sequential(*layers)
        self.out_features = width

    def forward(self, x):
        return self.blocks(x.flatten(1))


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

    Examples
    --------
    >>> import torch
    >>> net = SmallCNN(1, widths=(4, 8))
    >>> net.eval()(torch.zeros(2, 1, 16, 16)).shape
    torch.Size([2, 8])
    """

    def __init__(self, in_channels, widths=(32, 64, 128), global_pool=True):
        super().__init__()
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

    def forward(self, x):
        return self.pool(self.blocks(x)).flatten(1)


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

    def forward(self, x):
        return self.pool(self.stages(self.stem(x))).flatten(1)


def default_backbone(input_shape):
    """The backbone used when ``backbone=None``: an MLP for vectors, a small CNN for images.

    Parameters
    ----------
    input_shape : tuple of int
        Shape of one sample: ``(d,)`` or ``(C, H, W)``.

    Examples
    --------
    >>> type(default_backbone((10,))).__name__, type(default_backbone((1, 16, 16))).__name__
    ('MLP', 'SmallCNN')
    """
    if len(input_shape) == 1:
        d = int(input_shape[0])
        width = int(min(256, max(32, 2 ** math.ceil(math.log2(max(d, 1))))))
        return MLP(d, hidden=(width, width))
    return SmallCNN(int(input_shape[0]))
