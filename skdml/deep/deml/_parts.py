"""DeML's trainable parts: channel-attention modules, learners, adversary; their loss terms.

The J modules of a kind at one scale are stored as stacked parameters (a
leading axis of size J) and applied with one ``einsum``, not a loop over J.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["Adversary", "ChannelAttention", "StackedLinear", "activation_decay",
           "adversarial_discrepancy", "anti_trivial_penalty", "grad_reverse"]


def _uniform_(tensor, fan_in):
    """``nn.Linear``'s default initialisation, U(-1/sqrt(fan_in), 1/sqrt(fan_in))."""
    bound = 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0
    nn.init.uniform_(tensor, -bound, bound)


class StackedLinear(nn.Module):
    """J independent linear layers applied to J inputs at once: (J, B, in) -> (J, B, out).

    ``weight`` has shape (J, out, in) (layer ``j`` is ``weight[j]``, as in
    ``nn.Linear``), ``bias`` (J, out). Each layer is initialised like
    ``nn.Linear``.
    """

    def __init__(self, n_layers, in_features, out_features):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_layers, out_features, in_features))
        self.bias = nn.Parameter(torch.empty(n_layers, out_features))
        _uniform_(self.weight, in_features)
        _uniform_(self.bias, in_features)

    def forward(self, x, *, detach_parameters=False):
        weight, bias = self.weight, self.bias
        if detach_parameters:  # the input still gets its gradient, the layers none
            weight, bias = weight.detach(), bias.detach()
        return torch.einsum("joi,jbi->jbo", weight, x) + bias[:, None, :]

    def extra_repr(self):
        J, out, inp = self.weight.shape
        return f"n_layers={J}, in_features={inp}, out_features={out}"


class ChannelAttention(nn.Module):
    r"""J parallel channel-attention modules (DeML Sec. 3.2), one per CA learner.

    :math:`cap_j = U \square \sigma(W^2_j\, \delta(W^1_j\, \Psi(U)))`: spatial
    average pooling :math:`\Psi`, a fully connected layer to ``hidden`` (64
    in the paper), ReLU, a fully connected layer back to C channels, sigmoid;
    the channels of U are reweighted by the result.

    Parameters
    ----------
    channels : int
        Channels C of the response map U.
    n_cams : int
        J, the number of modules.
    hidden : int, default=64
        Width of the bottleneck.

    Examples
    --------
    >>> import torch
    >>> cam = ChannelAttention(channels=6, n_cams=3)
    >>> cam(torch.randn(2, 6, 5, 5)).shape        # (J, B, C, H, W)
    torch.Size([3, 2, 6, 5, 5])
    """

    def __init__(self, channels, n_cams, hidden=64):
        super().__init__()
        self.squeeze = StackedLinear(n_cams, channels, hidden)
        self.excite = StackedLinear(n_cams, hidden, channels)

    def channel_weights(self, u):
        """The (J, B, C) channel weights in (0, 1) of a (B, C, H, W) map."""
        pooled = u.mean(dim=(2, 3))  # Psi
        J = self.squeeze.weight.shape[0]
        hidden = F.relu(self.squeeze(pooled.expand(J, *pooled.shape)))
        return torch.sigmoid(self.excite(hidden))

    def forward(self, u):
        return u[None] * self.channel_weights(u)[..., None, None]


class _GradientReversal(torch.autograd.Function):
    """Identity forward; the gradient is multiplied by ``-scale`` backward (Ganin et al.)."""

    @staticmethod
    def forward(ctx, x, scale):
        ctx.scale = scale
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return -ctx.scale * grad, None


def grad_reverse(x, scale=1.0):
    """Gradient-reversal layer: ``x`` forward, ``-scale * grad`` backward.

    Examples
    --------
    >>> import torch
    >>> x = torch.ones(2, requires_grad=True)
    >>> (3 * grad_reverse(x)).sum().backward()
    >>> x.grad
    tensor([-3., -3.])
    """
    return _GradientReversal.apply(x, float(scale))


class Adversary(nn.Module):
    """The adversary network F of one scale (DeML Fig. 3c): Linear, ReLU, Linear.

    The paper shows it as a small network after the CA learners without
    giving its layers; this is our reading: two fully connected layers of
    the learners' width with a ReLU between them, shared by the J learners of
    the scale.
    """

    def __init__(self, in_features, hidden=None):
        super().__init__()
        hidden = in_features if hidden is None else int(hidden)
        self.net = nn.Sequential(nn.Linear(in_features, hidden), nn.ReLU(),
                                 nn.Linear(hidden, in_features))

    def forward(self, z):
        return self.net(z)


def adversarial_discrepancy(mapped):
    r"""DeML Eq. 4 without :math:`\lambda_0`, for one scale, averaged over the batch.

    :math:`\sum_{j < j'} \lVert F(CA_j) - F(CA_{j'}) \rVert^2` per sample,
    computed as :math:`J \sum_j \lVert a_j - \bar a \rVert^2` (the same sum,
    without a (J, J) table of differences).

    Parameters
    ----------
    mapped : torch.Tensor of shape (J, B, k)
        The adversary's outputs :math:`a_j = F(CA_j(x))`.

    Returns
    -------
    discrepancy : torch.Tensor, scalar

    Examples
    --------
    >>> import torch
    >>> a = torch.tensor([[[0.0, 0.0]], [[3.0, 4.0]]])   # J=2, B=1: ||a_1 - a_2||^2
    >>> adversarial_discrepancy(a)
    tensor(25.)
    """
    J = mapped.shape[0]
    centred = mapped - mapped.mean(dim=0, keepdim=True)
    return J * centred.pow(2).sum(dim=(0, 2)).mean()


def activation_decay(outputs):
    r"""The activation decay of Eq. 6 without :math:`\lambda_1`: :math:`\frac{1}{2IJN}\sum \lVert CA_{(i,j)}(x_n) \rVert^2`.

    Parameters
    ----------
    outputs : list of torch.Tensor of shape (J, N, k)
        The raw (not normalised) learner outputs of each scale.
    """
    total = sum(z.pow(2).sum() for z in outputs)
    count = sum(z.shape[0] * z.shape[1] for z in outputs)
    return total / (2.0 * max(count, 1))


def anti_trivial_penalty(weights):
    r"""Eq. 6's :math:`L_{ntri}` without :math:`\lambda_2`: :math:`\sum_{ij} \mathrm{tr}[(\omega\omega^\top - I) \odot (\omega\omega^\top - I)]`.

    The trace of a Hadamard product only sees the diagonal, so the term is
    :math:`\sum_{ij} \sum_r (\lVert \omega_r \rVert^2 - 1)^2`: it keeps every
    row of every learner's weight at unit norm (which is what stops
    :math:`L_{act}` from driving the weights to 0), and does not ask for
    orthogonal rows.

    Parameters
    ----------
    weights : list of torch.Tensor of shape (J, k, d1)
        The stacked learner weights of each scale.

    Examples
    --------
    >>> import torch
    >>> anti_trivial_penalty([torch.tensor([[[2.0, 0.0], [0.0, 1.0]]])])  # (4 - 1)^2
    tensor(9.)
    """
    return sum((w.pow(2).sum(dim=-1) - 1.0).pow(2).sum() for w in weights)
