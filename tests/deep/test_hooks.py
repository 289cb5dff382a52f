"""skdml/deep/_hooks.py: the layer capture behind JRS's layers and DeML's attention."""

import torch
from torch import nn

from skdml.deep._hooks import LayerCapture
from skdml.deep._hooks import match_modules


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


# audit 19 (mutation round 4): order_and_tuples
def test_matched_layers_come_in_model_order_whatever_the_patterns_order():
    net = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
    assert match_modules(net, ["2", "0"]) == ["0", "2"]
    assert match_modules(net, ["*", "0"]) == ["0", "1", "2"]  # each once


def test_a_layer_that_returns_a_tuple_is_captured_by_its_first_item():
    class Pair(nn.Module):
        def forward(self, x):
            return x + 1.0, torch.zeros(1)

    net = nn.Sequential(Pair())
    x = torch.ones(5, 4)
    with LayerCapture(net, ["0"]) as capture:
        net(x)
        (rep,) = capture.representations()
    assert torch.equal(rep, x + 1.0)
