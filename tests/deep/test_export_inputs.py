"""Deep export and backbone inputs (issue 37): grey images without a channel axis, a linear
learner passed to export_embedding, a backbone built for other channels, a stratified hold-out
of singletons."""

import numpy as np
import pytest
import torch
from sklearn.datasets import load_digits

from skdml import ECAML, DeepMetricTransformer
from skdml._training import validation_holdout
from skdml.deep import export_embedding
from skdml.deep.backbones import SmallResNet


@pytest.fixture(scope="module")
def digits():
    X, y = load_digits(return_X_y=True)
    keep = y < 5
    return (X[keep][:200] / 16.0).astype(np.float32), y[keep][:200]


def test_torchscript_export_takes_grey_images_without_a_channel_axis(digits, tmp_path):
    X, y = digits
    images = X.reshape(-1, 8, 8)
    net = DeepMetricTransformer(n_components=8, max_iter=1, device="cpu",
                                random_state=0).fit(images, y)
    model = torch.jit.load(export_embedding(net, tmp_path / "net.pt"))
    expected = net.transform(images[:5])
    for batch in (images[:5], images[:5, None]):  # (n, H, W) as transform takes, and (n, 1, H, W)
        np.testing.assert_allclose(model(torch.from_numpy(batch)).numpy(), expected, atol=1e-5)


def test_export_of_a_linear_learner_says_what_it_supports(digits, tmp_path):
    X, y = digits
    est = ECAML(n_components=4, max_iter=1, random_state=0).fit(X, y)
    with pytest.raises(TypeError, match="ECAML is a linear learner.*components_"):
        export_embedding(est, tmp_path / "e.pt")


def test_export_under_a_file_names_the_file(digits, tmp_path):
    X, y = digits
    net = DeepMetricTransformer(n_components=4, max_iter=1, device="cpu", random_state=0).fit(X, y)
    (tmp_path / "blocker").write_text("x")
    with pytest.raises(NotADirectoryError, match="blocker' is a file"):
        export_embedding(net, tmp_path / "blocker" / "net.pt")


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


def test_stratified_holdout_of_singletons_names_the_split_and_classes():
    y = np.repeat(np.arange(4), 5)
    with pytest.raises(ValueError, match=r"stratified validation split .*classes 0 \(5 samples\)"):
        validation_holdout(y, None, "auto", np.random.RandomState(0), scored_within=True)
    # a hold-out scored against the training part (the linear learners) still takes them
    train, val, split = validation_holdout(y, None, "auto", np.random.RandomState(0))
    assert split == "stratified" and len(val) == 4


def test_deep_fit_on_singleton_holdout_names_the_split():
    rng = np.random.RandomState(0)
    y = np.repeat(np.arange(4), 5)
    X = rng.randn(20, 6) + y[:, None]
    est = DeepMetricTransformer(n_components=3, max_iter=2, early_stopping=True, device="cpu",
                                random_state=0)
    with pytest.raises(ValueError, match="stratified validation split"):
        est.fit(X, y)
