"""skdml/deep/backbones.py: a backbone built for other images says so (issue 37)."""

import numpy as np
import pytest
import torch
from sklearn.datasets import load_digits

from skdml import DeepMetricTransformer
from skdml.deep.backbones import SmallResNet


@pytest.fixture(scope="module")
def digits():
    X, y = load_digits(return_X_y=True)
    keep = y < 5
    return (X[keep][:200] / 16.0).astype(np.float32), y[keep][:200]


def test_small_resnet_names_a_channel_mismatch():
    net = SmallResNet(3, widths=(4, 8), blocks_per_stage=1).eval()
    with pytest.raises(ValueError, match=r"SmallResNet\(3\) takes images of 3 channels.*"
                                         r"SmallResNet\(1\)"):
        net(torch.zeros(2, 1, 8, 8))
    assert net(torch.zeros(2, 3, 8, 8)).shape == (2, 8)


def test_small_resnet_mismatch_in_a_fit_is_a_clear_error(digits):
    X, y = digits
    est = DeepMetricTransformer(SmallResNet(3, widths=(4, 8), blocks_per_stage=1),
                                n_components=4, max_iter=1, device="cpu")
    with pytest.raises(ValueError, match="SmallResNet"):
        est.fit(X.reshape(-1, 8, 8), y)
