"""skdml/deep/_hooks.py: the layer capture behind JRS's layers and DeML's attention."""

import torch
from torch import nn

from skdml.deep._hooks import LayerCapture


def test_a_capture_keeps_its_response_when_a_later_op_runs_in_place():
    # a BatchNorm followed by ReLU(inplace=True): the captured BN response was the very
    # tensor the ReLU rewrote, so the two "layers" were one post-activation response
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(inplace=True))
    x = torch.randn(2, 1, 6, 6)
    with LayerCapture(net, ["1", "2"]) as cap:
        net(x)
        bn, relu = cap.representations()
    assert (bn < 0).any() and not (relu < 0).any()
    torch.testing.assert_close(bn, net[1](net[0](x)).flatten(1))
