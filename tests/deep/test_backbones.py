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


# audit 20 (mutation round 5): basic_block_is_residual
def test_a_basic_block_adds_its_input_back():
    from skdml.deep.backbones import BasicBlock

    torch.manual_seed(0)
    block = BasicBlock(4, 4).eval()
    with torch.no_grad():  # the residual branch silenced: the block is relu(x)
        block.bn2.weight.zero_()
        block.bn2.bias.zero_()
    x = torch.randn(2, 4, 6, 6)
    torch.testing.assert_close(block(x), torch.relu(x))


# audit 20 (mutation round 5): default_mlp_width_and_dropout
def test_default_vector_backbone_width_and_mlp_dropout():
    from torch import nn
    from skdml.deep import MLP
    from skdml.deep.backbones import default_backbone

    # documented width clip(2**ceil(log2 d), 32, 256), beside the skip of the input
    for d, width in ((5, 32), (100, 128), (200, 256), (256, 256)):
        net = default_backbone((d,))
        assert net.out_features == d + width
        assert net.eval()(torch.zeros(3, d)).shape == (3, d + width)
    dropped = [m for m in MLP(4, hidden=(8, 8), dropout=0.5).modules()
               if isinstance(m, nn.Dropout)]
    assert [m.p for m in dropped] == [0.5, 0.5]  # "dropout after each block"
    assert not any(isinstance(m, nn.Dropout) for m in MLP(4, hidden=(8,)).modules())


# audit 20 (mutation round 5): feature_extractor_values
def test_feature_extractor_normalises_then_averages_over_space():
    from torch import nn
    from skdml.deep import FeatureExtractor

    x = torch.rand(2, 3, 4, 5)
    mean, std = (0.5, 0.4, 0.3), (0.25, 0.5, 2.0)
    m, s = torch.tensor(mean).view(1, 3, 1, 1), torch.tensor(std).view(1, 3, 1, 1)
    norm = FeatureExtractor(nn.Identity(), mean=mean, std=std, pool=False)
    assert norm.normalizes_input and not FeatureExtractor(nn.Identity()).normalizes_input
    torch.testing.assert_close(norm(x), (x - m) / s)
    torch.testing.assert_close(FeatureExtractor(nn.Identity())(x), x.mean(dim=(2, 3)))
    with pytest.raises(ValueError, match="std must be positive"):
        FeatureExtractor(nn.Identity(), mean=(0.5,), std=(0.0,))


# audit 20 (mutation round 5): feature_layer_returning_a_tuple
def test_a_feature_layer_that_returns_a_tuple_gives_its_first_entry():
    from torch import nn
    from skdml.deep import FeatureExtractor

    class Pair(nn.Module):
        def forward(self, x):
            return x * 2, x * 3

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.pair = Pair()

        def forward(self, x):
            return self.pair(x)[1]

    x = torch.rand(2, 6)
    out = FeatureExtractor(Net(), layer="pair")(x)
    assert isinstance(out, torch.Tensor)
    torch.testing.assert_close(out, x * 2)


# audit 20 (mutation round 5): resnet_stages_halve_resolution
def test_small_resnet_stages_after_the_first_halve_the_resolution():
    net = SmallResNet(1, widths=(4, 8, 16), blocks_per_stage=1).eval()
    sizes = []
    for stage in net.stages:
        stage.register_forward_hook(lambda m, i, o: sizes.append(tuple(o.shape[1:])))
    assert net(torch.zeros(2, 1, 16, 16)).shape == (2, 16)
    assert sizes == [(4, 16, 16), (8, 8, 8), (16, 4, 4)]
    same = SmallResNet(1, widths=(4, 4), blocks_per_stage=1).eval()  # a strided stage that
    assert same(torch.zeros(2, 1, 8, 8)).shape == (2, 4)  # keeps its width needs a shortcut


# audit 20 (mutation round 5): smallcnn_pools_with_ceil
def test_small_cnn_halves_odd_sizes_upwards_and_flattens_without_global_pool():
    from skdml.deep import SmallCNN

    net = SmallCNN(1, widths=(4, 8, 8), global_pool=False).eval()
    assert net(torch.zeros(2, 1, 5, 5)).shape == (2, 8 * 2 * 2)  # 5 -> 3 -> 2 (ceil mode)
    tiny = SmallCNN(1, widths=(2, 2, 2, 2)).eval()
    assert tiny(torch.zeros(2, 1, 3, 3)).shape == (2, 2)  # 3 -> 2 -> 1 -> 1: no empty map
