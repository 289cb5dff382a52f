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


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_a_backbone_returning_sixteen_bit_features_trains(dtype):
    # float64 features were cast for the float32 head, 16-bit ones crashed in its matmul
    class Half(torch.nn.Module):
        def __init__(self, shape):
            super().__init__()
            self.layer = torch.nn.Linear(shape[0], 8)

        def forward(self, x):
            return self.layer(x).to(dtype)

    rng = np.random.RandomState(0)
    y = np.repeat(np.arange(4), 10)
    X = (rng.randn(40, 6) + y[:, None]).astype(np.float32)
    Z = DeepMetricTransformer(lambda shape: Half(shape), n_components=3, max_iter=1,
                              device="cpu", random_state=0).fit(X, y).transform(X)
    assert Z.dtype == np.float32 and np.isfinite(Z).all()
